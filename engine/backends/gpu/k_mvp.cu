// Pipelined single-vector decode matvec (one sequence; opt-in, LOOM_GPU_MVP=1): matvec() for
// a.pipelined and a.nb == 1, weight types F16, BF16, Q4_K and Q6_K, over the chunk codecs of
// k_dot.cuh.
//
// Measured on the H200 (docs/benchmarks.md, 2026-11-30, second session) it is slower than the
// batched kernel: 0.59x (F16) and 0.78x (Q4_K_M) of its decode rate. Nsight Compute on the Q4_K
// gate/up launch: 12 warps per SM (shared memory limits it to three blocks), 59% of cycles with
// no eligible warp, about 5.4 issued instructions per weight; the per-unit barrier and copy loop
// cost about as much as the arithmetic. It stays as a tested starting point, not a default.
//
// The batched kernel (k_matvec.cu) loads each block's rows into registers, waits, computes and
// exits, so a multiprocessor alternates between waiting on memory and computing; Nsight Compute
// showed a third of the cycles with no eligible warp and the Q4_K matvecs at 45% of the copy
// bandwidth. Here a grid of resident blocks (one wave) streams its units through a ring of
// kStages shared-memory stages with asynchronous copies (cp.async, the CUDA C++ Programming
// Guide's "Asynchronous Data Copies" and its multi-stage pipeline pattern): while the block's
// warps compute on one stage, the next kStages - 1 are in flight, and no register holds a load
// in flight.
//
// A unit is R rows of a row group times a span of 128 chunks (one chunk per thread: 4096
// columns of Q4_K or Q6_K, 1024 of F16); a group's units are consecutive, its partial sums stay
// in registers across its spans and are reduced over the warp (warp_sum_rows), then over the
// block through shared memory in the next unit's barrier, and stored by the epilogue of the
// batched kernel (plain, residual add, SwiGLU, RoPE + K/V cache). Activations for a span are
// loaded once (RMSNorm applied when norm_w is set; Q4_K's per-16 sums and 2^64 scaling) and
// reused for every group while the span does not change (every unit when the row has one span).
// With `pdl` the first kStages - 1 units' weights are requested before the kernel waits on the
// previous one (programmatic dependent launch). The products and their order within a chunk
// are those of the batched kernel; only the order of the final additions differs.
#include <algorithm>

#include "engine/backends/gpu/k_dot.cuh"
#include "engine/backends/gpu/k_matvec.cuh"

namespace loom::gpu {
namespace {

constexpr int kMvpRows = 8;  // rows per unit (4 outputs in SwiGLU mode)

/// Bytes of one chunk of weight type T in its device row (a row is a run of them).
template <uint32_t T>
constexpr int kChunkBytes = T == kQ4_K ? 144 / 8 : T == kQ6_K ? 224 / 8 : 16;
/// Bytes of one span (kMvThreads chunks) of a row: 2304 (Q4_K), 3584 (Q6_K), 2048 (F16, BF16).
template <uint32_t T>
constexpr int kSpanBytes = kMvThreads * kChunkBytes<T>;
/// Ring stages: 4 x 18 KiB (Q4_K), 3 x 28 KiB (Q6_K), 4 x 16 KiB (F16, BF16) per block.
template <uint32_t T>
constexpr int kStages = T == kQ6_K ? 3 : 4;

/// Copies 16 bytes from global src to shared dst without holding registers (cp.async.cg, which
/// bypasses L1); completion is awaited with cp_async_wait. A plain copy on HIP and the emulator.
LOOM_DEV void cp_async16(void* dst, const void* src) {
#if defined(LOOM_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
    *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}
/// Closes the thread's current group of cp_async16 copies.
LOOM_DEV void cp_async_commit() {
#if defined(LOOM_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/// Waits until at most N of the thread's committed copy groups are still in flight.
template <int N>
LOOM_DEV void cp_async_wait() {
#if defined(LOOM_GPU_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/// Launch geometry (host-computed).
struct MvpPlan {
    int units = 0;   ///< outputs: rows over all segments (Store/Add) or SwiGLU outputs
    int groups = 0;  ///< row groups of kMvpRows rows (kMvpRows / 2 outputs in SwiGLU mode)
    int nch = 0;     ///< chunks per row
    int nspan = 0;   ///< spans per row: ceil(nch / kMvThreads)
};

template <uint32_t T>
__global__ void __launch_bounds__(kMvThreads) mvp_kernel(MatvecArgs a, MvpPlan p) {
    using C = Chunk<T>;
    constexpr int R = kMvpRows, S = kStages<T>, SB = kSpanBytes<T>, CB = kChunkBytes<T>;
    constexpr int kWarps = kMvThreads / kWarp;
    constexpr bool kQ4 = T == kQ4_K;
    pdl_trigger();
    LOOM_DYN_SMEM(uint8_t, ring);  // [S][R][SB]
    __shared__ float red[2][R][kWarps];
    __shared__ double s_red[kWarps];
    __shared__ float s_scale;

    const bool swiglu = a.mode == MvMode::SwiGLU;
    const int per = swiglu ? R / 2 : R;
    const int G = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int t = static_cast<int>(threadIdx.x), lane = t % kWarp, warp = t / kWarp;
    const int ngb = b < p.groups ? (p.groups - 1 - b) / G + 1 : 0;  // groups b, b + G, ...
    const int nunits = ngb * p.nspan;
    const int row_used = p.nch * CB;  // bytes of a row that hold its chunks

    // ---- producer: unit u's rows into stage u % S -------------------------------------------
    const uint8_t* lw[R];  // row pointers of the group being issued (null: past the end)
    int issue_gi = -1;
    auto issue = [&](int u) {
        if (u < nunits) {
            const int gi = u / p.nspan, k = u - gi * p.nspan;
            if (gi != issue_gi) {
                issue_gi = gi;
                const int o0 = (b + G * gi) * per;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (swiglu) {
                        const int o = o0 + (r % (R / 2));
                        lw[r] = o < p.units ? (r < R / 2 ? a.seg[0].w : a.seg[1].w) + static_cast<size_t>(o) * a.row_bytes
                                            : nullptr;
                    } else if (o0 + r < p.units) {
                        int local;
                        const int s = seg_of(a, o0 + r, local);
                        lw[r] = seg_w(a, s) + static_cast<size_t>(local) * a.row_bytes;
                    } else {
                        lw[r] = nullptr;
                    }
                }
            }
            uint8_t* dst = ring + static_cast<size_t>(u % S) * R * SB;
            const int off = k * SB, n16 = min(SB, row_used - off) / 16;
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (lw[r])
                    for (int i = t; i < n16; i += kMvThreads) cp_async16(dst + r * SB + 16 * i, lw[r] + off + 16 * i);
        }
        cp_async_commit();  // possibly empty: keeps one group per unit
    };

#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(s);  // weights do not depend on the previous kernel
    pdl_wait();

    float scale = 1.0f;
    if (a.norm_w) {  // RMSNorm of x, as matvec_kernel computes it
        double ss = 0;
#pragma unroll 8
        for (int i = t; i < a.cols; i += kMvThreads) ss += static_cast<double>(a.x[i]) * a.x[i];
        scale = block_rms_scale(ss, a.cols, a.norm_eps, s_red, &s_scale);
    }

    // ---- epilogue of group gi (after a barrier that follows its reduction) -----------------
    auto finish = [&](int gi) {
        if (t >= per) return;
        const int o = (b + G * gi) * per + t;
        if (o >= p.units) return;
        const float(*rr)[kWarps] = red[gi & 1];
        float v = 0.0f;
        for (int w = 0; w < kWarps; ++w) v += rr[t][w];
        if (swiglu) {
            float u = 0.0f;
            for (int w = 0; w < kWarps; ++w) u += rr[t + R / 2][w];
            a.seg[0].y[o] = v / (1.0f + expf(-v)) * u;
            return;
        }
        float vp = 0.0f;  // RoPE partner (groups start at even rows)
        for (int w = 0; w < kWarps; ++w) vp += rr[t ^ 1][w];
        int local;
        const int s = seg_of(a, o, local);
        store_row(a, s, local, 0, v, vp);
    };

    // ---- consumer ------------------------------------------------------------------------
    Q4Sel q4s{};
    if constexpr (kQ4) q4s = q4_sel((t & 7) >> 1);  // chunk c = 128 k + t: c % 8 == t % 8
    float xv[C::kElems] = {}, sx[2] = {0.0f, 0.0f};
    int xk = -1;  // span whose activations xv holds
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    int pending = -1;  // group whose block-level sums wait for the next barrier

    for (int u = 0; u < nunits; ++u) {
        cp_async_wait<S - 2>();  // unit u's copies (this thread's) have landed
        __syncthreads();         // ... and every thread's; stage (u - 1) % S is free again
        if (pending >= 0) finish(pending), pending = -1;
        issue(u + S - 1);
        const int gi = u / p.nspan, k = u - gi * p.nspan;
        const int c = k * kMvThreads + t;
        if (c < p.nch) {
            if (k != xk) {
                xk = k;
                load_x<C>(a.x, c, a.cols, xv, a.norm_w, scale);
                if constexpr (kQ4) {
                    run_sums<C>(xv, sx);
#pragma unroll
                    for (int i = 0; i < C::kElems; ++i) xv[i] *= 0x1p64f;  // exact
                }
            }
            const uint8_t* st = ring + static_cast<size_t>(u % S) * R * SB;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                typename C::Raw raw;
                C::load(st + r * SB, t, a.cols, raw);  // chunk t of the span
                if constexpr (kQ4) acc[r] += q4_dot1(raw, xv, sx, q4s);
                else if constexpr (C::kPlain) acc[r] += plain_dot<C, false>(raw, t, a.cols, xv);
                else acc[r] += C::dot(raw, t, xv, sx);
            }
        }
        if (k == p.nspan - 1) {
            const float v = warp_sum_rows<R>(acc, lane);
            if (lane % (kWarp / R) == 0) red[gi & 1][lane / (kWarp / R)][warp] = v;
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = 0.0f;
            pending = gi;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (pending >= 0) finish(pending);
}

template <uint32_t T>
void launch_mvp(const MatvecArgs& a, gpuStream_t s) {
    using C = Chunk<T>;
    constexpr int R = kMvpRows;
    const bool swiglu = a.mode == MvMode::SwiGLU;
    MvpPlan p;
    p.units = matvec_units(a);
    if (p.units <= 0) return;
    const int per = swiglu ? R / 2 : R;
    p.groups = (p.units + per - 1) / per;
    p.nch = a.cols / C::kElems;
    p.nspan = (p.nch + kMvThreads - 1) / kMvThreads;
    const size_t smem = static_cast<size_t>(kStages<T>) * R * kSpanBytes<T>;
    auto k = mvp_kernel<T>;
    static const bool attr = [&] {
        if (smem > 48 * 1024) LOOM_GPU_CHECK(gpuFuncSetMaxDynamicSmem(k, static_cast<int>(smem)));
        return true;
    }();
    (void)attr;
    // One wave of resident blocks, as few as keep the groups per block the same.
    const int cap = device_sm_count() * resident_blocks(k, smem);
    const int per_block = (p.groups + cap - 1) / cap;
    const int grid = (p.groups + per_block - 1) / per_block;
    LOOM_LAUNCH_PDL(a.pdl, k, static_cast<unsigned>(grid), kMvThreads, smem, s, a, p);
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace

bool matvec_pipelined_supports(uint32_t type, int cols) {
    switch (type) {
        case kQ4_K: case kQ6_K: return cols % 256 == 0;
        case kF16: case kBF16: return cols % 8 == 0;
        default: return false;
    }
}

void matvec_pipelined(const MatvecArgs& a, gpuStream_t s) {
    switch (a.type) {
        case kQ4_K: launch_mvp<kQ4_K>(a, s); break;
        case kQ6_K: launch_mvp<kQ6_K>(a, s); break;
        case kF16: launch_mvp<kF16>(a, s); break;
        case kBF16: launch_mvp<kBF16>(a, s); break;
        default: throw GpuError("matvec_pipelined: unsupported type " + std::to_string(a.type));
    }
}

}  // namespace loom::gpu
