// Decode attention over the paged KV cache (kernels.hpp attn_decode): split-K over the cached
// positions (Flash-Decoding, Dao et al. 2023), the splits combined by their softmax statistics
// (online softmax, Milakov & Gimelshein 2018). The split kernel, by shape:
// - the page kernels (k_attn_page.cu: head_dim 32, 64 or 128, at most 8 query heads a KV head,
//   CUDA and the emulator);
// - attn_fast_kernel here (head_dim a multiple of 16 up to 256, at most 8 query heads a KV head:
//   HIP's wavefronts of 64, and the head sizes the page kernels do not take);
// - attn_split_kernel here (any other shape);
// then attn_combine_kernel where a step has more than one split. The arithmetic mirrors
// engine/backends/cpu/cpu_backend.cpp's attention (F32 sums, scale after the dot product,
// exp(s - max)).
#include <cmath>
#include <string>
#include <type_traits>

#include "engine/backends/gpu/k_common.cuh"
#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {
namespace {

// ---- the fast and general kernels, and the combine ----------------------------------------
constexpr int kAttnT = 128;  // threads per attention block, and positions per decode split
constexpr int kMaxG = 16;    // query heads per decode block

// 8 consecutive cache elements as floats (16-byte aligned for F16, 32-byte for F32).
LOOM_DEV void load8(const uint16_t* p, float* f) {
    const uint4 v = ld16(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = h2f(static_cast<uint16_t>(w[i] & 0xFFFFu));
        f[2 * i + 1] = h2f(static_cast<uint16_t>(w[i] >> 16));
    }
}
LOOM_DEV void load8(const float* p, float* f) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// Softmax statistics of the decode kernels: for each head g < G (one warp per head at a time),
// row g of scores (span values, row stride `stride`) becomes exp(s - m) in place, with the row's
// maximum m in stat_m[g] and the sum of the exponentials in stat_l[g]. Every thread of a block of
// kAttnT threads calls it after a barrier that makes the scores visible; it ends with one.
LOOM_DEV void softmax_stats(float* scores, int stride, int G, int span, float* stat_m, float* stat_l) {
    const int t = static_cast<int>(threadIdx.x);
    const int lane = t % kWarp, warp = t / kWarp, nw = kAttnT / kWarp;
    for (int g = warp; g < G; g += nw) {
        float* row = scores + g * stride;
        float m = kNegInf;
        for (int i = lane; i < span; i += kWarp) m = fmaxf(m, row[i]);
        m = warp_max(m);
        float l = 0.0f;
        for (int i = lane; i < span; i += kWarp) {
            const float e = expf(row[i] - m);
            row[i] = e;
            l += e;
        }
        l = warp_sum(l);
        if (lane == 0) stat_m[g] = m, stat_l[g] = l;
    }
    __syncthreads();
}

// Decode attention, one split of 128 positions for up to 16 query heads of one KV head.
__global__ void __launch_bounds__(kAttnT) attn_split_kernel(const float* q, int64_t q_ld, const RowDesc* rd, int layer,
                                                            AttnShape sh, PagedKv kv, int splits, float* part) {
    __shared__ float qs[kMaxG * 256];
    __shared__ float P[kMaxG][kAttnT];
    const int hd = sh.head_dim, group = sh.n_head / sh.n_head_kv;
    const int hgroups = (group + kMaxG - 1) / kMaxG;
    const int kvh = static_cast<int>(blockIdx.x) / hgroups, hg = static_cast<int>(blockIdx.x) % hgroups;
    const int G = min(kMaxG, group - hg * kMaxG);
    const int split = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
    const RowDesc r = rd[b];
    const int n_kv = r.pos + 1;
    const int p0 = split * kAttnT;
    if (p0 >= n_kv) return;
    const int h0 = kvh * group + hg * kMaxG;
    const int t = static_cast<int>(threadIdx.x);
    for (int i = t; i < G * hd; i += kAttnT) qs[i] = q[b * q_ld + int64_t{h0 + i / hd} * hd + i % hd];
    __syncthreads();

    const int64_t head_off = int64_t{kvh} * hd;
    const int p = p0 + t;
    __shared__ int64_t s_voff[kAttnT];  // V row offsets of the split's positions
    {
        float sc[kMaxG];
#pragma unroll
        for (int g = 0; g < kMaxG; ++g) sc[g] = 0.0f;
        if (p < n_kv) {
            const int64_t kr = kv_off(kv, layer, r.table, p, 0) + head_off;
            s_voff[t] = kr + kv.layout.half_elems();
            if (kv.f16 && hd % 8 == 0) {
                const uint16_t* kp = static_cast<const uint16_t*>(kv.pool) + kr;
                for (int d = 0; d < hd; d += 8) {
                    float kf[8];
                    load8(kp + d, kf);
#pragma unroll
                    for (int g = 0; g < kMaxG; ++g)
                        if (g < G) {
                            const float* qq = qs + g * hd + d;
                            float s = 0.0f;
#pragma unroll
                            for (int i = 0; i < 8; ++i) s += qq[i] * kf[i];
                            sc[g] += s;
                        }
                }
            } else {
                for (int d = 0; d < hd; ++d) {
                    const float kf = kv_load(kv.pool, kr + d, kv.f16);
#pragma unroll
                    for (int g = 0; g < kMaxG; ++g)
                        if (g < G) sc[g] += qs[g * hd + d] * kf;
                }
            }
        }
#pragma unroll
        for (int g = 0; g < kMaxG; ++g)
            if (g < G) P[g][t] = p < n_kv ? sc[g] * sh.scale : kNegInf;
    }
    __syncthreads();

    __shared__ float stat_m[kMaxG], stat_l[kMaxG];
    softmax_stats(&P[0][0], kAttnT, G, kAttnT, stat_m, stat_l);

    // Weighted sum of V: TD threads across dims, nsub groups across positions.
    const int n_here = min(kAttnT, n_kv - p0);
    const int TD = hd < kAttnT ? hd : kAttnT;
    const int nsub = kAttnT / TD;
    const int sub = t / TD, dl = t % TD;
    float* red = qs;  // q is no longer needed
    const int iters = (hd + TD - 1) / TD;
    for (int it = 0; it < iters; ++it) {
        const int d = dl + it * TD;
        float acc[kMaxG];
#pragma unroll
        for (int g = 0; g < kMaxG; ++g) acc[g] = 0.0f;
        if (sub < nsub && d < hd) {
#pragma unroll 8
            for (int i = sub; i < n_here; i += nsub) {
                const float v = kv_load(kv.pool, s_voff[i] + d, kv.f16);
#pragma unroll
                for (int g = 0; g < kMaxG; ++g)
                    if (g < G) acc[g] += P[g][i] * v;
            }
        }
        __syncthreads();
        if (sub < nsub && d < hd)
#pragma unroll
            for (int g = 0; g < kMaxG; ++g)
                if (g < G) red[(sub * kMaxG + g) * TD + dl] = acc[g];
        __syncthreads();
        if (sub == 0 && d < hd) {
            for (int g = 0; g < G; ++g) {
                float v = 0.0f;
                for (int s2 = 0; s2 < nsub; ++s2) v += red[(s2 * kMaxG + g) * TD + dl];
                float* out = part + ((int64_t{b} * sh.n_head + h0 + g) * splits + split) * (hd + 2);
                out[d] = v;
                if (d == 0) out[hd] = stat_m[g], out[hd + 1] = stat_l[g];
            }
        }
    }
}

constexpr int kFastSpan = 64;   // positions per split of the vectorized decode kernel
constexpr int kLongSpan = 256;  // the same where a step has many decode rows (attn_decode_span)

// Decode attention for head_dim % 16 == 0 and at most GMAX (<= 8) query heads per KV head:
// SPAN positions per block, two threads per position for the scores (SPAN / 64 rounds), and for
// the weighted sum of V each thread takes 8 dims of every (128 / (head_dim / 8))-th position, so
// that every load is 16 or 32 bytes wide and several are in flight. With one split
// (gridDim.y == 1) the block writes the normalised output itself, as the combine would for one
// split (the same operations, so the same bits), and no combine runs.
template <class KVT, int GMAX, int SPAN>
__global__ void __launch_bounds__(kAttnT)
    attn_fast_kernel(const float* q, int64_t q_ld, const RowDesc* rd, int layer, AttnShape sh, PagedKv kv, int splits,
                     float* part, float* att, int64_t att_ld) {
    __shared__ float qs[GMAX * 256];
    __shared__ float S[GMAX][SPAN];
    __shared__ float red[GMAX * 1024];
    __shared__ float stat_m[GMAX], stat_l[GMAX];
    __shared__ int64_t s_voff[SPAN];  // V row offsets of the split's positions
    const int hd = sh.head_dim, G = sh.n_head / sh.n_head_kv;
    const int kvh = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.y),
              b = static_cast<int>(blockIdx.z);
    const RowDesc r = rd[b];
    const int n_kv = r.pos + 1;
    const int p0 = split * SPAN;
    if (p0 >= n_kv) return;
    const int h0 = kvh * G;
    const int t = static_cast<int>(threadIdx.x);
    for (int i = t; i < G * hd; i += kAttnT) qs[i] = q[b * q_ld + int64_t{h0} * hd + i];
    __syncthreads();

    const KVT* pool = static_cast<const KVT*>(kv.pool) + int64_t{kvh} * hd;
#pragma unroll 1
    for (int pi = t >> 1; pi < SPAN; pi += kAttnT / 2) {
        const int half = t & 1, pos = p0 + pi;
        const int hh = hd / 2;
        float acc[GMAX];
#pragma unroll
        for (int g = 0; g < GMAX; ++g) acc[g] = 0.0f;
        if (pos < n_kv) {
            const int64_t off = kv_off(kv, layer, r.table, pos, 0);
            if (half == 0) s_voff[pi] = off + kv.layout.half_elems();
            const KVT* kr = pool + off + half * hh;
#pragma unroll 4
            for (int d = 0; d < hh; d += 8) {
                float kf[8];
                load8(kr + d, kf);
#pragma unroll
                for (int g = 0; g < GMAX; ++g)
                    if (g < G) {
                        const float* qq = qs + g * hd + half * hh + d;
                        float sdot = 0.0f;
#pragma unroll
                        for (int i = 0; i < 8; ++i) sdot += qq[i] * kf[i];
                        acc[g] += sdot;
                    }
            }
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g) acc[g] += shfl_xor(acc[g], 1);
        if (half == 0)
#pragma unroll
            for (int g = 0; g < GMAX; ++g)
                if (g < G) S[g][pi] = pos < n_kv ? acc[g] * sh.scale : kNegInf;
    }
    __syncthreads();
    softmax_stats(&S[0][0], SPAN, G, SPAN, stat_m, stat_l);
    const int nd = hd / 8, npg = kAttnT / nd;
    const int dc = t % nd, pg = t / nd;
    const int n_here = min(SPAN, n_kv - p0);
    float o[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; ++g)
#pragma unroll
        for (int e = 0; e < 8; ++e) o[g][e] = 0.0f;
    if (pg < npg) {
#pragma unroll 4
        for (int i = pg; i < n_here; i += npg) {
            float vf[8];
            load8(pool + s_voff[i] + dc * 8, vf);
#pragma unroll
            for (int g = 0; g < GMAX; ++g)
                if (g < G) {
                    const float pw = S[g][i];
#pragma unroll
                    for (int e = 0; e < 8; ++e) o[g][e] += pw * vf[e];
                }
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g)
            if (g < G)
#pragma unroll
                for (int e = 0; e < 8; ++e) red[(pg * GMAX + g) * hd + dc * 8 + e] = o[g][e];
    }
    __syncthreads();
    for (int idx = t; idx < G * hd; idx += kAttnT) {
        const int g = idx / hd, d = idx % hd;
        float v = 0.0f;
        for (int p = 0; p < npg; ++p) v += red[(p * GMAX + g) * hd + d];
        if (splits == 1) {  // attn_combine_kernel with one split: weight expf(0) = 1
            att[b * att_ld + int64_t{h0 + g} * hd + d] = v * (1.0f / stat_l[g]);
            continue;
        }
        float* out = part + ((int64_t{b} * sh.n_head + h0 + g) * splits + split) * (hd + 2);
        out[d] = v;
        if (d == 0) out[hd] = stat_m[g], out[hd + 1] = stat_l[g];
    }
}

constexpr int kCombT = 512;         // threads of the split combine
constexpr int kCombWeights = 4096;  // splits whose weights the combine keeps in shared memory

// Combine of the decode splits of one (head h, query b): with m_s, l_s the split maxima and sums
// and M their maximum, out[d] = sum_s o_s[d] exp(m_s - M) / sum_s l_s exp(m_s - M). The splits
// are spread over the block (the weights once, into shared memory; then kCombT / head_dim groups
// of head_dim threads, group g summing the splits s = g mod groups in order, and the groups
// added in order), so that a long context's hundreds of splits are read by many loads in flight
// instead of by one thread each, three times over. The order depends on the number of active
// splits alone (that is, on the query's position), never on `splits` or on the other rows.
__global__ void __launch_bounds__(kCombT) attn_combine_kernel(const RowDesc* rd, AttnShape sh, int splits, int span,
                                                              const float* part, float* att, int64_t att_ld) {
    __shared__ float w[kCombWeights];
    __shared__ float red[kCombT];
    __shared__ float sh_red[kCombT / kWarp];
    const int h = static_cast<int>(blockIdx.x), b = static_cast<int>(blockIdx.y);
    const int t = static_cast<int>(threadIdx.x);
    const int hd = sh.head_dim, stride = hd + 2;
    const int n_kv = rd[b].pos + 1;
    const int active = min(splits, (n_kv + span - 1) / span);
    const float* base = part + (int64_t{b} * sh.n_head + h) * splits * stride;
    float m = kNegInf;
    for (int s = t; s < active; s += kCombT) m = fmaxf(m, base[s * stride + hd]);
    const float M = block_max(m, sh_red);
    float l = 0.0f;
    for (int s = t; s < active; s += kCombT) {
        const float e = expf(base[s * stride + hd] - M);
        if (s < kCombWeights) w[s] = e;
        l += base[s * stride + hd + 1] * e;
    }
    const float inv = 1.0f / block_sum(l, sh_red);  // its barriers also publish w
    const int groups = kCombT / hd, g = t / hd, d = t % hd;
    if (g < groups) {
        float v = 0.0f;
#pragma unroll 8
        for (int s = g; s < active; s += groups)
            v += base[s * stride + d] * (s < kCombWeights ? w[s] : expf(base[s * stride + hd] - M));
        red[g * hd + d] = v;
    }
    __syncthreads();
    if (t < hd) {
        float v = 0.0f;
        for (int q = 0; q < groups; ++q) v += red[q * hd + t];
        att[b * att_ld + int64_t{h} * hd + t] = v * inv;
    }
}

}  // namespace

int attn_decode_span(const AttnShape& sh, int rows, int max_pos, bool fixed) {
    const int group = sh.n_head / sh.n_head_kv;
    const int64_t heads = int64_t{rows} * sh.n_head_kv;  // (query row, KV head) pairs of the step
    if (attn_page_takes(sh)) {
        // Many rows fill the device with 256 or 1,024 positions a split: fewer blocks, and no
        // combine at all for contexts of up to that many positions. Few rows: 64 (one KV block a
        // warp), so that a context spreads over many blocks, unless it is long enough to give
        // kFillBlocks blocks at 256 (batch-1 decode after 30K positions: 0.74 of the time at 64).
        constexpr int64_t kFillBlocks = 512;
        if (fixed) return 64;
        if (heads >= 512) return 1024;
        if (heads >= 128 || heads * ((int64_t{max_pos} + 256) / 256) >= kFillBlocks) return 256;
        return 64;
    }
    if (!(sh.head_dim % 16 == 0 && sh.head_dim <= 256 && group <= 8)) return kAttnT;
    // Many rows fill the device with few splits each: fewer blocks, and no combine at all for
    // contexts of up to 256 positions. At most 4 query heads a KV head (static shared memory).
    return !fixed && group <= 4 && heads >= 256 ? kLongSpan : kFastSpan;
}

void attn_decode(const float* q, int64_t q_ld, const RowDesc* rd, int nq, int layer, const AttnShape& sh,
                 const PagedKv& kv, int span, int splits, float* part, float* att, int64_t att_ld, gpuStream_t s) {
    if (nq <= 0) return;
    const int group = sh.n_head / sh.n_head_kv;
    if (attn_page_takes(sh)) {
        attn_decode_pages(q, q_ld, rd, nq, layer, sh, kv, span, splits, part, att, att_ld, s);
        if (splits == 1) return;  // the blocks wrote the output
    } else if (span == kFastSpan || span == kLongSpan) {
        const int gm = group_bucket(group);
        const dim3 grid(static_cast<unsigned>(sh.n_head_kv), static_cast<unsigned>(splits), static_cast<unsigned>(nq));
        auto go = [&](auto k) {
            LOOM_LAUNCH(k, grid, kAttnT, 0, s, q, q_ld, rd, layer, sh, kv, splits, part, att, att_ld);
            LOOM_GPU_CHECK_LAUNCH();
        };
        if (span == kLongSpan && group > 4)
            throw GpuError("attn_decode: a 256-position span takes at most 4 query heads a KV head");
        // The kernel for this pool type (kvt), span (sp) and group; no 8-head one at 256 positions.
        auto pick = [&](auto kvt, auto sp) {
            using KVT = decltype(kvt);
            constexpr int SP = decltype(sp)::value;
            if (gm == 1) go(attn_fast_kernel<KVT, 1, SP>);
            else if (gm == 2) go(attn_fast_kernel<KVT, 2, SP>);
            else if (gm == 4) go(attn_fast_kernel<KVT, 4, SP>);
            else if constexpr (SP == kFastSpan) go(attn_fast_kernel<KVT, 8, SP>);
        };
        auto by_span = [&](auto kvt) {
            if (span == kLongSpan) pick(kvt, std::integral_constant<int, kLongSpan>{});
            else pick(kvt, std::integral_constant<int, kFastSpan>{});
        };
        if (kv.f16) by_span(uint16_t{});
        else by_span(float{});
        if (splits == 1) return;  // the blocks wrote the output
    } else {
        if (span != kAttnT) throw GpuError("attn_decode: span " + std::to_string(span) + " is not this shape's");
        const int hgroups = (group + kMaxG - 1) / kMaxG;
        auto k1 = attn_split_kernel;
        LOOM_LAUNCH(k1,
                    dim3(static_cast<unsigned>(sh.n_head_kv * hgroups), static_cast<unsigned>(splits),
                         static_cast<unsigned>(nq)),
                    kAttnT, 0, s, q, q_ld, rd, layer, sh, kv, splits, part);
        LOOM_GPU_CHECK_LAUNCH();
    }
    auto k2 = attn_combine_kernel;
    LOOM_LAUNCH(k2, dim3(static_cast<unsigned>(sh.n_head), static_cast<unsigned>(nq)), kCombT, 0, s, rd, sh, splits,
                span, part, att, att_ld);
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace loom::gpu
