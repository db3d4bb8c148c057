// Prefill kernels of the GPU backend: tiled causal attention with an online softmax on F32
// FMA units over the paged KV cache (the cached prefix and the chunk's own positions alike),
// the element-wise steps of the GEMM prefill attention (K/V gather, Q pack, causal softmax,
// output unpack; the products are cuBLAS's, gpu_forward.cpp), and loom's own tiled GEMM for
// builds without cuBLAS.
//
// Sources: online softmax (Milakov & Gimelshein 2018) and tiling (FlashAttention, Dao et al.
// 2022); the arithmetic mirrors engine/backends/cpu/cpu_backend.cpp.
#include <cmath>

#include "engine/backends/gpu/k_common.cuh"
#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {
namespace {

constexpr int kPrefillT = 128;  // threads per prefill attention block

// Prefill attention tile: RB rows = (query, head-in-group) pairs sharing one KV head; BK keys
// per step. Shared memory: Q [RB][hd], K [BK][hd+1], V [BK][hd], S [RB][BK+1], m/l/alpha [RB].
constexpr int kDMax = 32;  // output dims per thread

__global__ void __launch_bounds__(kPrefillT)
    attn_prefill_kernel(const float* q, int64_t q_ld, const PrefillTile* tiles, int layer, AttnShape sh, PagedKv kv,
                        int RB, int BK, float* att, int64_t att_ld) {
    LOOM_DYN_SMEM(float, smem);
    const int hd = sh.head_dim, group = sh.n_head / sh.n_head_kv;
    const int G = min(group, RB), qpt = RB / G, hgroups = (group + G - 1) / G;
    const int kvh = static_cast<int>(blockIdx.y) / hgroups, hg = static_cast<int>(blockIdx.y) % hgroups;
    const PrefillTile tile = tiles[blockIdx.x];
    const int T = tile.n;      // queries of this tile (<= qpt)
    const int p0 = tile.pos0;  // position of query 0
    const int t0 = 0;
    q += int64_t{tile.row0} * q_ld;
    att += int64_t{tile.row0} * att_ld;
    float* Qs = smem;
    float* Ks = Qs + RB * hd;
    float* Vs = Ks + BK * (hd + 1);
    float* S = Vs + BK * hd;
    float* rm = S + RB * (BK + 1);
    float* rl = rm + RB;
    float* ra = rl + RB;
    const int tid = static_cast<int>(threadIdx.x);

    // Row i: query t0 + i / G, head kvh * group + hg * G + i % G.
    auto row_t = [&](int i) { return t0 + i / G; };
    auto row_h = [&](int i) { return kvh * group + hg * G + i % G; };
    auto row_ok = [&](int i) { return i < qpt * G && row_t(i) < T && hg * G + i % G < group; };
    for (int e = tid; e < RB * hd; e += kPrefillT) {
        const int i = e / hd, d = e % hd;
        Qs[e] = row_ok(i) ? q[row_t(i) * q_ld + int64_t{row_h(i)} * hd + d] : 0.0f;
    }
    for (int i = tid; i < RB; i += kPrefillT) rm[i] = kNegInf, rl[i] = 0.0f;

    const int TPR = kPrefillT / RB;
    const int my_row = tid / TPR, my_lane = tid % TPR;
    float o[kDMax];
#pragma unroll
    for (int k = 0; k < kDMax; ++k) o[k] = 0.0f;

    const int64_t head_off = int64_t{kvh} * hd;
    __shared__ int64_t koff[32];  // K row offsets of the tile's keys (BK <= 32)
    const int last_t = min(T - 1, t0 + qpt - 1);
    const int p_last = p0 + last_t;
    __syncthreads();
    for (int k0 = 0; k0 <= p_last; k0 += BK) {
        if (tid < BK) koff[tid] = k0 + tid <= p_last ? kv_off(kv, layer, tile.table, k0 + tid, 0) + head_off : 0;
        __syncthreads();
        for (int e = tid; e < BK * hd; e += kPrefillT) {
            const int j = e / hd, d = e % hd;
            const int kp = k0 + j;
            float kf = 0.0f, vf = 0.0f;
            if (kp <= p_last) {
                const int64_t ko = koff[j] + d;
                kf = kv_load(kv.pool, ko, kv.f16);
                vf = kv_load(kv.pool, ko + kv.layout.half_elems(), kv.f16);
            }
            Ks[j * (hd + 1) + d] = kf;
            Vs[j * hd + d] = vf;
        }
        __syncthreads();
        for (int e = tid; e < RB * BK; e += kPrefillT) {
            const int i = e / BK, j = e % BK;
            const int kp = k0 + j;
            float s = kNegInf;
            if (row_ok(i) && kp <= p0 + row_t(i)) {
                const float* qq = Qs + i * hd;
                const float* kk = Ks + j * (hd + 1);
                float acc = 0.0f;
                for (int d = 0; d < hd; ++d) acc += qq[d] * kk[d];
                s = acc * sh.scale;
            }
            S[i * (BK + 1) + j] = s;
        }
        __syncthreads();
        for (int i = tid; i < RB; i += kPrefillT) {
            if (!row_ok(i)) {
                ra[i] = 1.0f;
                for (int j = 0; j < BK; ++j) S[i * (BK + 1) + j] = 0.0f;
                continue;
            }
            float mx = kNegInf;
            for (int j = 0; j < BK; ++j) mx = fmaxf(mx, S[i * (BK + 1) + j]);
            const float m_new = fmaxf(rm[i], mx);
            const float alpha = expf(rm[i] - m_new);
            float l = 0.0f;
            for (int j = 0; j < BK; ++j) {
                const float pj = expf(S[i * (BK + 1) + j] - m_new);
                S[i * (BK + 1) + j] = pj;
                l += pj;
            }
            rl[i] = rl[i] * alpha + l;
            rm[i] = m_new;
            ra[i] = alpha;
        }
        __syncthreads();
        if (my_row < RB) {
            const float alpha = ra[my_row];
            const float* pr = S + my_row * (BK + 1);
#pragma unroll
            for (int k = 0; k < kDMax; ++k) {
                const int d = my_lane + k * TPR;
                if (d < hd) {
                    float acc = o[k] * alpha;
                    for (int j = 0; j < BK; ++j) acc += pr[j] * Vs[j * hd + d];
                    o[k] = acc;
                }
            }
        }
        __syncthreads();
    }
    if (my_row < RB && row_ok(my_row)) {
        const float inv = 1.0f / rl[my_row];
        float* out = att + row_t(my_row) * att_ld + int64_t{row_h(my_row)} * hd;
#pragma unroll
        for (int k = 0; k < kDMax; ++k) {
            const int d = my_lane + k * TPR;
            if (d < hd) out[d] = o[k] * inv;
        }
    }
}

// C[M x N] (+)= A[M x K] . W[N x K]^T; 64 x 64 tiles, 16-deep K steps, 4 x 4 outputs per thread.
template <bool WF16>
__global__ void __launch_bounds__(256) gemm_kernel(const float* A, int64_t lda, const void* Wv, int64_t ldw, int M,
                                                   int N, int K, float* C, int64_t ldc, int accumulate) {
    __shared__ float As[16][68];
    __shared__ float Ws[16][68];
    const int tid = static_cast<int>(threadIdx.x);
    const int m0 = static_cast<int>(blockIdx.y) * 64, n0 = static_cast<int>(blockIdx.x) * 64;
    const int ty = tid / 16, tx = tid % 16;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int idx = tid + 256 * i;
            const int r = idx / 16, k = idx % 16;
            const int gm = m0 + r, gn = n0 + r, gk = k0 + k;
            As[k][r] = (gm < M && gk < K) ? A[gm * lda + gk] : 0.0f;
            float w = 0.0f;
            if (gn < N && gk < K) {
                if constexpr (WF16) w = h2f(static_cast<const uint16_t*>(Wv)[gn * ldw + gk]);
                else w = static_cast<const float*>(Wv)[gn * ldw + gk];
            }
            Ws[k][r] = w;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            float a[4], w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[k][ty * 4 + i], w[i] = Ws[k][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * w[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int gm = m0 + ty * 4 + i, gn = n0 + tx * 4 + j;
            if (gm < M && gn < N) {
                float* c = C + gm * ldc + gn;
                *c = accumulate ? *c + acc[i][j] : acc[i][j];
            }
        }
}

// ---- GEMM prefill attention: the element-wise steps --------------------------------------

constexpr int kAttnT = 256;  // threads per block of the steps below

// Block 0..n_pos-1 copies position blockIdx.x's K and V rows (kv_dim halves each, F16 pool) of
// `layer` into k[pos][kv_dim] and v[pos][kv_dim], 16 bytes per thread and step.
__global__ void __launch_bounds__(kAttnT)
    kv_gather_kernel(PagedKv kv, int layer, int32_t table, uint16_t* k, uint16_t* v) {
    const int pos = static_cast<int>(blockIdx.x);
    const int64_t kd = kv.layout.kv_dim;
    const int64_t ko = kv_off(kv, layer, table, pos, 0);
    const auto* pool = static_cast<const uint16_t*>(kv.pool);
    const int64_t vo = ko + kv.layout.half_elems();
    for (int64_t e = static_cast<int64_t>(threadIdx.x) * 8; e < kd; e += int64_t{kAttnT} * 8) {
        *reinterpret_cast<uint4*>(k + pos * kd + e) = ld16(pool + ko + e);
        *reinterpret_cast<uint4*>(v + pos * kd + e) = ld16(pool + vo + e);
    }
}

// This thread's element of a chunk's n query rows: row t, column col = h * hd + d of the
// attention rows (q or att), and its offset o = ((g * n + t) * group + j) * hd + d in the layout
// packed by KV head (h = g * group + j). False past the n rows' n_head * hd elements.
struct PackedAt {
    int64_t t, o;
    int col;
};
LOOM_DEV bool packed_at(int n, const AttnShape& sh, PackedAt& a) {
    const int hd = sh.head_dim, group = sh.n_head / sh.n_head_kv;
    const int64_t nq = int64_t{sh.n_head} * hd;
    const int64_t e = static_cast<int64_t>(blockIdx.x) * kAttnT + static_cast<int64_t>(threadIdx.x);
    if (e >= nq * n) return false;
    a.t = e / nq;
    a.col = static_cast<int>(e % nq);
    const int h = a.col / hd, d = a.col % hd;
    a.o = ((h / group * int64_t{n} + a.t) * group + h % group) * hd + d;
    return true;
}

// qp[g][t][j][d] = F16(q[t][(g * group + j) * hd + d]) for the n rows of a chunk; lo (optional)
// the F16 of what that rounding left out.
__global__ void __launch_bounds__(kAttnT)
    q_pack_kernel(const float* q, int64_t q_ld, int n, AttnShape sh, uint16_t* qp, uint16_t* lo) {
    PackedAt a;
    if (!packed_at(n, sh, a)) return;
    const float x = q[a.t * q_ld + a.col];
    const uint16_t hi = f2h(x);
    qp[a.o] = hi;
    if (lo) lo[a.o] = f16_lo(x, hi);
}

// att[t][(g * group + j) * hd + d] = op[g][t][j][d] for the n rows of a chunk.
__global__ void __launch_bounds__(kAttnT)
    o_unpack_kernel(const float* op, int n, AttnShape sh, float* att, int64_t att_ld) {
    PackedAt a;
    if (packed_at(n, sh, a)) att[a.t * att_ld + a.col] = op[a.o];
}

// Row r of the scaled scores S (F32, leading dimension ld): column c = r % cols is query t = c /
// group of the sub-block, at position pos_r0 + t, which sees keys 0..pos_r0 + t. P (F16, same
// layout) = softmax over those keys, 0 for the masked keys up to n_keys; P_lo (optional) the F16
// of what P's rounding left out.
__global__ void __launch_bounds__(kAttnT) attn_softmax_kernel(const float* S, uint16_t* P, uint16_t* P_lo, int64_t ld,
                                                              int cols, int group, int pos_r0, int n_keys) {
    __shared__ float red[kAttnT / 32 + 1];
    const auto r = static_cast<int64_t>(blockIdx.x);
    const int t = static_cast<int>(r % cols) / group;
    const int valid = min(n_keys, pos_r0 + t + 1);
    const float* s = S + r * ld;
    uint16_t* p = P + r * ld;
    uint16_t* pl = P_lo ? P_lo + r * ld : nullptr;
    const int tid = static_cast<int>(threadIdx.x);
    float mx = kNegInf;
    for (int j = tid; j < valid; j += kAttnT) mx = fmaxf(mx, s[j]);
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int j = tid; j < valid; j += kAttnT) sum += expf(s[j] - mx);
    sum = block_sum(sum, red);
    const float inv = 1.0f / sum;
    for (int j = tid; j < n_keys; j += kAttnT) {
        const float x = j < valid ? expf(s[j] - mx) * inv : 0.0f;
        const uint16_t h = f2h(x);
        p[j] = h;
        if (pl) pl[j] = f16_lo(x, h);
    }
}

// C_b[i][j] (column-major) = alpha * sum_k op(A_b)[i][k] * B_b[k][j]; blockIdx.y = b.
__global__ void __launch_bounds__(kAttnT)
    gemm_batched_own_kernel(int a_t, int m, int n, int k, float alpha, const uint16_t* A, int64_t lda, int64_t sa,
                            const uint16_t* B, int64_t ldb, int64_t sb, float* C, int64_t ldc, int64_t sc,
                            int accumulate) {
    const int64_t e = static_cast<int64_t>(blockIdx.x) * kAttnT + static_cast<int64_t>(threadIdx.x);
    if (e >= int64_t{m} * n) return;
    const auto b = static_cast<int64_t>(blockIdx.y);
    const int64_t i = e % m, j = e / m;
    A += b * sa;
    B += b * sb + j * ldb;
    float acc = 0.0f;
    for (int64_t q = 0; q < k; ++q) acc += h2f(a_t ? A[i * lda + q] : A[q * lda + i]) * h2f(B[q]);
    float* c = C + b * sc + j * ldc + i;
    *c = accumulate ? *c + alpha * acc : alpha * acc;
}

// Rows per tile (RB: (query, head-in-group) pairs) and keys per step (BK) that fit in 48 KiB of
// shared memory for head size hd; RB = 0 when none does.
void prefill_tiling(int hd, int& RB, int& BK, size_t& smem) {
    RB = BK = 0;
    smem = 0;
    for (int rb : {32, 16, 8}) {
        if (hd > kDMax * (kPrefillT / rb)) continue;
        for (int bk : {32, 16, 8}) {
            const size_t bytes = sizeof(float) * (size_t(rb) * hd + size_t(bk) * (hd + 1) + size_t(bk) * hd +
                                                  size_t(rb) * (bk + 1) + 3 * size_t(rb));
            if (bytes <= kDefaultDynSmemBytes) {
                RB = rb, BK = bk, smem = bytes;
                return;
            }
        }
    }
}

}  // namespace

int attn_prefill_tile_queries(const AttnShape& sh) {
    int RB, BK;
    size_t smem;
    prefill_tiling(sh.head_dim, RB, BK, smem);
    if (!RB) throw GpuError("attn_prefill: head_dim " + std::to_string(sh.head_dim) + " does not fit");
    const int group = sh.n_head / sh.n_head_kv;
    return RB / (group < RB ? group : RB);
}

void attn_prefill(const float* q, int64_t q_ld, const PrefillTile* tiles, int ntiles, int layer, const AttnShape& sh,
                  const PagedKv& kv, float* att, int64_t att_ld, gpuStream_t s) {
    if (ntiles <= 0) return;
    int RB, BK;
    size_t smem;
    prefill_tiling(sh.head_dim, RB, BK, smem);
    if (!RB) throw GpuError("attn_prefill: head_dim " + std::to_string(sh.head_dim) + " does not fit");
    const int group = sh.n_head / sh.n_head_kv;
    const int G = group < RB ? group : RB, hgroups = (group + G - 1) / G;
    auto k = attn_prefill_kernel;
    const dim3 grid(static_cast<unsigned>(ntiles), static_cast<unsigned>(sh.n_head_kv * hgroups));
    LOOM_LAUNCH(k, grid, kPrefillT, smem, s, q, q_ld, tiles, layer, sh, kv, RB, BK, att, att_ld);
    LOOM_GPU_CHECK_LAUNCH();
}

void kv_gather_f16(const PagedKv& kv, int layer, int32_t table, int n_pos, uint16_t* k, uint16_t* v, gpuStream_t s) {
    if (n_pos <= 0) return;
    if (!kv.f16 || kv.layout.kv_dim % 8) throw GpuError("kv_gather_f16: needs an F16 pool and kv_dim % 8 == 0");
    auto kern = kv_gather_kernel;
    LOOM_LAUNCH(kern, dim3(static_cast<unsigned>(n_pos)), kAttnT, 0, s, kv, layer, table, k, v);
    LOOM_GPU_CHECK_LAUNCH();
}

void q_pack_f16(const float* q, int64_t q_ld, int n, const AttnShape& sh, uint16_t* qp, uint16_t* qp_lo,
                gpuStream_t s) {
    if (n <= 0) return;
    const int64_t e = int64_t{sh.n_head} * sh.head_dim * n;
    auto kern = q_pack_kernel;
    LOOM_LAUNCH(kern, dim3(static_cast<unsigned>((e + kAttnT - 1) / kAttnT)), kAttnT, 0, s, q, q_ld, n, sh, qp, qp_lo);
    LOOM_GPU_CHECK_LAUNCH();
}

void o_unpack(const float* op, int n, const AttnShape& sh, float* att, int64_t att_ld, gpuStream_t s) {
    if (n <= 0) return;
    const int64_t e = int64_t{sh.n_head} * sh.head_dim * n;
    auto kern = o_unpack_kernel;
    LOOM_LAUNCH(kern, dim3(static_cast<unsigned>((e + kAttnT - 1) / kAttnT)), kAttnT, 0, s, op, n, sh, att, att_ld);
    LOOM_GPU_CHECK_LAUNCH();
}

void attn_softmax_causal(const float* S, uint16_t* P, uint16_t* P_lo, int64_t ld, int rows, int cols, int group,
                         int pos_r0, int n_keys, gpuStream_t s) {
    if (rows <= 0) return;
    auto kern = attn_softmax_kernel;
    LOOM_LAUNCH(kern, dim3(static_cast<unsigned>(rows)), kAttnT, 0, s, S, P, P_lo, ld, cols, group, pos_r0, n_keys);
    LOOM_GPU_CHECK_LAUNCH();
}

void gemm_batched_f16_own(bool a_t, int m, int n, int k, float alpha, const uint16_t* A, int64_t lda, int64_t sa,
                          const uint16_t* B, int64_t ldb, int64_t sb, float* C, int64_t ldc, int64_t sc, int batch,
                          bool accumulate, gpuStream_t s) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
    const int64_t e = int64_t{m} * n;
    const dim3 grid(static_cast<unsigned>((e + kAttnT - 1) / kAttnT), static_cast<unsigned>(batch));
    auto kern = gemm_batched_own_kernel;
    LOOM_LAUNCH(kern, grid, kAttnT, 0, s, a_t ? 1 : 0, m, n, k, alpha, A, lda, sa, B, ldb, sb, C, ldc, sc,
                accumulate ? 1 : 0);
    LOOM_GPU_CHECK_LAUNCH();
}

void gemm_own(const float* A, int64_t lda, const void* W, bool w_f16, int64_t ldw, int M, int N, int K, float* C,
              int64_t ldc, bool accumulate, gpuStream_t s) {
    if (M <= 0 || N <= 0) return;
    const dim3 grid(static_cast<unsigned>((N + 63) / 64), static_cast<unsigned>((M + 63) / 64));
    if (w_f16) {
        auto k = gemm_kernel<true>;
        LOOM_LAUNCH(k, grid, 256, 0, s, A, lda, W, ldw, M, N, K, C, ldc, accumulate ? 1 : 0);
    } else {
        auto k = gemm_kernel<false>;
        LOOM_LAUNCH(k, grid, 256, 0, s, A, lda, W, ldw, M, N, K, C, ldc, accumulate ? 1 : 0);
    }
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace loom::gpu
