// What the two decode matvec kernels share (k_matvec.cu's batched one, k_mv1.cu's single-vector
// one): the block size, the addressing of a fused launch's segments, the epilogue's row store
// (plain, residual add, RoPE, K/V cache), and the dispatch of a weight type to its template.
#pragma once

#include <string>
#include <type_traits>

#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {

/// The opt-in single-vector matvec (k_mv1.cu): matvec() for a.single and a.nb == 1. Throws
/// GpuError for a weight type other than F32, F16, BF16, Q8_0, Q4_K, Q6_K, or a failed launch.
void matvec_single(const MatvecArgs& a, gpuStream_t s);

/// The pipelined matvec (k_mvp.cu): matvec() for a.pipelined and a.nb == 1 when
/// matvec_pipelined_supports(a.type, a.cols). Throws GpuError for another type or a failed launch.
void matvec_pipelined(const MatvecArgs& a, gpuStream_t s);

namespace {

constexpr int kMvThreads = 128;

/// Calls f(std::integral_constant<uint32_t, T>{}) for the weight type t (kF32, kF16, kBF16,
/// kQ8_0, kQ4_K or kQ6_K); throws GpuError("<what>: unsupported type <t>") for any other.
template <class F>
void with_type(uint32_t t, const char* what, F&& f) {
    switch (t) {
        case kF32: f(std::integral_constant<uint32_t, kF32>{}); break;
        case kF16: f(std::integral_constant<uint32_t, kF16>{}); break;
        case kBF16: f(std::integral_constant<uint32_t, kBF16>{}); break;
        case kQ8_0: f(std::integral_constant<uint32_t, kQ8_0>{}); break;
        case kQ4_K: f(std::integral_constant<uint32_t, kQ4_K>{}); break;
        case kQ6_K: f(std::integral_constant<uint32_t, kQ6_K>{}); break;
        default: throw GpuError(std::string(what) + ": unsupported type " + std::to_string(t));
    }
}

/// Outputs of a launch: the rows of all its segments, or in SwiGLU mode the rows of the first
/// (gate) segment, each output taking one gate and one up row.
LOOM_HD inline int matvec_units(const MatvecArgs& a) {
    if (a.mode == MvMode::SwiGLU) return a.seg[0].rows;
    return a.seg[0].rows + (a.nseg > 1 ? a.seg[1].rows : 0) + (a.nseg > 2 ? a.seg[2].rows : 0);
}

// Locates logical row o of a (non-SwiGLU) launch: its segment and row within it. Segments are
// picked by selects, not by a run-time index into the parameter struct (which would copy it
// to local memory).
LOOM_DEV int seg_of(const MatvecArgs& a, int o, int& local) {
    local = o;
    if (a.nseg > 1 && local >= a.seg[0].rows) {
        local -= a.seg[0].rows;
        if (a.nseg > 2 && local >= a.seg[1].rows) {
            local -= a.seg[1].rows;
            return 2;
        }
        return 1;
    }
    return 0;
}
LOOM_DEV const uint8_t* seg_w(const MatvecArgs& a, int s) { return s == 0 ? a.seg[0].w : s == 1 ? a.seg[1].w : a.seg[2].w; }
LOOM_DEV float* seg_y(const MatvecArgs& a, int s) { return s == 0 ? a.seg[0].y : s == 1 ? a.seg[1].y : a.seg[2].y; }

// Writes row `local` of segment s for activation vector b: a plain store or residual add, or
// (seg_role, decode) RoPE on the pair (v, vp) where vp is the partner row's sum, and the q
// store or K/V cache store at slots[b]'s position, as rope_store computes them.
LOOM_DEV void store_row(const MatvecArgs& a, int s, int local, int b, float v, float vp) {
    const int role = s == 0 ? a.seg_role[0] : s == 1 ? a.seg_role[1] : a.seg_role[2];
    if (role == 0) {
        float* y = seg_y(a, s) + b * a.y_stride + local;
        if (a.mode == MvMode::Add) *y += v;
        else *y = v;
        return;
    }
    const SlotDesc& slot = a.slots[b];
    const int pos = slot.pos;
    float out = v;
    const int i = local % a.head_dim;
    if (role != 3 && i < a.rope_dim) {
        const int half = a.rope_dim / 2, ip = i / 2;
        const float cs = a.rope_cs[(int64_t{pos} * half + ip) * 2], sn = a.rope_cs[(int64_t{pos} * half + ip) * 2 + 1];
        if ((i & 1) == 0) {
            const float x0 = v, x1 = vp;
            out = x0 * cs - x1 * sn;
        } else {
            const float x0 = vp, x1 = v;
            out = x0 * sn + x1 * cs;
        }
    }
    if (role == 1) {
        seg_y(a, s)[b * a.y_stride + local] = out;
    } else {
        const int64_t off =
            ((static_cast<int64_t>(a.layer) * 2 + (role == 2 ? 0 : 1)) * slot.cap + pos) * a.kv_dim + local;
        if (a.kv_f16) static_cast<uint16_t*>(slot.kv)[off] = f2h(out);
        else static_cast<float*>(slot.kv)[off] = out;
    }
}

/// Sum over the warp of each of v[0..R-1] (R a power of two <= the warp): lane l returns the
/// sum of v[l / (kWarp / R)]. R/2 + R/4 + ... + 1 exchanges halve the values each lane holds, then
/// log2(kWarp / R) more finish the sums (R - 1 + log2(kWarp / R) shuffles instead of R log2 kWarp).
template <int R>
LOOM_DEV float warp_sum_rows(float (&v)[R], int lane) {
    int m = kWarp / 2;
#pragma unroll
    for (int half = R / 2; half >= 1; half /= 2, m /= 2) {
        const bool up = (lane & m) != 0;
#pragma unroll
        for (int i = 0; i < half; ++i) {
            const float send = up ? v[i] : v[i + half];
            const float keep = up ? v[i + half] : v[i];
            v[i] = keep + shfl_xor(send, m);
        }
    }
    float r = v[0];
    for (; m >= 1; m /= 2) r += shfl_xor(r, m);
    return r;
}

/// RMSNorm scale 1/sqrt(S/n + eps) (in double, as rmsnorm() computes it), where S is the sum of
/// every thread's ss over a block of kMvThreads threads, added per warp and then warp by warp
/// (matvec_kernel's order). s_red holds kMvThreads / kWarp doubles and s_out one float of shared
/// memory; every thread must call it (two barriers), and every thread gets the scale.
LOOM_DEV float block_rms_scale(double ss, int n, float eps, double* s_red, float* s_out) {
    constexpr int kWarps = kMvThreads / kWarp;
    const int t = static_cast<int>(threadIdx.x);
    ss = warp_sum_d(ss);
    if (t % kWarp == 0) s_red[t / kWarp] = ss;
    __syncthreads();
    if (t == 0) {
        double tot = 0;
        for (int w = 0; w < kWarps; ++w) tot += s_red[w];
        *s_out = static_cast<float>(1.0 / sqrt(tot / n + static_cast<double>(eps)));
    }
    __syncthreads();
    return *s_out;
}

/// Streaming multiprocessors (CUDA) or compute units (HIP) of the current device; 3 on the
/// emulator (a few blocks, each with several row groups).
inline int device_sm_count() {
#if defined(LOOM_GPU_CUDA)
    static const int n = [] {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            v = 0;
        (void)cudaGetLastError();
        return v > 0 ? v : 1;
    }();
    return n;
#elif defined(LOOM_GPU_HIP)
    static const int n = [] {
        int dev = 0, v = 0;
        if (hipGetDevice(&dev) != hipSuccess ||
            hipDeviceGetAttribute(&v, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess)
            v = 0;
        (void)hipGetLastError();
        return v > 0 ? v : 1;
    }();
    return n;
#else
    return 3;  // the emulator: a few blocks, each with several row groups
#endif
}

/// Blocks of kernel k (kMvThreads threads, smem bytes of dynamic shared memory) resident per
/// multiprocessor, by the runtime's occupancy calculator; 2 on the emulator; at least 1.
template <class K>
int resident_blocks(K k, size_t smem) {
    int n = 0;
#if defined(LOOM_GPU_CUDA)
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kMvThreads, smem) != cudaSuccess) n = 1;
    (void)cudaGetLastError();
#elif defined(LOOM_GPU_HIP)
    if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kMvThreads, smem) != hipSuccess) n = 1;
    (void)hipGetLastError();
#else
    (void)k;
    (void)smem;
    n = 2;
#endif
    return n > 0 ? n : 1;
}

}  // namespace
}  // namespace loom::gpu
