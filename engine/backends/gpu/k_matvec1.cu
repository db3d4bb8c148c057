// The single-vector decode matvec for quantized weights (Q4_K, Q6_K, Q8_0): kernels.hpp
// matvec() takes it for one activation vector (matvec1_takes) when MatvecArgs::single is set
// (the engine's default; --no-matvec-single) and fixed_tiling is not. The kernel is written for
// NB vectors; only NB = 1 is instantiated (two a launch lost to the batched kernel, 2026-12-06:
// docs/benchmarks.md).
//
// Against the batched kernel (k_matvec.cu), which a warp runs for one chunk of 8 rows and then
// reduces through shared memory, this kernel stages the activations once a block and lets each
// warp stream whole rows:
//  - The block (8 warps) stages x in shared memory, normalised by RMSNorm when norm_w is set
//    (so quantized models fuse the norm as plain ones do), times 2^64 for the K-quants'
//    denormal dot products (k_dot.cuh q4_dot1, q6_dot1), with each 16-element run's sum beside
//    it.
//    The staged layout pads 4 floats after every 32 (and every 64) elements, so that the eight
//    lanes of a 16-byte shared load phase, which read the runs of eight chunks of a block, hit
//    eight distinct groups of four banks in each of the three chunk orders (checked by
//    enumerating the lanes' addresses).
//  - Each warp takes groups of RW rows (RW / 2 outputs in SwiGLU mode); lane l takes chunks l,
//    l + 32, ... of every row, with the next chunk's loads issued before the current chunk's
//    products, and a group's sums are reduced by warp shuffles alone: no barrier after the
//    staging. A matrix whose groups the device holds at once (the occupancy calculator's
//    blocks) takes one group a warp (LOOP = false). A larger one (gate | up, the logits) takes
//    at most the resident blocks, whose warps loop over the groups with the loads running ahead
//    across group boundaries, so that a block stages x once for all its rows and no load waits
//    for a new block's staging; the fewest blocks that need the same number of rounds, so that
//    the warps' shares differ by one group at most (against one group a warp: gate | up 0.94,
//    the logits 0.79 of the time on an H100; docs/benchmarks.md).
//  - The epilogue (store, residual add, SwiGLU, RoPE and the paged K/V store) is the batched
//    kernel's (k_matvec.cuh store_row).
//
// Sources: the GGUF block layouts (ggml-common.h; k_dot.cuh's codecs); CUDA C++ Programming
// Guide, "Shared Memory" (bank conflicts of 128-bit accesses, served a quarter warp at a time)
// and "Warp Shuffle Functions"; RMSNorm (Zhang and Sennrich 2019) as rmsnorm() computes it.
#include <map>
#include <string>

#include "engine/backends/gpu/k_common.cuh"
#include "engine/backends/gpu/k_dot.cuh"
#include "engine/backends/gpu/k_matvec.cuh"

namespace loom::gpu {
namespace {

constexpr int kM1Threads = 256;
constexpr int kM1Warps = kM1Threads / kWarp;

// Staged position of activation e: 4 floats of padding after every 32 elements, and for the
// K-quants after every 64 as well (see the header).
template <uint32_t T>
LOOM_HD int xpad(int e) {
    return e + 4 * ((e >> 5) + (T == kQ8_0 ? 0 : (e >> 6)));
}

// Floats of staged activations for K columns (whole 32-element runs).
template <uint32_t T>
LOOM_HD int staged_floats(int K) {
    return xpad<T>(K) + 4;
}

// Floats of shared memory a vector: its staged activations, then (K-quants) 2 run sums a chunk.
template <uint32_t T>
LOOM_HD int vector_floats(int K) {
    return staged_floats<T>(K) + (T == kQ8_0 ? 0 : 2 * (K / 32));
}

// Index 2 c + run of the 16-element run that starts at row element e (a multiple of 16) in
// the chunk order of T (Chunk<T>::run_start inverted). Q4_K: sub-block sb = (e % 256) / 32 is
// run sb % 2 of chunk pair sb / 2, and the half of the sub-block picks the chunk of the pair.
// Q6_K: element 128 n + 64 run + 32 kk + 16 h of a block is run `run` of chunk 4 n + 2 kk + h.
template <uint32_t T>
LOOM_DEV int run_slot(int e) {
    const int o = e & 255, b = e >> 8;
    if constexpr (T == kQ4_K) {
        const int q = o >> 4, sb = q >> 1;
        return 2 * (8 * b + 2 * (sb >> 1) + (q & 1)) + (sb & 1);
    } else {
        const int n = o >> 7, run = (o >> 6) & 1, kk = (o >> 5) & 1, h = (o >> 4) & 1;
        return 2 * (8 * b + 4 * n + 2 * kk + h) + run;
    }
}

/// RW weight rows a warp at a time (SwiGLU: RW / 2 outputs, gate rows then up rows), for NB
/// activation vectors (a.nb == NB); MB blocks an SM asked of the register allocator. Warp w of
/// block b takes row group g0 = 8 b + w and, with LOOP, g0 + 8 gridDim, g0 + 16 gridDim, ...
/// (without, the grid must cover every group).
template <uint32_t T, int RW, int MB, int NB, bool LOOP>
__global__ void __launch_bounds__(kM1Threads, MB) matvec1_kernel(MatvecArgs a) {
    using C = Chunk<T>;
    constexpr bool kQ4 = T == kQ4_K;
    constexpr bool kDenorm = kQ4 || T == kQ6_K;  // q4_dot1 / q6_dot1: x times 2^64, run sums
    static_assert(RW % 2 == 0, "rows come in RoPE / SwiGLU pairs");
    // Vector b's [staged_floats(K)] activations, then (kDenorm) [2 nch] run sums, at vector_floats(K) b.
    LOOM_DYN_SMEM(float, sm);
    __shared__ double s_red[kM1Warps];
    const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
    const int K = a.cols, n4 = K / 4, nch = C::count(K), vf = vector_floats<T>(K);

    // This warp's groups: `mine` of them, each `steps` chunk steps (lane l takes chunks l, l +
    // 32, ... of each row).
    const bool swiglu = a.mode == MvMode::SwiGLU;
    const int per_warp = swiglu ? RW / 2 : RW;
    const int total = matvec_units(a);
    const int groups = (total + per_warp - 1) / per_warp;
    const int nwarps = static_cast<int>(gridDim.x) * kM1Warps;
    const int g0 = static_cast<int>(blockIdx.x) * kM1Warps + warp;
    const int mine = g0 >= groups ? 0 : LOOP ? (groups - 1 - g0) / nwarps + 1 : 1;
    const int steps = (nch + kWarp - 1) / kWarp, nsteps = mine * steps;

    // The rows of the k-th group of this warp: segment, row in it, and (loads) the weights.
    auto locate = [&](int k, int(&seg)[RW], int(&loc)[RW]) {
        const int u0 = (g0 + k * nwarps) * per_warp;
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            if (swiglu) {
                loc[r] = u0 + r % (RW / 2);
                seg[r] = r < RW / 2 ? 0 : 1;
            } else {
                seg[r] = seg_of(a, u0 + r, loc[r]);
            }
        }
        return u0;
    };
    using Raw = typename C::Raw;
    const uint8_t* wr[RW];
    auto point = [&](int k) {  // wr: the rows of this warp's k-th group (row 0 past the end)
        int seg[RW], loc[RW];
        const int u0 = locate(k, seg, loc);
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            const bool valid = (swiglu ? loc[r] : u0 + r) < total;
            wr[r] = valid ? seg_w(a, seg[r]) + static_cast<size_t>(loc[r]) * a.row_bytes : a.seg[0].w;
        }
    };
    auto load = [&](Raw(&raw)[RW], int c) {
#pragma unroll
        for (int r = 0; r < RW; ++r) C::load(wr[r], c, K, raw[r]);
    };
    int lk = 0, lj = 0;  // the next load's group (of this warp's) and step
    auto load_next = [&](Raw(&raw)[RW]) {
        if (lj == 0) point(lk);
        const int c = lane + kWarp * lj;
        if (c < nch) load(raw, c);
        if (++lj == steps) lj = 0, ++lk;
    };

    // 1. Each x is staged (times the RMSNorm scale and weights, and 2^64 for the K-quants) with
    // its run sums.
#pragma unroll 1
    for (int b = 0; b < NB; ++b) {
        const float* xb = a.x + b * a.x_stride;
        float* sx = sm + b * vf;
        float* csum = sx + staged_floats<T>(K);
        float scale = 1.0f;
        if (a.norm_w) {
            double ss = 0.0;
            for (int i = tid; i < n4; i += kM1Threads) {
                const float4 f = reinterpret_cast<const float4*>(xb)[i];
                ss += static_cast<double>(f.x) * f.x + static_cast<double>(f.y) * f.y + static_cast<double>(f.z) * f.z +
                      static_cast<double>(f.w) * f.w;
            }
            const double t = block_sum(ss, s_red);
            scale = static_cast<float>(1.0 / sqrt(t / K + static_cast<double>(a.norm_eps)));
        }
        // K-quants: K is a multiple of 256, so every warp runs whole iterations (the sums shuffle).
        for (int i = tid; i < n4; i += kM1Threads) {
            float4 f = reinterpret_cast<const float4*>(xb)[i];
            if (a.norm_w) {
                const float4 g = reinterpret_cast<const float4*>(a.norm_w)[i];
                f.x = f.x * scale * g.x, f.y = f.y * scale * g.y, f.z = f.z * scale * g.z, f.w = f.w * scale * g.w;
            }
            if constexpr (kDenorm) {
                float s = (f.x + f.y) + (f.z + f.w);
                s += shfl_xor(s, 1);
                s += shfl_xor(s, 2);
                if ((i & 3) == 0) csum[run_slot<T>(4 * i)] = s;
                constexpr float k64 = 0x1p64f;  // exact
                f.x *= k64, f.y *= k64, f.z *= k64, f.w *= k64;
            }
            *reinterpret_cast<float4*>(sx + xpad<T>(4 * i)) = f;
        }
    }
    __syncthreads();
    if (nsteps == 0) return;  // no barrier follows

    // 2. The products, the loads a step ahead; after a group's last step its sums by shuffles
    // (every lane gets each row's), then lane NB r + b stores row r of vector b.
    float acc[RW][NB];
#pragma unroll
    for (int r = 0; r < RW; ++r)
#pragma unroll
        for (int b = 0; b < NB; ++b) acc[r][b] = 0.0f;
    Q4Sel q4s{};
    if constexpr (kQ4) q4s = q4_sel((lane & 7) >> 1);  // c % 8 == lane % 8 for every chunk c of the lane
    auto finish = [&](int k) {
        int seg[RW], loc[RW];
        const int u0 = locate(k, seg, loc);
        float v[RW][NB];
#pragma unroll
        for (int r = 0; r < RW; ++r)
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                v[r][b] = warp_sum(acc[r][b]);
                acc[r][b] = 0.0f;
            }
        if (swiglu) {
#pragma unroll
            for (int r = 0; r < RW / 2; ++r)
#pragma unroll
                for (int b = 0; b < NB; ++b)
                    if (lane == NB * r + b && loc[r] < total) {
                        const float g = v[r][b], u = v[r + RW / 2][b];
                        a.seg[0].y[b * a.y_stride + loc[r]] = g / (1.0f + expf(-g)) * u;
                    }
            return;
        }
#pragma unroll
        for (int r = 0; r < RW; ++r)
#pragma unroll
            for (int b = 0; b < NB; ++b)
                if (lane == NB * r + b && u0 + r < total) store_row(a, seg[r], loc[r], b, v[r][b], v[r ^ 1][b]);
    };
    auto dot = [&](const Raw(&raw)[RW], int c) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const float* sx = sm + b * vf;
            float xv[C::kElems], sums[2] = {0.0f, 0.0f};
#pragma unroll
            for (int run = 0; run < C::kRuns; ++run) {
                const float* p = sx + xpad<T>(C::run_start(c, run));
#pragma unroll
                for (int i = 0; i < C::kRunLen; i += 4) {
                    const float4 f = *reinterpret_cast<const float4*>(p + i);
                    float* o = xv + run * C::kRunLen + i;
                    o[0] = f.x, o[1] = f.y, o[2] = f.z, o[3] = f.w;
                }
            }
            if constexpr (kDenorm) {
                const float2 s2 = *reinterpret_cast<const float2*>(sx + staged_floats<T>(K) + 2 * c);
                sums[0] = s2.x, sums[1] = s2.y;
            }
#pragma unroll
            for (int r = 0; r < RW; ++r) {
                if constexpr (kQ4) acc[r][b] += q4_dot1(raw[r], xv, sums, q4s);
                else if constexpr (T == kQ6_K) acc[r][b] += q6_dot1(raw[r], c, xv, sums);
                else acc[r][b] += C::dot(raw[r], c, xv, sums);
            }
        }
    };
    Raw ra[RW], rb[RW];
    if constexpr (!LOOP) {  // one group: lane l's chunks l, l + 32, ... of its rows
        point(0);
        int c = lane;
        if (c < nch) load(ra, c);
        for (; c < nch; c += 2 * kWarp) {  // two register sets, alternating without copies
            const int c1 = c + kWarp;
            if (c1 < nch) load(rb, c1);
            dot(ra, c);
            if (c1 < nch) {
                if (c1 + kWarp < nch) load(ra, c1 + kWarp);
                dot(rb, c1);
            }
        }
        finish(0);
        return;
    }
    int ck = 0, cj = 0;  // the next products' group and step
    auto products = [&](const Raw(&raw)[RW]) {
        const int c = lane + kWarp * cj;
        if (c < nch) dot(raw, c);
        if (++cj == steps) {
            finish(ck);
            cj = 0, ++ck;
        }
    };
    load_next(ra);
    if (nsteps > 1) load_next(rb);
    for (int s = 0; s < nsteps; s += 2) {  // two register sets, alternating without copies
        products(ra);
        if (s + 2 < nsteps) load_next(ra);
        if (s + 1 < nsteps) {
            products(rb);
            if (s + 3 < nsteps) load_next(rb);
        }
    }
}

// Raises kernel K's dynamic shared memory limit to `smem` where that is above the default and
// above what was set before (the staged activations grow with the columns). Throws GpuError
// when the runtime refuses.
template <auto K>
void raise_smem(size_t smem) {
    static size_t limit = kDefaultDynSmemBytes;
    if (smem <= limit) return;
    LOOM_GPU_CHECK(gpuFuncSetMaxDynamicSmem(K, static_cast<int>(smem)));
    limit = smem;
}

// Warps of kernel K with `smem` bytes of dynamic shared memory a block that the device holds at
// once: the occupancy calculator's blocks an SM (CUDA; K's limit raised first, as it counts
// it) times the SM count and kM1Warps; `mb` (K's __launch_bounds__ minimum) blocks an SM
// elsewhere (HIP, the emulator). Remembered per size.
template <auto K>
int64_t resident_warps(size_t smem, int mb) {
    static std::map<size_t, int64_t> known;
    const auto it = known.find(smem);
    if (it != known.end()) return it->second;
    int per_sm = mb;
#if defined(LOOM_GPU_CUDA)
    raise_smem<K>(smem);
    int v = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, K, kM1Threads, smem) == cudaSuccess && v > 0) per_sm = v;
#endif
    return known[smem] = int64_t{per_sm} * qgemm_sm_count() * kM1Warps;
}

// Launches K on `blocks` blocks of `smem` bytes.
template <auto K>
void launch_k(int64_t blocks, size_t smem, const MatvecArgs& a, gpuStream_t s) {
    raise_smem<K>(smem);
    LOOM_LAUNCH(K, static_cast<unsigned>(blocks), kM1Threads, smem, s, a);
    LOOM_GPU_CHECK_LAUNCH();
}

// The launch shape: 2 rows a warp. A matrix whose row groups the device holds at once takes one
// round on blocks of the MB1 instantiation (3 blocks an SM asked of the register allocator for
// Q4_K and Q8_0: 80 registers; 2 for Q6_K: 128 registers; none spilled with nvcc 13.0),
// one group a warp; a larger one loops on the 2-block instantiation, with the fewest blocks that
// take the same number of rounds, so that the warps' shares differ by one group at most. On an
// H100 (2026-12-06, the 8B Q4_K_M step) 2 rows and 3 blocks beat 2 rows and 2 blocks for every
// type (4.155 against 3.883 ms), 2 and 3 for every type (3.937), and 4 rows a warp with 1 or 2
// blocks (4.406, 4.503), all on one round.
template <uint32_t T>
void matvec1_t(const MatvecArgs& a, gpuStream_t s) {
    constexpr int RW = 2, MB1 = T == kQ6_K ? 2 : 3;
    constexpr auto kOne = matvec1_kernel<T, RW, MB1, 1, false>;
    constexpr auto kLoop = matvec1_kernel<T, RW, 2, 1, true>;
    const int per_warp = a.mode == MvMode::SwiGLU ? RW / 2 : RW;
    const int64_t groups = (matvec_units(a) + per_warp - 1) / per_warp;
    const size_t smem = static_cast<size_t>(vector_floats<T>(a.cols)) * sizeof(float);
    const int64_t forced = int64_t{a.max_blocks} * kM1Warps;
    if (groups <= (forced > 0 ? forced : resident_warps<kOne>(smem, MB1)))
        return launch_k<kOne>((groups + kM1Warps - 1) / kM1Warps, smem, a, s);
    const int64_t res = forced > 0 ? forced : resident_warps<kLoop>(smem, 2);
    const int64_t rounds = (groups + res - 1) / res;
    launch_k<kLoop>((groups + rounds * kM1Warps - 1) / (rounds * kM1Warps), smem, a, s);
}

}  // namespace

bool matvec1_takes(const MatvecArgs& a) {
    const bool type = a.type == kQ4_K || a.type == kQ6_K || a.type == kQ8_0;
    return a.single && type && !a.fixed_tiling && a.nb == 1 && a.cols > 0 && a.cols % 32 == 0;
}

void matvec1(const MatvecArgs& a, gpuStream_t s) {
    switch (a.type) {
        case kQ4_K: matvec1_t<kQ4_K>(a, s); break;
        case kQ6_K: matvec1_t<kQ6_K>(a, s); break;
        case kQ8_0: matvec1_t<kQ8_0>(a, s); break;
        default: throw GpuError("matvec1: unsupported type " + std::to_string(a.type));
    }
}

}  // namespace loom::gpu
