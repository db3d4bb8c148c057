// Layer kernels of the GPU backend: RMSNorm, SwiGLU, the F16 conversion of activations and RoPE
// with the paged KV store (decode attention is in k_attn_decode.cu, prefill attention and loom's
// own GEMM in k_prefill.cu).
//
// Sources: RMSNorm (Zhang & Sennrich 2019), RoPE (Su et al. 2021; "normal" adjacent pairs for
// llama, NEOX halves for qwen2/qwen3), SwiGLU (Shazeer 2020). The arithmetic mirrors
// engine/backends/cpu/cpu_backend.cpp.
#include <cmath>

#include "engine/backends/gpu/k_common.cuh"
#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {
namespace {

// One block of 1024 threads per row; up to 8 elements per thread stay in registers, so the
// loads are all issued before the reduction (rows longer than 8192 loop).
__global__ void __launch_bounds__(1024)
    rmsnorm_kernel(const float* x, int64_t ldx, const int32_t* idx, const float* w, int n, float eps, float* y,
                   int64_t ldy, uint16_t* yh, int64_t ldyh) {
    __shared__ double sh[32];
    const float* xr = x + (idx ? idx[blockIdx.x] : static_cast<int32_t>(blockIdx.x)) * ldx;
    const int t = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = t + k * nt < n ? xr[t + k * nt] : 0.0f;
    double ss = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) ss += static_cast<double>(v[k]) * v[k];
    for (int i = t + 8 * nt; i < n; i += nt) ss += static_cast<double>(xr[i]) * xr[i];
    ss = block_sum(ss, sh);
    const float scale = static_cast<float>(1.0 / sqrt(ss / n + static_cast<double>(eps)));
    float* yr = y + blockIdx.x * ldy;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const int i = t + k * nt;
        if (i < n) {
            const float o = v[k] * scale * w[i];
            yr[i] = o;
            if (yh) yh[blockIdx.x * ldyh + i] = f2h(o);
        }
    }
    for (int i = t + 8 * nt; i < n; i += nt) {
        const float o = xr[i] * scale * w[i];
        yr[i] = o;
        if (yh) yh[blockIdx.x * ldyh + i] = f2h(o);
    }
}

__global__ void swiglu_kernel(const float* y, int64_t ldy, int ff, float* g, int64_t ldg, uint16_t* gh, int64_t ldgh) {
    const float* yr = y + blockIdx.y * ldy;
    for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < ff;
         i += static_cast<int>(gridDim.x * blockDim.x)) {
        const float a = yr[i];
        const float v = a / (1.0f + expf(-a)) * yr[ff + i];
        if (g) g[blockIdx.y * ldg + i] = v;
        if (gh) gh[blockIdx.y * ldgh + i] = f2h(v);
    }
}

// With sums (n a multiple of 256, so that every warp covers 32 aligned columns of a row), lane 0
// of each warp writes its 32 columns' sum of the two parts (a fixed shuffle tree) times 2^-5 as
// F16 high and low parts at kernels.hpp QgLow's places: the mean's range, so that a sum
// overflows F16 only where an element does.
__global__ void to_f16_kernel(const float* x, int64_t ldx, int n, uint16_t* y, int64_t ldy, uint16_t* lo,
                              uint16_t* sums, int64_t ld_sums) {
    for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
         i += static_cast<int>(gridDim.x * blockDim.x)) {
        const float v = x[blockIdx.y * ldx + i];
        const uint16_t h = f2h(v);
        y[blockIdx.y * ldy + i] = h;
        if (!lo) continue;
        const uint16_t l = f16_lo(v, h);
        lo[blockIdx.y * ldy + i] = l;
        if (!sums) continue;
        float sum = h2f(h) + h2f(l);
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) sum += shfl_xor(sum, m);  // 32 lanes, on 64-wide wavefronts too
        if ((threadIdx.x & 31) == 0) {
            uint16_t* p = sums + blockIdx.y * ld_sums + 16 * (i >> 8) + ((i >> 5) & 7);
            const float mean = sum * 0x1p-5f;  // exact
            const uint16_t sh = f2h(mean);
            p[0] = sh;
            p[8] = f16_lo(mean, sh);
        }
    }
}

// One warp per (row, head item): items are the q heads, then the k heads, then the v heads.
__global__ void rope_store_kernel(float* qkv, int64_t ld, AttnShape sh, int layer, const RowDesc* rd, PagedKv kv,
                                  const float* rope_cs, const float* bq, const float* bk, const float* bv,
                                  const float* q_norm, const float* k_norm) {
    __shared__ float buf[256];
    const int row = static_cast<int>(blockIdx.x), item = static_cast<int>(blockIdx.y);
    const int lane = static_cast<int>(threadIdx.x);
    const int hd = sh.head_dim, nh = sh.n_head, nkv = sh.n_head_kv;
    const int64_t nq = int64_t{nh} * hd, kvd = sh.kv_dim();
    const RowDesc r = rd[row];
    const int pos = r.pos;
    int kind, head;  // 0 q, 1 k, 2 v
    if (item < nh) kind = 0, head = item;
    else if (item < nh + nkv) kind = 1, head = item - nh;
    else kind = 2, head = item - nh - nkv;
    float* src = qkv + row * ld + (kind == 0 ? 0 : kind == 1 ? nq : nq + kvd) + int64_t{head} * hd;
    const float* bias = kind == 0 ? bq : kind == 1 ? bk : bv;
    for (int i = lane; i < hd; i += kWarp) buf[i] = src[i] + (bias ? bias[int64_t{head} * hd + i] : 0.0f);
    sync_warp();
    const float* nw = kind == 0 ? q_norm : kind == 1 ? k_norm : nullptr;
    if (nw) {
        double ss = 0;
        for (int i = lane; i < hd; i += kWarp) ss += static_cast<double>(buf[i]) * buf[i];
        ss = warp_sum_d(ss);
        const float scale = static_cast<float>(1.0 / sqrt(ss / hd + static_cast<double>(sh.eps)));
        for (int i = lane; i < hd; i += kWarp) buf[i] = buf[i] * scale * nw[i];
        sync_warp();
    }
    if (kind < 2) {
        const int half = sh.rope_dim / 2;
        for (int i = lane; i < half; i += kWarp) {
            const int a = sh.neox ? i : 2 * i, b = sh.neox ? i + half : 2 * i + 1;
            const float c = rope_cs[(int64_t{pos} * half + i) * 2], s = rope_cs[(int64_t{pos} * half + i) * 2 + 1];
            const float x0 = buf[a], x1 = buf[b];
            buf[a] = x0 * c - x1 * s;
            buf[b] = x0 * s + x1 * c;
        }
        sync_warp();
    }
    if (kind == 0) {
        for (int i = lane; i < hd; i += kWarp) src[i] = buf[i];
    } else {
        const int64_t off = kv_off(kv, layer, r.table, pos, kind - 1) + int64_t{head} * hd;
        for (int i = lane; i < hd; i += kWarp) kv_store(kv.pool, off + i, buf[i], kv.f16);
    }
}

unsigned blocks_for(int64_t n, int threads, unsigned cap = 1024) {
    const int64_t b = (n + threads - 1) / threads;
    return static_cast<unsigned>(b < 1 ? 1 : b > cap ? cap : b);
}

}  // namespace

void rmsnorm(const float* x, int64_t ldx, const int32_t* idx, const float* w, int n, int rows, float eps, float* y,
             int64_t ldy, uint16_t* yh, int64_t ldyh, gpuStream_t s) {
    if (rows <= 0) return;
    auto k = rmsnorm_kernel;
    const int threads = n >= 1024 ? 1024 : (n + kWarp - 1) / kWarp * kWarp;
    LOOM_LAUNCH(k, static_cast<unsigned>(rows), threads, 0, s, x, ldx, idx, w, n, eps, y, ldy, yh, ldyh);
    LOOM_GPU_CHECK_LAUNCH();
}

void swiglu(const float* y, int64_t ldy, int ff, int rows, float* g, int64_t ldg, uint16_t* gh, int64_t ldgh,
            gpuStream_t s) {
    if (rows <= 0) return;
    auto k = swiglu_kernel;
    LOOM_LAUNCH(k, dim3(blocks_for(ff, 256, 64), static_cast<unsigned>(rows)), 256, 0, s, y, ldy, ff, g, ldg, gh, ldgh);
    LOOM_GPU_CHECK_LAUNCH();
}

void to_f16(const float* x, int64_t ldx, int n, int rows, uint16_t* y, int64_t ldy, gpuStream_t s, uint16_t* lo,
            uint16_t* sums, int64_t ld_sums) {
    if (sums && !(lo && n % 256 == 0 && ld_sums >= n / 16))
        throw GpuError(
            "to_f16: block sums need the low parts, whole 256-column blocks and room for n / 16 halves a row");
    if (rows <= 0) return;
    auto k = to_f16_kernel;
    LOOM_LAUNCH(k, dim3(blocks_for(n, 256, 64), static_cast<unsigned>(rows)), 256, 0, s, x, ldx, n, y, ldy, lo, sums,
                ld_sums);
    LOOM_GPU_CHECK_LAUNCH();
}

void rope_store(float* qkv, int64_t ld, int rows, const AttnShape& sh, int layer, const RowDesc* rd, const PagedKv& kv,
                const float* rope_cs, const float* bq, const float* bk, const float* bv, const float* q_norm,
                const float* k_norm, gpuStream_t s) {
    if (rows <= 0) return;
    if (sh.head_dim > 256) throw GpuError("head_dim above 256");
    auto k = rope_store_kernel;
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(sh.n_head + 2 * sh.n_head_kv));
    LOOM_LAUNCH(k, grid, kWarp, 0, s, qkv, ld, sh, layer, rd, kv, rope_cs, bq, bk, bv, q_norm, k_norm);
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace loom::gpu
