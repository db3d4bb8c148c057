// Prefill attention on the tensor cores (kernels.hpp attn_prefill_flash): FlashAttention-2's
// loop (Dao 2023) over the paged F16 KV pool with mma.sync m16n8k16, one launch for every
// prefill chunk of a step. A block takes one PrefillTile (up to 64 / group consecutive queries
// of a chunk) and one KV head: 64 rows of (query, head) pairs, the tile's queries for each of
// the group's query heads, so that the group shares every K/V tile (GQA). Per tile of 64 keys,
// read through the block table with cp.async into a double-buffered shared-memory tile, each
// warp computes its 16 rows' scores S = Q K^T, the causal mask, the online softmax (running max
// and sum in F32) and O += P V, without writing S or P to memory.
//
// Accuracy: Q (F32) is split into F16 high and low parts and P likewise, each product taking
// two MMAs with F32 accumulation, so Q K^T and P V carry about 22 bits (as the cuBLAS path's
// split products, kernels.hpp PrefillAttn::Gemm); K and V are the pool's F16 values, exact.
//
// Sources: Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning" (2023), Algorithm 1 (online softmax, rescaled output, one division at the end);
// PTX ISA 8.x "mma" (m16n8k16 fragment layouts: the accumulators of two adjacent n8 tiles are
// the A operand of the next k16 product), "ldmatrix" (.trans for V), "cp.async" (zero fill with
// src-size 0). HIP builds leave the kernel out (attn_flash_supports() is false there).
#include <string>

#include "engine/backends/gpu/k_common.cuh"
#include "engine/backends/gpu/k_qgemm.cuh"

namespace loom::gpu {

#if defined(LOOM_GPU_HIP)

bool attn_flash_supports(const AttnShape&, bool) { return false; }

int attn_flash_tile_queries(const AttnShape&) { return 0; }

void attn_prefill_flash(const float*, int64_t, const PrefillTile*, int, int, const AttnShape&, const PagedKv&, float*,
                        int64_t, gpuStream_t) {
    throw GpuError("attn_prefill_flash: not built for HIP");
}

#else

namespace {

using qg::frag_a;
using qg::frag_b2;
using qg::frag_v;
using qg::mma16816;
using qg::split2;

using qg::cp_async16;
using qg::cp_async_commit;
using qg::cp_async_wait;

constexpr int kFaThreads = 128;  // 4 warps of 16 rows
constexpr int kFaRows = 64;      // (query, head) rows a block
constexpr int kFaKeys = 64;      // keys a tile

// Block (blockIdx.x: tile, the last first, as later queries see more keys; blockIdx.y: KV head).
template <int HD>
__global__ void __launch_bounds__(kFaThreads)
    flash_prefill_kernel(const float* q, int64_t q_ld, const PrefillTile* tiles, int layer, AttnShape sh, PagedKv kv,
                         float* att, int64_t att_ld) {
    constexpr int LD = HD + 8;  // halves a shared row: the 8 rows an ldmatrix phase reads hit distinct banks
    constexpr int NT = HD / 8;  // n8 tiles of the output
    LOOM_DYN_SMEM(uint16_t, sm);
    uint16_t* qh = sm;                     // [64][LD] Q, F16 high part
    uint16_t* ql = qh + kFaRows * LD;      // [64][LD] low part
    uint16_t* ks = ql + kFaRows * LD;      // [2][64][LD] key tiles
    uint16_t* vs = ks + 2 * kFaKeys * LD;  // [2][64][LD] value tiles
    const int G = sh.n_head / sh.n_head_kv, QB = kFaRows / G;
    const PrefillTile c = tiles[gridDim.x - 1 - blockIdx.x];  // c.n <= QB queries
    const int kvh = static_cast<int>(blockIdx.y);
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    const int key_end = c.pos0 + c.n;  // keys 0..key_end-1
    const int n_tiles = (key_end + kFaKeys - 1) / kFaKeys;

    // Q: row r is head r / QB of the group, query r % QB of the tile; F16 high and low parts.
    for (int i = tid; i < kFaRows * (HD / 4); i += kFaThreads) {
        const int r = i / (HD / 4), d = 4 * (i % (HD / 4));
        const int t = r % QB, h = kvh * G + r / QB;
        float4 v{0.0f, 0.0f, 0.0f, 0.0f};
        if (t < c.n) v = *reinterpret_cast<const float4*>(q + int64_t{c.row0 + t} * q_ld + int64_t{h} * HD + d);
        uint32_t h0, l0, h1, l1;
        split2(v.x, v.y, h0, l0);
        split2(v.z, v.w, h1, l1);
        *reinterpret_cast<uint2*>(qh + r * LD + d) = uint2{h0, h1};
        *reinterpret_cast<uint2*>(ql + r * LD + d) = uint2{l0, l1};
    }

    const uint16_t* pool = static_cast<const uint16_t*>(kv.pool);
    auto load_tile = [&](int kt, int buf) {
        uint16_t* kd = ks + buf * kFaKeys * LD;
        uint16_t* vd = vs + buf * kFaKeys * LD;
        for (int i = tid; i < kFaKeys * (HD / 8); i += kFaThreads) {
            const int row = i / (HD / 8), d = 8 * (i % (HD / 8)), p = kt * kFaKeys + row;
            const bool ok = p < key_end;
            const int64_t off = ok ? kv_off(kv, layer, c.table, p, 0) + int64_t{kvh} * HD + d : 0;
            cp_async16(kd + row * LD + d, pool + off, ok);
            cp_async16(vd + row * LD + d, pool + off + (ok ? kv.layout.half_elems() : 0), ok);
        }
        cp_async_commit();
    };

    // This lane's two rows: g and g + 8 of the warp's 16; their query positions.
    int qpos[2];
    for (int e = 0; e < 2; ++e) {
        const int r = warp * 16 + g + 8 * e;
        qpos[e] = c.pos0 + r % QB;
    }
    float o[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.0f, 0.0f};
    const uint16_t* qhw = qh + warp * 16 * LD;
    const uint16_t* qlw = ql + warp * 16 * LD;

    load_tile(0, 0);
    for (int kt = 0; kt < n_tiles; ++kt) {
        const int buf = kt & 1;
        if (kt + 1 < n_tiles) {
            load_tile(kt + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // this tile (and, the first time, Q) visible to every warp
        const uint16_t* kb = ks + buf * kFaKeys * LD;
        const uint16_t* vb = vs + buf * kFaKeys * LD;

        // S = Q K^T for the warp's 16 rows and the tile's 64 keys (8 n8 tiles).
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD; kk += 16) {
            uint32_t ah[4], al[4];
            frag_a<LD>(qhw + kk, ah);
            frag_a<LD>(qlw + kk, al);
#pragma unroll
            for (int n2 = 0; n2 < 4; ++n2) {
                uint32_t bf[4];
                frag_b2<LD>(kb + n2 * 16 * LD + kk, bf);
                mma16816(s[2 * n2], ah, bf[0], bf[1]);
                mma16816(s[2 * n2], al, bf[0], bf[1]);
                mma16816(s[2 * n2 + 1], ah, bf[2], bf[3]);
                mma16816(s[2 * n2 + 1], al, bf[2], bf[3]);
            }
        }
        // Scale, causal mask, online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3).
        const int key0 = kt * kFaKeys + 2 * t4;
        float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = key0 + 8 * n + (e & 1);
                float v = s[n][e] * sh.scale;
                if (key > qpos[e >> 1]) v = kNegInf;
                s[n][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            mx[h] = fmaxf(mx[h], shfl_xor(mx[h], 1));
            mx[h] = fmaxf(mx[h], shfl_xor(mx[h], 2));
            alpha[h] = expf(m_run[h] - mx[h]);  // 0 the first time (m_run = -inf, mx finite: key 0 is seen)
            m_run[h] = mx[h];
            l_run[h] *= alpha[h];
        }
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e >> 1];
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float p = expf(s[n][e] - m_run[e >> 1]);
                s[n][e] = p;
                l_run[e >> 1] += p;
            }
            // O += P V: P's accumulators are the A operand (keys 16 kk2.. of rows g, g + 8).
#pragma unroll
        for (int kk2 = 0; kk2 < kFaKeys / 16; ++kk2) {
            uint32_t ph[4], pl[4];
            split2(s[2 * kk2][0], s[2 * kk2][1], ph[0], pl[0]);
            split2(s[2 * kk2][2], s[2 * kk2][3], ph[1], pl[1]);
            split2(s[2 * kk2 + 1][0], s[2 * kk2 + 1][1], ph[2], pl[2]);
            split2(s[2 * kk2 + 1][2], s[2 * kk2 + 1][3], ph[3], pl[3]);
#pragma unroll
            for (int n2 = 0; n2 < NT / 2; ++n2) {
                uint32_t bf[4];
                frag_v<LD>(vb + kk2 * 16 * LD + n2 * 16, bf);
                mma16816(o[2 * n2], ph, bf[0], bf[1]);
                mma16816(o[2 * n2], pl, bf[0], bf[1]);
                mma16816(o[2 * n2 + 1], ph, bf[2], bf[3]);
                mma16816(o[2 * n2 + 1], pl, bf[2], bf[3]);
            }
        }
        __syncthreads();  // every warp is done with this buffer before the next load overwrites it
    }

    // O / l into att: row r of the block is query r % QB of the tile, of head kvh * G + r / QB.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l_run[h] += shfl_xor(l_run[h], 1);
        l_run[h] += shfl_xor(l_run[h], 2);
    }
#pragma unroll
    for (int e2 = 0; e2 < 2; ++e2) {
        const int r = warp * 16 + g + 8 * e2, t = r % QB, h = kvh * G + r / QB;
        if (t >= c.n) continue;
        const float inv = 1.0f / l_run[e2];
        float* out = att + int64_t{c.row0 + t} * att_ld + int64_t{h} * HD + 2 * t4;
#pragma unroll
        for (int n = 0; n < NT; ++n)
            *reinterpret_cast<float2*>(out + 8 * n) = float2{o[n][2 * e2] * inv, o[n][2 * e2 + 1] * inv};
    }
}

template <int HD>
void launch_flash(const float* q, int64_t q_ld, const PrefillTile* tiles, int ntiles, int layer, const AttnShape& sh,
                  const PagedKv& kv, float* att, int64_t att_ld, gpuStream_t s) {
    constexpr int LD = HD + 8;
    const size_t smem = static_cast<size_t>(2 * kFaRows + 4 * kFaKeys) * LD * sizeof(uint16_t);
    auto k = flash_prefill_kernel<HD>;
    qg::smem_limit_once<flash_prefill_kernel<HD> >(smem);
    const dim3 grid(static_cast<unsigned>(ntiles), static_cast<unsigned>(sh.n_head_kv));
    LOOM_LAUNCH(k, grid, kFaThreads, smem, s, q, q_ld, tiles, layer, sh, kv, att, att_ld);
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace

bool attn_flash_supports(const AttnShape& sh, bool kv_f16) {
    const int group = sh.n_head_kv > 0 ? sh.n_head / sh.n_head_kv : 0;
    return kv_f16 && (sh.head_dim == 64 || sh.head_dim == 128) && group >= 1 && group <= kFaRows &&
           kFaRows % group == 0 && sh.n_head % sh.n_head_kv == 0;
}

int attn_flash_tile_queries(const AttnShape& sh) { return kFaRows / (sh.n_head / sh.n_head_kv); }

void attn_prefill_flash(const float* q, int64_t q_ld, const PrefillTile* tiles, int ntiles, int layer,
                        const AttnShape& sh, const PagedKv& kv, float* att, int64_t att_ld, gpuStream_t s) {
    if (ntiles <= 0) return;
    if (!attn_flash_supports(sh, kv.f16))
        throw GpuError("attn_prefill_flash: head_dim " + std::to_string(sh.head_dim) + " and " +
                       std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) +
                       " heads (or an F32 pool) are not supported");
    if (sh.head_dim == 64) launch_flash<64>(q, q_ld, tiles, ntiles, layer, sh, kv, att, att_ld, s);
    else launch_flash<128>(q, q_ld, tiles, ntiles, layer, sh, kv, att, att_ld, s);
}

#endif  // LOOM_GPU_HIP

}  // namespace loom::gpu
