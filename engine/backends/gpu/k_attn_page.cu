// The page kernels of decode attention (kernels.hpp attn_decode_pages; attn_decode picks them
// for head_dim 32, 64 and 128 and at most 8 query heads a KV head): one block per (KV head, split
// of `span` positions, query row), four warps, warp w taking the split's 16-position KV blocks
// w, w + 4, ... with an online softmax (Milakov & Gimelshein 2018), the warps' (max, sum,
// output) merged in warp order at the end (Flash-Decoding's combine, Dao et al. 2023, inside
// the block).
// - attn_page_mma_kernel (F16 pool): each KV block copied by cp.async into the warp's
//   double-buffered shared-memory ring (the next block's copy in flight while this one is
//   used), scores S = Q K^T and O += P V by mma.sync m16n8k16 with F32 accumulation; Q and P
//   split into F16 high and low parts (two A rows each, so about 22 bits, as FlashAttention's
//   prefill in k_flash.cu), K and V exact.
// - attn_page_kernel (F32 pool): K and V loaded into registers, F32 dot products and sums, the
//   probabilities passed to the V lanes by shuffles.
//
// Sources: PTX ISA 8.x "mma" (m16n8k16 layouts), "ldmatrix" (.trans for V), "cp.async"
// (zero fill with src-size 0); FlashAttention-2 (Dao 2023), Algorithm 1.
#include <type_traits>

#include "engine/backends/gpu/k_common.cuh"
#if !defined(LOOM_GPU_HIP)
#include "engine/backends/gpu/k_qgemm.cuh"
#endif

namespace loom::gpu {
namespace {

constexpr int kPageTokens = kAttnPageTokens;
constexpr int kPageWarps = 4;  // warps a block
constexpr int kPageT = kPageWarps * 32;

// 8 consecutive K or V elements of an F32 pool, as two 16-byte loads.
struct Kv8 {
    float4 a, b;
    LOOM_DEV void load(const float* p) {
        a = *reinterpret_cast<const float4*>(p);
        b = *reinterpret_cast<const float4*>(p + 4);
    }
    LOOM_DEV void zero() { a.x = a.y = a.z = a.w = b.x = b.y = b.z = b.w = 0.0f; }
    LOOM_DEV void get(float* f) const {
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    }
};

// The block's end, after a barrier: the warps' results (warp x: maximum wm[x][g], sum wl[x][g],
// unnormalised output wo(x)[g * HD + d] of query head h0 + g) merged in warp order, weights
// exp(m_x - M) (0 for a warp without a KV block here). With one split the block writes
// o / l into its output row att (as attn_combine_kernel would for one split: the same
// operations, so the same bits), else the split's (o, M, l) into its partials (prow: this
// query row's partials of head 0).
template <int HD, int GS, class WO>
LOOM_DEV void merge_warps(const float (*wm)[GS], const float (*wl)[GS], WO wo, int G, int h0, int split, int splits,
                          float* part, float* att, int64_t prow) {
    for (int i = static_cast<int>(threadIdx.x); i < G * HD; i += kPageT) {
        const int g = i / HD, d = i % HD;
        float M = kNegInf;
#pragma unroll
        for (int x = 0; x < kPageWarps; ++x) M = fmaxf(M, wm[x][g]);
        float v = 0.0f, sum = 0.0f;
#pragma unroll
        for (int x = 0; x < kPageWarps; ++x) {
            const float e = expf(wm[x][g] - M);
            v += wo(x)[i] * e;
            sum += wl[x][g] * e;
        }
        if (splits == 1) {
            att[int64_t{h0 + g} * HD + d] = v * (1.0f / sum);
            continue;
        }
        float* out = part + prow + (int64_t{h0 + g} * splits + split) * (HD + 2);
        out[d] = v;
        if (d == 0) out[HD] = M, out[HD + 1] = sum;
    }
}

// Offset of query row b's partials (head 0, split 0) in attn_decode's `part`.
LOOM_DEV int64_t part_row(int b, const AttnShape& sh, int splits) {
    return int64_t{b} * sh.n_head * splits * (sh.head_dim + 2);
}

// Decode attention of one query row (blockIdx.z) and one KV head (blockIdx.x) over one split
// (blockIdx.y) of `span` positions, F32 pool, G <= GMAX query heads and head_dim HD, on warps of
// 32. Warp w takes the split's KV blocks w, w + 4, ... (16 positions each): the block's table
// entry (the next one read a block ahead), K, then V after the scores, in 16-byte loads: for K,
// two lanes a position, each with half the dims; for V, HD / 8 lanes a row, each with 8 dims of
// every (32 / (HD / 8))-th row. Scores in F32 (dot product, then the scale), an online softmax
// over the warp's blocks (maximum m, sum l, output o rescaled by exp(m_old - m_new)), the
// probabilities passed to the V lanes by shuffles. At the end the warps' (m, l, o) merge in warp
// order; with one split (gridDim.y == 1) the block writes o / l as the combine would for one
// split (the same operations, so the same bits), else the split's (o, m, l) into `part`.
template <int GMAX, int HD>
__global__ void __launch_bounds__(kPageT)
    attn_page_kernel(const float* q, int64_t q_ld, const RowDesc* rd, int layer, AttnShape sh, PagedKv kv, int span,
                     int splits, float* part, float* att, int64_t att_ld) {
    constexpr int NK = HD / 16;              // 8-element K pieces a lane (two lanes a position)
    constexpr int R = HD / 8;                // lanes a V row
    constexpr int RP = 32 / R;               // V rows a load round
    constexpr int NV = kPageTokens / RP;     // V rows a lane
    constexpr int QH = HD / 2 + 4;           // one half of a query in shared memory, padded (banks)
    __shared__ float4 qs4[GMAX][2][QH / 4];  // the query, read as float4
    __shared__ float wm[kPageWarps][GMAX], wl[kPageWarps][GMAX];
    __shared__ float wo[kPageWarps][GMAX][HD];
    const int G = sh.n_head / sh.n_head_kv;
    const int kvh = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.y),
              b = static_cast<int>(blockIdx.z);
    const RowDesc r = rd[b];
    const int n_kv = r.pos + 1, p0 = split * span;
    if (p0 >= n_kv) return;
    const int h0 = kvh * G, t = static_cast<int>(threadIdx.x);
    for (int i = t; i < G * HD; i += kPageT) {
        const int d = i % HD;
        float* qs = &qs4[i / HD][d / (HD / 2)][0].x;
        qs[d % (HD / 2)] = q[b * q_ld + int64_t{h0} * HD + i];
    }
    __syncthreads();

    const int lane = t % 32, w = t / 32;
    const int kp = lane >> 1, kh = lane & 1;  // K: position kp of the block, dims kh * HD / 2 ..
    const int vc = lane % R, vr = lane / R;   // V: dims vc * 8 .. of rows vr, vr + RP, ..
    const int end = (min(n_kv, p0 + span) + kPageTokens - 1) / kPageTokens;  // KV blocks of the split
    const float* pool = static_cast<const float*>(kv.pool);
    const int64_t ld = kv.layout.kv_dim, half = kv.layout.half_elems();
    const int32_t* table = kv.tables + r.table;
    float m[GMAX], l[GMAX], o[GMAX][8];
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
        m[g] = kNegInf, l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[g][e] = 0.0f;
    }
    int blk = p0 / kPageTokens + w;
    int32_t id = blk < end ? table[blk] : 0;
#pragma unroll 1
    for (; blk < end; blk += kPageWarps) {
        const int32_t next = blk + kPageWarps < end ? table[blk + kPageWarps] : 0;
        const float* kb = pool + kv.layout.offset(layer, id, 0, 0) + int64_t{kvh} * HD;
        const int pos0 = blk * kPageTokens;
        const bool kval = pos0 + kp < n_kv;
        Kv8 kc[NK], vv[NV];
        auto load_v = [&] {
#pragma unroll
            for (int i = 0; i < NV; ++i) {
                const int row = vr + i * RP;
                if (pos0 + row < n_kv) vv[i].load(kb + half + row * ld + vc * 8);
                else vv[i].zero();  // past the context: never read (the pool may hold NaN there)
            }
        };
#pragma unroll
        for (int i = 0; i < NK; ++i) {
            if (kval) kc[i].load(kb + kp * ld + kh * (HD / 2) + 8 * i);
            else kc[i].zero();
        }
        float s[GMAX];
#pragma unroll
        for (int g = 0; g < GMAX; ++g) s[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < NK; ++i) {
            float kf[8];
            kc[i].get(kf);
#pragma unroll
            for (int g = 0; g < GMAX; ++g)
                if (g < G) {
                    const float4 qa = qs4[g][kh][2 * i], qb = qs4[g][kh][2 * i + 1];
                    const float qq[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
                    float dot = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; ++j) dot += qq[j] * kf[j];
                    s[g] += dot;
                }
        }
        load_v();  // V after the scores (registers)
#pragma unroll
        for (int g = 0; g < GMAX; ++g)
            if (g < G) {
                s[g] += shfl_xor(s[g], 1);
                s[g] = kval ? s[g] * sh.scale : kNegInf;
                const float mn = fmaxf(m[g], warp_max(s[g]));
                const float alpha = expf(m[g] - mn);
                m[g] = mn;
                s[g] = expf(s[g] - mn);  // the probability (0 past the context)
                l[g] = l[g] * alpha + (kh == 0 ? s[g] : 0.0f);
#pragma unroll
                for (int e = 0; e < 8; ++e) o[g][e] *= alpha;
            }
#pragma unroll
        for (int i = 0; i < NV; ++i) {
            float vf[8];
            vv[i].get(vf);
            const int src = 2 * (vr + i * RP);  // the K lane of this V row's position
#pragma unroll
            for (int g = 0; g < GMAX; ++g)
                if (g < G) {
                    const float pw = shfl_idx(s[g], src);
#pragma unroll
                    for (int e = 0; e < 8; ++e) o[g][e] += pw * vf[e];
                }
        }
        id = next;
    }
    // The warp's sums over its lanes, then the warps merged in order.
#pragma unroll
    for (int g = 0; g < GMAX; ++g)
        if (g < G) {
            l[g] = warp_sum(l[g]);
#pragma unroll
            for (int off = R; off < 32; off *= 2)
#pragma unroll
                for (int e = 0; e < 8; ++e) o[g][e] += shfl_xor(o[g][e], off);
            if (vr == 0)
#pragma unroll
                for (int e = 0; e < 8; ++e) wo[w][g][vc * 8 + e] = o[g][e];
            if (lane == 0) wm[w][g] = m[g], wl[w][g] = l[g];
        }
    __syncthreads();
    merge_warps<HD>(
        wm, wl, [&](int x) { return &wo[x][0][0]; }, G, h0, split, splits, part, att + b * att_ld,
        part_row(b, sh, splits));
}

#if !defined(LOOM_GPU_HIP)
using qg::cp_async16;
using qg::cp_async_commit;
using qg::cp_async_wait;
using qg::frag_b2;
using qg::frag_v;
using qg::mma16816;
using qg::split2;

// Halves of one warp's shared-memory ring for head_dim HD: two stages of a K and a V block
// (16 rows of HD + 8 halves, the padding putting an ldmatrix phase's 8 rows on distinct banks).
template <int HD>
constexpr int kRingHalves = 2 * 2 * kPageTokens*(HD + 8);

// Decode attention of one query row (blockIdx.z) and KV head (blockIdx.x) over one split
// (blockIdx.y) of `span` positions, F16 pool, G <= 8 query heads. The A operand of the scores
// holds Q: row g the high part of head g, row g + 8 its low part (rows of heads >= G zero), so
// that a score is the sum of a C fragment's rows g and g + 8, in the same lane; the A operand of
// P V holds P the same way. Lane l has head l / 4, positions 2 (l % 4) + {0, 1} of each
// 8-position half of a block, and dims 8 n + 2 (l % 4) + {0, 1} of the output.
template <int HD>
__global__ void __launch_bounds__(kPageT)
    attn_page_mma_kernel(const float* q, int64_t q_ld, const RowDesc* rd, int layer, AttnShape sh, PagedKv kv, int span,
                         int splits, float* part, float* att, int64_t att_ld) {
    constexpr int LD = HD + 8;
    constexpr int TILE = kPageTokens * LD;  // halves of one K or V block in the ring
    constexpr int KS = HD / 16;             // k16 steps of the scores
    constexpr int NT = HD / 8;              // n8 tiles of the output
    LOOM_DYN_SMEM(uint16_t, sm);
    __shared__ float wm[kPageWarps][8], wl[kPageWarps][8];
    const int G = sh.n_head / sh.n_head_kv;
    const int kvh = static_cast<int>(blockIdx.x), split = static_cast<int>(blockIdx.y),
              b = static_cast<int>(blockIdx.z);
    const RowDesc r = rd[b];
    const int n_kv = r.pos + 1, p0 = split * span;
    if (p0 >= n_kv) return;
    const int t = static_cast<int>(threadIdx.x), lane = t & 31, w = t >> 5, g = lane >> 2, t4 = lane & 3;
    uint16_t* ring = sm + w * kRingHalves<HD>;
    const int end = (min(n_kv, p0 + span) + kPageTokens - 1) / kPageTokens;
    const uint16_t* pool = static_cast<const uint16_t*>(kv.pool);
    const int64_t ld = kv.layout.kv_dim, half = kv.layout.half_elems();
    const int32_t* table = kv.tables + r.table;

    // KV block `blk` (pool block `id`) into stage st: 16 rows of K, then of V, zeros past the context.
    auto load = [&](int blk, int32_t id, int st) {
        const uint16_t* kb = pool + kv.layout.offset(layer, id, 0, 0) + int64_t{kvh} * HD;
        uint16_t* ks = ring + st * 2 * TILE;
        const int pos0 = blk * kPageTokens;
#pragma unroll
        for (int i = lane; i < kPageTokens * (HD / 8); i += 32) {
            const int row = i / (HD / 8), d = 8 * (i % (HD / 8));
            const bool ok = pos0 + row < n_kv;
            const uint16_t* src = kb + (ok ? row * ld + d : 0);
            cp_async16(ks + row * LD + d, src, ok);
            cp_async16(ks + TILE + row * LD + d, src + (ok ? half : 0), ok);
        }
        cp_async_commit();
    };
    int blk = p0 / kPageTokens + w;
    int32_t id_next = 0;
    if (blk < end) {
        load(blk, table[blk], 0);
        id_next = blk + kPageWarps < end ? table[blk + kPageWarps] : 0;
    }
    uint32_t qa[KS][4];
    {
        const float* qr = q + b * q_ld + int64_t{kvh * G + (g < G ? g : 0)} * HD + 2 * t4;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            float2 x0{0.0f, 0.0f}, x1{0.0f, 0.0f};
            if (g < G) {
                x0 = *reinterpret_cast<const float2*>(qr + 16 * kk);
                x1 = *reinterpret_cast<const float2*>(qr + 16 * kk + 8);
            }
            split2(x0.x, x0.y, qa[kk][0], qa[kk][1]);
            split2(x1.x, x1.y, qa[kk][2], qa[kk][3]);
        }
    }
    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run = kNegInf, l_run = 0.0f;
#pragma unroll 1
    for (int it = 0; blk < end; blk += kPageWarps, ++it) {
        const int st = it & 1;
        if (blk + kPageWarps < end) {  // the next block's copy in flight while this one is used
            load(blk + kPageWarps, id_next, st ^ 1);
            id_next = blk + 2 * kPageWarps < end ? table[blk + 2 * kPageWarps] : 0;
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        sync_warp();  // every lane's copies of this block visible to the warp
        const uint16_t* ks = ring + st * 2 * TILE;
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            uint32_t bf[4];
            frag_b2<LD>(ks + 16 * kk, bf);
            mma16816(s[0], qa[kk], bf[0], bf[1]);
            mma16816(s[1], qa[kk], bf[2], bf[3]);
        }
        // Head g's scores at positions 8 j + 2 t4 + e of the block; the online softmax.
        const int pos0 = blk * kPageTokens + 2 * t4;
        float sc[2][2], mx = m_run;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float v = (s[j][e] + s[j][2 + e]) * sh.scale;
                sc[j][e] = pos0 + 8 * j + e < n_kv ? v : kNegInf;
                mx = fmaxf(mx, sc[j][e]);
            }
        mx = fmaxf(mx, shfl_xor(mx, 1));
        mx = fmaxf(mx, shfl_xor(mx, 2));
        const float alpha = expf(m_run - mx);  // 0 the first time: m_run = -inf, mx finite
        m_run = mx;
        l_run *= alpha;
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[n][e] *= alpha;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                sc[j][e] = expf(sc[j][e] - m_run);
                l_run += sc[j][e];
            }
        uint32_t pa[4];  // P as the A operand: row g high part, row g + 8 low part
        split2(sc[0][0], sc[0][1], pa[0], pa[1]);
        split2(sc[1][0], sc[1][1], pa[2], pa[3]);
        const uint16_t* vs = ks + TILE;
#pragma unroll
        for (int n2 = 0; n2 < NT / 2; ++n2) {
            uint32_t bf[4];
            frag_v<LD>(vs + 16 * n2, bf);
            mma16816(o[2 * n2], pa, bf[0], bf[1]);
            mma16816(o[2 * n2 + 1], pa, bf[2], bf[3]);
        }
        sync_warp();  // every lane done with this stage before the copy after next overwrites it
    }
    // The warp's results into its own ring (its copies are all done): head g, dims 8 n + 2 t4 + e.
    l_run += shfl_xor(l_run, 1);
    l_run += shfl_xor(l_run, 2);
    float* wo = reinterpret_cast<float*>(ring);
    if (g < G) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) wo[g * HD + 8 * n + 2 * t4 + e] = o[n][e] + o[n][2 + e];
        if (t4 == 0) wm[w][g] = m_run, wl[w][g] = l_run;
    }
    __syncthreads();
    merge_warps<HD>(
        wm, wl, [&](int x) { return reinterpret_cast<const float*>(sm + x * kRingHalves<HD>); }, G, kvh * G, split,
        splits, part, att + b * att_ld, part_row(b, sh, splits));
}
#endif  // !LOOM_GPU_HIP

}  // namespace

bool attn_page_takes(const AttnShape& sh) {
#if defined(LOOM_GPU_HIP)
    (void)sh;
    return false;  // written for warps of 32 lanes
#else
    const int hd = sh.head_dim;
    return kWarp == 32 && sh.n_head_kv > 0 && sh.n_head % sh.n_head_kv == 0 && sh.n_head / sh.n_head_kv <= 8 &&
           (hd == 32 || hd == 64 || hd == 128);
#endif
}

void attn_decode_pages(const float* q, int64_t q_ld, const RowDesc* rd, int nq, int layer, const AttnShape& sh,
                       const PagedKv& kv, int span, int splits, float* part, float* att, int64_t att_ld,
                       gpuStream_t s) {
    if (!attn_page_takes(sh)) throw GpuError("attn_decode_pages: not a shape the page kernels take");
    if (span <= 0 || span % kPageTokens != 0 || kv.layout.block_tokens != kPageTokens)
        throw GpuError("attn_decode_pages: spans and KV blocks must be multiples of 16 positions");
    if (nq <= 0) return;
    const dim3 grid(static_cast<unsigned>(sh.n_head_kv), static_cast<unsigned>(splits), static_cast<unsigned>(nq));
    auto go = [&](auto k, size_t smem) {
        LOOM_LAUNCH(k, grid, kPageT, smem, s, q, q_ld, rd, layer, sh, kv, span, splits, part, att, att_ld);
        LOOM_GPU_CHECK_LAUNCH();
    };
    // f(std::integral_constant<int, head_dim>) for the head sizes attn_page_takes.
    auto by_dim = [&](auto f) {
        if (sh.head_dim == 32) f(std::integral_constant<int, 32>{});
        else if (sh.head_dim == 64) f(std::integral_constant<int, 64>{});
        else f(std::integral_constant<int, 128>{});
    };
#if !defined(LOOM_GPU_HIP)
    if (kv.f16) {
        by_dim([&](auto hdc) {
            constexpr int HD = decltype(hdc)::value;
            const size_t smem = size_t{kPageWarps} * kRingHalves<HD> * sizeof(uint16_t);  // 69,632 bytes at 128
            qg::smem_limit_once<attn_page_mma_kernel<HD> >(smem);
            go(attn_page_mma_kernel<HD>, smem);
        });
        return;
    }
#endif
    const int gm = group_bucket(sh.n_head / sh.n_head_kv);
    by_dim([&](auto hdc) {
        constexpr int HD = decltype(hdc)::value;
        if (gm == 1) go(attn_page_kernel<1, HD>, 0);
        else if (gm == 2) go(attn_page_kernel<2, HD>, 0);
        else if (gm == 4) go(attn_page_kernel<4, HD>, 0);
        else go(attn_page_kernel<8, HD>, 0);
    });
}

}  // namespace loom::gpu
