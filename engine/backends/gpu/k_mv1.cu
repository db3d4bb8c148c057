// Single-vector decode matvec (one sequence; opt-in, LOOM_GPU_MV1=1): matvec() for a.single
// and a.nb == 1, over the chunk codecs of k_dot.cuh.
//
// An alternative to matvec_kernel (k_matvec.cu) for nb == 1: each block takes a contiguous range
// of rows (the grid is sized to the resident capacity, one wave), stages the activation vector
// once in shared memory (RMSNorm applied, per-16 sums for Q4_K's minimum term), and walks its
// rows R at a time with the next item's weights already loading (double-buffered in registers);
// partial sums are reduced per warp with shuffles and combined across warps once, in an epilogue
// that can also apply RoPE and store K/V. With `pdl` it is a programmatic dependent launch that
// loads its first weights before waiting for the previous kernel.
//
// Measured on the H200 (docs/benchmarks.md, 2026-11-30) it is slower than matvec_kernel: 4
// resident blocks of 4 warps per SM (128 registers) with one item of prefetch leave most
// cycles without an eligible warp (Nsight Compute: 52-68% "no eligible", loads outstanding),
// where matvec_kernel's 3584 short blocks keep more loads in flight. It stays as a starting
// point for a deeper pipeline (e.g. bulk copies into a shared-memory ring), not as a default.
#include <algorithm>

#include "engine/backends/gpu/k_dot.cuh"
#include "engine/backends/gpu/k_matvec.cuh"

namespace loom::gpu {
namespace {

/// Rows per item (weights loaded per thread before their arithmetic) of weight type T.
template <uint32_t T>
constexpr int kMv1Rows = T == kF16 || T == kBF16 ? 8 : T == kQ6_K ? 2 : 4;

/// Launch geometry of the single-vector kernel (computed on the host).
struct Mv1Plan {
    int units = 0;       ///< rows (Store/Add, over all segments) or outputs (SwiGLU)
    int pairs = 0;       ///< (units + 1) / 2: blocks take even-aligned unit ranges
    int nch = 0;         ///< chunks per row
    int kc = 0;          ///< chunks per thread per row
    int cols_pad = 0;    ///< staged activations (nch * elements per chunk, zero-padded)
    int red_groups = 0;  ///< row groups of the largest block range
};

template <uint32_t T, int R>
__global__ void __launch_bounds__(kMvThreads, 4) mv1_kernel(MatvecArgs a, Mv1Plan p) {
    using C = Chunk<T>;
    constexpr bool kQ4 = T == kQ4_K;
    constexpr int kWarps = kMvThreads / kWarp;
    pdl_trigger();
    LOOM_DYN_SMEM(float, smem);
    float* xs = smem;
    float* sums = xs + p.cols_pad;
    float* red = sums + (kQ4 ? p.cols_pad / 16 : 0);

    const bool swiglu = a.mode == MvMode::SwiGLU;
    const int per = swiglu ? R / 2 : R;  // units per row group
    const int G = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int u0 = min(2 * static_cast<int>(static_cast<int64_t>(b) * p.pairs / G), p.units);
    const int u1 = min(2 * static_cast<int>(static_cast<int64_t>(b + 1) * p.pairs / G), p.units);
    const int ngr = (u1 - u0 + per - 1) / per;
    const int kc = p.kc, nch = p.nch, cols = a.cols;
    const int t = static_cast<int>(threadIdx.x);
    const int lane = t % kWarp, warp = t / kWarp;
    const int nitems = ngr * kc;

    // Row pointers of a row group, computed once per group; rows past the block's range point at
    // the group's first row (loaded again, their sums never stored).
    auto group_rows = [&](int gi, const uint8_t** w) {
        const int o0 = u0 + gi * per;
        if (swiglu) {
            const size_t off = static_cast<size_t>(o0) * a.row_bytes;
#pragma unroll
            for (int r = 0; r < R / 2; ++r) {
                const size_t ro = o0 + r < u1 ? off + static_cast<size_t>(r) * a.row_bytes : off;
                w[r] = a.seg[0].w + ro;
                w[r + R / 2] = a.seg[1].w + ro;
            }
            return;
        }
        int local;
        const int s0 = seg_of(a, o0, local);
        const int seg_rows = s0 == 0 ? a.seg[0].rows : s0 == 1 ? a.seg[1].rows : a.seg[2].rows;
        const uint8_t* base = seg_w(a, s0) + static_cast<size_t>(local) * a.row_bytes;
        if (local + R <= seg_rows) {  // the usual case: the group lies in one segment
#pragma unroll
            for (int r = 0; r < R; ++r) w[r] = o0 + r < u1 ? base + static_cast<size_t>(r) * a.row_bytes : base;
            return;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (o0 + r < u1) {
                int lr;
                const int sr = seg_of(a, o0 + r, lr);
                w[r] = seg_w(a, sr) + static_cast<size_t>(lr) * a.row_bytes;
            } else {
                w[r] = base;
            }
        }
    };
    // Loads walk the items one ahead of the arithmetic: (group, chunk) cursors and pointers.
    const uint8_t* lw[R];
    int lg = 0, lk = 0;
    auto load_next = [&](typename C::Raw* buf) {
        if (lk == 0) group_rows(lg, lw);
        const int c = t + kMvThreads * lk;
        if (c < nch) {
#pragma unroll
            for (int r = 0; r < R; ++r) C::load(lw[r], c, cols, buf[r]);
        }
        if (++lk == kc) lk = 0, ++lg;
    };

    typename C::Raw ra[R] = {}, rb[R] = {};
    if (nitems > 0) load_next(ra);  // weights do not depend on the previous kernel
    pdl_wait();

    // Stage the activations (RMSNorm applied when norm_w is set, as rmsnorm() computes it).
    const float* xg = a.x;
    const bool vec = (cols & 3) == 0;
    if (a.norm_w) {
        __shared__ double s_red[kWarps];
        __shared__ float s_scale;
        double ss = 0;
        if (vec) {
            for (int i = t; i < cols / 4; i += kMvThreads) {
                const float4 f = reinterpret_cast<const float4*>(xg)[i];
                reinterpret_cast<float4*>(xs)[i] = f;
                ss += static_cast<double>(f.x) * f.x + static_cast<double>(f.y) * f.y +
                      static_cast<double>(f.z) * f.z + static_cast<double>(f.w) * f.w;
            }
        } else {
            for (int i = t; i < cols; i += kMvThreads) {
                const float f = xg[i];
                xs[i] = f;
                ss += static_cast<double>(f) * f;
            }
        }
        const float scale = block_rms_scale(ss, cols, a.norm_eps, s_red, &s_scale);
        const float* nw = a.norm_w;
        if (vec) {
            for (int i = t; i < cols / 4; i += kMvThreads) {
                float4 f = reinterpret_cast<float4*>(xs)[i];
                const float4 g = reinterpret_cast<const float4*>(nw)[i];
                f.x = f.x * scale * g.x, f.y = f.y * scale * g.y, f.z = f.z * scale * g.z, f.w = f.w * scale * g.w;
                reinterpret_cast<float4*>(xs)[i] = f;
            }
        } else {
            for (int i = t; i < cols; i += kMvThreads) xs[i] = xs[i] * scale * nw[i];
        }
    } else if (vec) {
        for (int i = t; i < cols / 4; i += kMvThreads)
            reinterpret_cast<float4*>(xs)[i] = reinterpret_cast<const float4*>(xg)[i];
    } else {
        for (int i = t; i < cols; i += kMvThreads) xs[i] = xg[i];
    }
    for (int i = cols + t; i < p.cols_pad; i += kMvThreads) xs[i] = 0.0f;
    __syncthreads();
    if constexpr (kQ4) {
        for (int r = t; r < p.cols_pad / 16; r += kMvThreads) {
            float sm = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) sm += xs[16 * r + i];
            sums[r] = sm;
        }
        __syncthreads();
        for (int i = t; i < p.cols_pad; i += kMvThreads) xs[i] *= 0x1p64f;  // exact
        __syncthreads();
    }

    Q4Sel q4s{};
    if constexpr (kQ4) q4s = q4_sel((t & 7) >> 1);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;

    int cg = 0, ck = 0;  // the arithmetic's cursor
    auto compute_next = [&](const typename C::Raw* buf) {
        const int c = t + kMvThreads * ck;
        if (c < nch) {
            float xv[C::kElems];
#pragma unroll
            for (int run = 0; run < C::kRuns; ++run) {
                const int s0 = C::run_start(c, run);
#pragma unroll
                for (int i = 0; i < C::kRunLen; i += 4) {
                    const float4 f = *reinterpret_cast<const float4*>(xs + s0 + i);
                    float* o = xv + run * C::kRunLen + i;
                    o[0] = f.x, o[1] = f.y, o[2] = f.z, o[3] = f.w;
                }
            }
            if constexpr (kQ4) {
                float sx[2];
                sx[0] = sums[C::run_start(c, 0) / 16];
                sx[1] = sums[C::run_start(c, 1) / 16];
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] += q4_dot1(buf[r], xv, sx, q4s);
            } else if constexpr (C::kPlain) {  // staged activations are zero past cols
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] += plain_dot<C, false>(buf[r], c, cols, xv);
            } else {
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] += C::dot(buf[r], c, xv, nullptr);
            }
        }
        if (++ck == kc) {  // the group's last chunk: reduce its rows over the warp
            const float v = warp_sum_rows<R>(acc, lane);
            if (lane % (kWarp / R) == 0) red[(cg * R + lane / (kWarp / R)) * kWarps + warp] = v;
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = 0.0f;
            ck = 0;
            ++cg;
        }
    };

    for (int it = 0; it < nitems; it += 2) {
        if (it + 1 < nitems) load_next(rb);
        compute_next(ra);
        if (it + 2 < nitems) load_next(ra);
        if (it + 1 < nitems) compute_next(rb);
    }
    __syncthreads();

    // Epilogue: one thread per unit of the block's range.
    auto row_sum = [&](int gi, int r) {
        float v = 0.0f;
        for (int w = 0; w < kWarps; ++w) v += red[(gi * R + r) * kWarps + w];
        return v;
    };
    for (int j = t; j < u1 - u0; j += kMvThreads) {
        const int gi = j / per, r = j - gi * per, o = u0 + j;
        if (swiglu) {
            const float g = row_sum(gi, r), u = row_sum(gi, r + per);
            a.seg[0].y[o] = g / (1.0f + expf(-g)) * u;
            continue;
        }
        const float v = row_sum(gi, r);
        int local;
        const int s = seg_of(a, o, local);
        float vp = 0.0f;
        const int role = s == 0 ? a.seg_role[0] : s == 1 ? a.seg_role[1] : a.seg_role[2];
        if (role != 0) {  // RoPE partner (u0 is even)
            const int jp = j ^ 1;
            vp = row_sum(jp / per, jp - (jp / per) * per);
        }
        store_row(a, s, local, 0, v, vp);
    }
}

template <uint32_t T>
void launch_mv1(const MatvecArgs& a, gpuStream_t s) {
    constexpr int R = kMv1Rows<T>;
    using C = Chunk<T>;
    const bool swiglu = a.mode == MvMode::SwiGLU;
    Mv1Plan p;
    p.units = matvec_units(a);
    if (p.units <= 0) return;
    p.pairs = (p.units + 1) / 2;
    p.nch = (a.cols + C::kElems - 1) / C::kElems;
    p.kc = (p.nch + kMvThreads - 1) / kMvThreads;
    p.cols_pad = p.nch * C::kElems;
    const int per = swiglu ? R / 2 : R;
    constexpr int kWarps = kMvThreads / kWarp;
    const size_t fixed = sizeof(float) * static_cast<size_t>(p.cols_pad + (T == kQ4_K ? p.cols_pad / 16 : 0));
    auto k = mv1_kernel<T, R>;
    auto smem_for = [&](int grid) {
        const int most = 2 * ((p.pairs + grid - 1) / grid);
        p.red_groups = (most + per - 1) / per;
        return fixed + sizeof(float) * static_cast<size_t>(p.red_groups) * R * kWarps;
    };
    const int nsm = device_sm_count();
    int grid = std::min(p.pairs, nsm * resident_blocks(k, smem_for(nsm * 4)));
    size_t smem = smem_for(grid);
    const int cap = nsm * resident_blocks(k, smem);
    if (cap < grid) {
        grid = cap;
        smem = smem_for(grid);
    }
    if (smem > 48 * 1024) LOOM_GPU_CHECK(gpuFuncSetMaxDynamicSmem(k, static_cast<int>(smem)));
    LOOM_LAUNCH_PDL(a.pdl, k, static_cast<unsigned>(grid), kMvThreads, smem, s, a, p);
    LOOM_GPU_CHECK_LAUNCH();
}


}  // namespace

void matvec_single(const MatvecArgs& a, gpuStream_t s) {
    with_type(a.type, "matvec", [&](auto t) { launch_mv1<decltype(t)::value>(a, s); });
}

}  // namespace loom::gpu
