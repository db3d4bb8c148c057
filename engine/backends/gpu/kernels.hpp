// Host-callable launchers of the GPU backend's kernels (CUDA, HIP and the CPU emulator build the
// same sources). All pointers are device pointers unless a comment says otherwise; every launcher
// enqueues on `s` and returns at once. Activations are F32, row-major, with explicit row strides
// ("ld", in elements); weights are in the device layouts of DevMatrix.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/backends/gpu/gpu_runtime.hpp"
#include "engine/kv_layout.hpp"

namespace loom::gpu {

/// ggml type ids (GGUF "ggml_type") of the weight types the GPU backend stores.
constexpr uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14, kBF16 = 30;

/// A weight matrix [rows x cols] in device memory, one output row every `row_bytes` bytes
/// (16-byte aligned). Layouts per type (rows padded with zero bytes to row_bytes):
///  - F32 / F16 / BF16: cols elements, row padded to a multiple of 64 bytes.
///  - Q8_0: the row's cols int8 quants first, then its cols/32 half scales (GGUF's blocks of
///    {half d; int8 q[32]} split into two arrays so that quants load 16 bytes at a time).
///  - Q4_K: GGUF's 144-byte blocks unchanged (ggml-common.h block_q4_K).
///  - Q6_K: GGUF's 210-byte blocks, each padded to 224 bytes (ql[128], qh[64], scales[16], d).
struct DevMatrix {
    uint32_t type = kF32;
    int64_t rows = 0, cols = 0;
    size_t row_bytes = 0;
    const uint8_t* data = nullptr;
};

/// True for the weight types above.
bool device_type_supported(uint32_t type);
/// Bytes of one device row of `cols` elements of `type` (see DevMatrix). Throws
/// std::invalid_argument for an unsupported type or a cols that is not a whole number of blocks.
size_t device_row_bytes(uint32_t type, int64_t cols);
/// Host function: converts `rows` GGUF rows at `src` (tightly packed, GGUF layout) into the
/// device layout at `dst` (host memory, rows * device_row_bytes bytes, padding zeroed).
void repack_rows(uint32_t type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

/// One token row of a step, in device memory (so that a captured graph replays for any
/// positions): the token to embed, its position, and where its sequence's block table starts in
/// the step's flat table array (PagedKv::tables).
struct RowDesc {
    int32_t token = 0;
    int32_t pos = 0;
    int32_t table = 0;
    int32_t pad = 0;
};

/// The paged KV pool as the kernels see it: `pool` holds layout.pool_elems(n_layer) elements
/// (F16 when f16, else F32) in engine/kv_layout.hpp's layout; `tables` is the step's flat array
/// of block ids, and a row's position pos lives in block tables[row.table + pos / block_tokens].
struct PagedKv {
    void* pool = nullptr;
    engine::KvLayout layout;
    const int32_t* tables = nullptr;
    bool f16 = true;
};

// ---- matrix products --------------------------------------------------------------------

/// What a matvec writes: y = W.x, y += W.x (residual), or y = silu(Wa.x) * (Wb.x) (SwiGLU,
/// Shazeer 2020: seg[0] is the gate and seg[1] the up projection, same rows).
enum class MvMode : int { Store = 0, Add = 1, SwiGLU = 2 };

/// One matrix of a (possibly fused) matvec launch: rows of `w` go to y[b * y_stride + r].
struct MvSeg {
    const uint8_t* w = nullptr;
    int32_t rows = 0;
    float* y = nullptr;
};

/// y_b = W x_b for b < nb (nb <= 8) over up to three matrices of one type and column count
/// (the fused Q/K/V projection, or gate+up). Weights are read once for all nb vectors and
/// dequantized in registers; sums are F32. In the batched kernel (k_matvec.cu) a row's sum is
/// computed in the same order for every nb (each vector's accumulation is independent of the
/// others); with `single`, one or two quantized vectors take the single-vector kernel
/// (k_matvec1.cu).
struct MatvecArgs {
    uint32_t type = kF16;
    int32_t cols = 0;
    size_t row_bytes = 0;
    MvSeg seg[3];
    int nseg = 1;
    const float* x = nullptr;
    int64_t x_stride = 0;
    int64_t y_stride = 0;
    int nb = 1;
    MvMode mode = MvMode::Store;
    /// When set, x is the raw residual stream and every block applies RMSNorm with these
    /// weights first (x * scale * w with scale = 1/sqrt(mean(x^2) + eps), the mean in double, as
    /// rmsnorm() computes it), so that no separate normalisation kernel runs in decode steps.
    const float* norm_w = nullptr;
    float norm_eps = 0.0f;
    /// Always run the 8-vector instantiation of the kernel, whatever nb (batch invariance: the
    /// same machine code computes a row for every batch size).
    bool fixed_tiling = false;
    /// One vector of Q4_K, Q6_K or Q8_0 weights through the single-vector kernel (k_matvec1.cu)
    /// instead of the batched one, unless fixed_tiling (the engine's default; off with
    /// --no-matvec-single).
    bool single = false;
    /// The single-vector kernel's grid: at most this many blocks, whose warps then loop over the
    /// row groups (0: as many as the device holds at once; tests set a few to run the loop).
    int max_blocks = 0;
    /// What the epilogue does with each segment's rows instead of a plain store: 0 store, 1
    /// rotate by RoPE (adjacent pairs) and store (q), 2 rotate and write to the K cache, 3 write
    /// to the V cache, at rows[b]'s position through its block table (as rope_store does).
    int8_t seg_role[3] = {0, 0, 0};
    const RowDesc* rows = nullptr;
    PagedKv kv;
    const float* rope_cs = nullptr;
    int layer = 0;
    int head_dim = 0, rope_dim = 0;
};
void matvec(const MatvecArgs& a, gpuStream_t s);

/// Whether matvec() runs `a` on the single-vector kernel (k_matvec1.cu): `single` set, Q4_K,
/// Q6_K or Q8_0 weights, not fixed_tiling, and nb == 1 (two vectors a launch were slower than
/// the batched kernel on an H100, 2026-12-06, and were dropped).
bool matvec1_takes(const MatvecArgs& a);
/// The single-vector kernel for a matvec1_takes() launch; throws GpuError for another type.
void matvec1(const MatvecArgs& a, gpuStream_t s);

/// Dequantizes rows [row0, row0 + n) of m into F16 rows of `dst` (leading dimension dst_ld
/// halves), for the GEMM path. With `lo`, each weight w (decoded in F32) is also split: dst gets
/// h = f16(w) and lo (same layout) f16(w - h), so that h + lo is w to about 2^-22 of it
/// (Precision::Accurate, the split products).
void dequant_f16(const DevMatrix& m, int64_t row0, int64_t n, uint16_t* dst, int64_t dst_ld, gpuStream_t s,
                 uint16_t* lo = nullptr);

/// x[i] = row rows[i].token of m (dequantized to F32) for i < n.
void embed(const DevMatrix& m, const RowDesc* rows, int n, float* x, int64_t ld, gpuStream_t s);

/// C[M x N] (+)= A[M x K] . W[N x K]^T with A in F32 and W in F16 (w_f16) or F32: loom's own
/// tiled GEMM (64 x 64 tiles, F32 accumulation), used where cuBLAS is absent (HIP, emulator).
void gemm_own(const float* A, int64_t lda, const void* W, bool w_f16, int64_t ldw, int M, int N, int K, float* C,
              int64_t ldc, bool accumulate, gpuStream_t s);

/// The activations' F16 low parts and block sums for qgemm's exact kernel, as to_f16 writes
/// them: x_lo [M][ldx] (x16's leading dimension, rows 16-byte aligned) and sums [M][ld_sums]
/// halves (ld_sums even): for the 256-column block b of row m, sums[m * ld_sums + 16 b + j] is
/// the F16 high part of 2^-5 times the sum of (x16 + x_lo) over the block's columns
/// 32 j .. 32 j + 31 (j < 8; the mean, so that it overflows F16 only where an element does)
/// and sums[.. + 8 + j] its low part.
struct QgLow {
    const uint16_t* x_lo = nullptr;
    const uint16_t* sums = nullptr;
    int64_t ld_sums = 0;
};

/// The tensor-core decode GEMM (k_qgemm.cu): y[m][n] = (add ? y[m][n] : 0) + sum_k x[m][k] *
/// w[n][k] for m < M, n < w.rows, k < w.cols, with w in F16, BF16, Q8_0, Q4_K or Q6_K (device
/// layout, dequantized in registers; no F16 copy of w is made), x in F16 (x16, when not null) or
/// F32 (x32), leading dimension ldx elements, and y F32 with leading dimension ldy. Products run
/// on mma.sync m16n8k16, or for the fragment kernel's default form on wgmma m64nNk16 (sm_90a;
/// F16 operands, F32 sums either way). Where qgemm_splits(w, M, kernel) > 1, the
/// K range is split and `part` (qgemm_partial_floats(w, M) floats, device memory) holds the partial
/// sums, added in split order by a second kernel: results do not depend on timing. Throws
/// GpuError when !qgemm_available() or w's type or cols (a multiple of 8) is not supported.
/// Q4_K weights with F16 activations take the fragment kernel (k_qgemm_frag.cu: nibbles decoded
/// straight into the MMA operands with F16x2 arithmetic, so each weight is rounded as
/// f16(n * f16(d * sc) - f16(dmin * m))) unless q4_frag is false, when they take the tile kernel
/// as the other types do (weights decoded in F32 and rounded once to F16). Q6_K weights with F16
/// activations take it unless q6_frag is false (each weight rounded as f16(fma(q - 32, hi,
/// f16((q - 32) * lo))) with d * sc = hi + lo, F16 parts: the tile kernel's one rounding of
/// d * sc * (q - 32) but for a term 2^-11 of it). `splits` > 0 replaces qgemm_splits's choice
/// (tests: one split makes a block run through every tile of its rows).
///
/// With `low` (the split products of Precision::Accurate; qgemm_exact_supports types and
/// x16 the activations' high parts) Q4_K and Q6_K weights take the fragment kernel's exact form:
/// no weight is rounded (Q4_K's sc * q and Q6_K's sc * (q - 32) as F16 integers, Q6_K's above
/// 2048 as a high part and its remainder), the products run on x16 and low->x_lo, and the
/// block's d (and Q4_K's dmin * sum m x, from low->sums) are applied in F32: the result is the
/// F32 dequantized weights' product with x = x16 + x_lo to about 1e-6 of sum |x w| (the tensor
/// cores' F32 sums; loom-gpu-qgemm-test's bound is 2e-6). Throws GpuError for other types, a
/// partial block, no x16, or an odd ld_sums.
void qgemm(const DevMatrix& w, const float* x32, const uint16_t* x16, int64_t ldx, int M, float* y, int64_t ldy,
           bool add, float* part, gpuStream_t s, bool q4_frag = true, int splits = 0, bool q6_frag = true,
           const QgLow* low = nullptr);
/// True when qgemm() takes weights of this type and column count with `low` set: Q4_K or Q6_K
/// in whole 256-column blocks, in builds that have the kernel.
bool qgemm_exact_supports(uint32_t type, int64_t cols);
/// True when a qgemm() call without `low` takes the fragment kernel: F16 activations (x16) and
/// Q4_K weights (when q4_frag) or Q6_K weights (when q6_frag) as qgemm_exact_supports takes them.
bool qgemm_frag_takes(uint32_t type, int64_t cols, bool x16, bool q4_frag, bool q6_frag);
/// True in builds that have the kernel (CUDA for sm_80 and later, and the emulator); false in
/// HIP builds, whose decode GEMMs dequantize to F16 first (no mma.sync counterpart used there).
bool qgemm_available();
/// True when qgemm() takes weights of this type and column count.
bool qgemm_supports(uint32_t type, int64_t cols);
/// The decode GEMM kernel a qgemm() call takes: the tile kernel (weights decoded into shared
/// memory), the fragment kernel (Q4_K, Q6_K decoded into the MMA operands) or its exact form.
enum class QgKernel { Tile, Frag, Exact };
/// K splits qgemm uses for matrix w, M activation rows and that kernel: a function of the shapes
/// and the device's SM count only, so a given batch always adds in the same order. It takes the
/// count (1 to 16, at most one per K tile) whose blocks fill the SMs in the fewest waves of the
/// fewest K tiles (each block's first loads, which nothing overlaps, counted as half a tile),
/// counting each split's partials (written, then read by the reduce kernel) and a last wave of
/// one block an SM as faster than a full one (docs/benchmarks.md, the sixth session of
/// 2026-12-06).
int qgemm_splits(const DevMatrix& w, int M, QgKernel kernel);
/// The SM count qgemm_splits plans for: the device's (the first call reads it), 132 in the
/// emulator (an H100 or H200).
int qgemm_sm_count();
/// Floats of split-K partials any qgemm call on w with M rows may need: splits * M * w.rows for
/// the most splits of the kernels that take w's type, 0 when none splits.
size_t qgemm_partial_floats(const DevMatrix& w, int M);

/// The same product as Gemm::batched_f16 (column-major, F16 A and B, F32 C = alpha * op(A) . B,
/// added to C when accumulate)
/// by a plain kernel, one output per thread with an F32 sum over k in order: for builds without
/// cuBLAS (HIP, the emulator), where it is correct but not fast.
void gemm_batched_f16_own(bool a_t, int m, int n, int k, float alpha, const uint16_t* A, int64_t lda, int64_t sa,
                          const uint16_t* B, int64_t ldb, int64_t sb, float* C, int64_t ldc, int64_t sc, int batch,
                          bool accumulate, gpuStream_t s);

// ---- element-wise and normalisation -----------------------------------------------------

/// RMSNorm (Zhang & Sennrich 2019) of `rows` rows of n: y[i] = x[r] * (1/sqrt(mean(x[r]^2) +
/// eps)) * w with r = idx[i] (a gather, device array) or r = i when idx is null; the mean in
/// double as in the CPU backend. yh (optional) receives an F16 copy.
void rmsnorm(const float* x, int64_t ldx, const int32_t* idx, const float* w, int n, int rows, float eps, float* y,
             int64_t ldy, uint16_t* yh, int64_t ldyh, gpuStream_t s);

/// g[t][i] = silu(y[t][i]) * y[t][ff + i]; gh (optional) receives an F16 copy.
void swiglu(const float* y, int64_t ldy, int ff, int rows, float* g, int64_t ldg, uint16_t* gh, int64_t ldgh,
            gpuStream_t s);

/// F16 copy of `rows` rows of n floats: y = f16(x); with `lo` (same leading dimension ldy) also
/// the low part lo = f16(x - y), so that y + lo is x to about 2^-22 of it (F16 high and low
/// parts for the split products of Precision::Accurate); with `sums` as well (n a multiple of 256) the block
/// sums of y + lo in QgLow's layout (leading dimension ld_sums halves, at least n / 16), each
/// summed in F32 in a fixed order and scaled by 2^-5. Throws GpuError for sums without lo or n
/// not a multiple of 256.
void to_f16(const float* x, int64_t ldx, int n, int rows, uint16_t* y, int64_t ldy, gpuStream_t s,
            uint16_t* lo = nullptr, uint16_t* sums = nullptr, int64_t ld_sums = 0);

// ---- attention over the paged KV cache --------------------------------------------------

/// Shape of the attention layer.
struct AttnShape {
    int n_head = 0, n_head_kv = 0, head_dim = 0;
    int rope_dim = 0;
    bool neox = false;   ///< rotate (i, i + rope_dim/2) instead of (2i, 2i + 1)
    float scale = 1.0f;  ///< 1/sqrt(head_dim)
    float eps = 1e-5f;   ///< qk-norm epsilon
    LOOM_HD int64_t kv_dim() const { return int64_t{n_head_kv} * head_dim; }
};

/// For each of `rows` rows of qkv ([q | k | v], leading dimension ld): adds the biases
/// (optional), applies the per-head RMSNorm of q and k (optional, qwen3), rotates q and k by
/// RoPE (Su et al. 2021) with the cos/sin table rope_cs[pos][rope_dim/2][2], and stores k and v
/// into layer `layer` of the pool at rd[r].pos through rd[r]'s block table. q is rotated in place.
void rope_store(float* qkv, int64_t ld, int rows, const AttnShape& sh, int layer, const RowDesc* rd, const PagedKv& kv,
                const float* rope_cs, const float* bq, const float* bk, const float* bv, const float* q_norm,
                const float* k_norm, gpuStream_t s);

/// Positions per KV block the page kernels of decode attention take (the engine's block size).
constexpr int kAttnPageTokens = 16;

/// Whether attn_decode runs this shape on the page kernels (k_attn_page.cu): head_dim 32, 64 or
/// 128 and at most 8 query heads a KV head, in CUDA and emulator builds (warps of 32 lanes).
bool attn_page_takes(const AttnShape& sh);

/// Positions per split of attn_decode for a step of `rows` decode rows whose last position is at
/// most max_pos. Page-kernel shapes (attn_page_takes): 64 (one KV block a warp), 256 when
/// rows * n_head_kv >= 128 or when the context gives 512 blocks of 256 positions (rows *
/// n_head_kv * (max_pos / 256 + 1) >= 512), 1,024 when rows * n_head_kv >= 512 (longer splits
/// fill the device with fewer blocks, and no combine runs for contexts up to the span). Other
/// shapes (rows alone): 128
/// where the vectorized kernel does not take them (head_dim not a multiple of 16 or above 256,
/// more than 8 query heads a KV head); else 64, or 256 when rows * n_head_kv >= 256 and at most
/// 4 query heads a KV head. With `fixed` (Precision::Exact) the span depends on the shape
/// alone (the shortest), so that a query's reduction order never depends on its batch.
int attn_decode_span(const AttnShape& sh, int rows, int max_pos, bool fixed);

/// Decode attention, split-K over the cached positions (Flash-Decoding, Dao et al. 2023): query
/// row b < nq of q (leading dimension q_ld) attends to positions 0..rd[b].pos of its sequence,
/// read through its block table; `splits` chunks of `span` positions (attn_decode_span for this
/// shape) run in parallel (splits * span > every rd[b].pos) and are combined; with one split the
/// split kernel writes the output itself, with the combine's arithmetic. part holds splits * nq *
/// n_head * (head_dim + 2) floats. Output att[b][h * head_dim + d]. For a given span, a query's
/// result does not depend on `splits` or on the other rows. Throws GpuError for a span that is
/// not one attn_decode_span gives for this shape.
void attn_decode(const float* q, int64_t q_ld, const RowDesc* rd, int nq, int layer, const AttnShape& sh,
                 const PagedKv& kv, int span, int splits, float* part, float* att, int64_t att_ld, gpuStream_t s);

/// attn_decode's split kernels for attn_page_takes shapes (k_attn_page.cu), with its arguments
/// and results (with one split the output, else the splits' partials in `part` for the
/// combine): F16 pools on the tensor cores (Q and P in F16 high and low parts, F32 sums), F32
/// pools in F32 arithmetic. Throws GpuError for other shapes, or a span or KV block size that
/// is not a multiple of kAttnPageTokens.
void attn_decode_pages(const float* q, int64_t q_ld, const RowDesc* rd, int nq, int layer, const AttnShape& sh,
                       const PagedKv& kv, int span, int splits, float* part, float* att, int64_t att_ld, gpuStream_t s);

/// A tile of consecutive query rows of one sequence for attn_prefill: flat rows row0..row0+n-1 at
/// positions pos0..pos0+n-1, whose block table starts at `table` in PagedKv::tables.
struct PrefillTile {
    int32_t row0 = 0;
    int32_t n = 0;
    int32_t pos0 = 0;
    int32_t table = 0;
};

/// Queries per PrefillTile for this shape (tiles have at most this many rows).
int attn_prefill_tile_queries(const AttnShape& sh);

/// Prefill attention, tiled and causal (FlashAttention's online softmax, Dao et al. 2022, with
/// F32 arithmetic): each query of each tile (row r of q and att, position p) attends to
/// positions 0..p of its sequence, the cached prefix included, read through its block table;
/// all query heads of a KV group share each K/V tile. Throws GpuError for a head_dim above 256.
void attn_prefill(const float* q, int64_t q_ld, const PrefillTile* tiles, int ntiles, int layer, const AttnShape& sh,
                  const PagedKv& kv, float* att, int64_t att_ld, gpuStream_t s);

/// Whether attn_prefill_flash takes this shape: F16 pool, head_dim 64 or 128, a whole number of
/// query heads per KV head that divides 64. False in HIP builds, which do not have the kernel.
bool attn_flash_supports(const AttnShape& sh, bool kv_f16);

/// Queries per PrefillTile of attn_prefill_flash: 64 / (query heads per KV head); 0 in HIP builds.
int attn_flash_tile_queries(const AttnShape& sh);

/// Prefill attention on the tensor cores (FlashAttention-2, Dao 2023; k_flash.cu), one launch
/// for the `ntiles` tiles (device array) of a step's chunks, each of at most
/// attn_flash_tile_queries(sh) queries: each query (row r of q and att, position p) attends to
/// positions 0..p of its sequence, the cached prefix included, read through its block table;
/// scores and probabilities never leave the chip. Q and P are split into F16 high and low parts
/// (two products each, F32 sums), so the result carries about 22 bits. Throws GpuError unless
/// attn_flash_supports(sh, kv.f16).
void attn_prefill_flash(const float* q, int64_t q_ld, const PrefillTile* tiles, int ntiles, int layer,
                        const AttnShape& sh, const PagedKv& kv, float* att, int64_t att_ld, gpuStream_t s);

// ---- GEMM prefill attention (cuBLAS builds; gpu_forward.cpp runs the products) -----------
// A prefill chunk of n queries of one sequence at positions pos0..pos0+n-1: its keys and values
// 0..pos0+n-1 are gathered into contiguous F16 arrays, its queries packed by KV head, then per
// sub-block of queries S = scale * Q K^T (cuBLAS, F16 in, F32 out), P = causal softmax(S) in
// F16, O = P V (F32), and O unpacked into att (FlashAttention's product without its tiling,
// Dao et al. 2022; GQA: the `group` query heads of a KV head are one product's columns).

/// k[p][i] and v[p][i] (kv_dim halves per row) = the K and V rows of position p < n_pos of
/// `layer` for the sequence whose block table starts at kv.tables[table] (a host-known offset).
/// Throws GpuError unless the pool is F16 and kv_dim a multiple of 8.
void kv_gather_f16(const PagedKv& kv, int layer, int32_t table, int n_pos, uint16_t* k, uint16_t* v, gpuStream_t s);

/// qp[g][t][j][d] = F16(q[t][(g * group + j) * head_dim + d]) for t < n (group = n_head /
/// n_head_kv): the queries of KV head g form a head_dim x (n * group) column-major matrix.
/// qp_lo (optional, same layout) = F16(q - qp): with it, qp + qp_lo carries about 22 bits.
void q_pack_f16(const float* q, int64_t q_ld, int n, const AttnShape& sh, uint16_t* qp, uint16_t* qp_lo, gpuStream_t s);

/// att[t][(g * group + j) * head_dim + d] = op[g][t][j][d] for t < n (q_pack_f16's layout, F32).
void o_unpack(const float* op, int n, const AttnShape& sh, float* att, int64_t att_ld, gpuStream_t s);

/// For each of `rows` rows r of S (F32 scores, already scaled, leading dimension ld): the query
/// is t = (r % cols) / group of a sub-block whose first query is at position pos_r0, and it sees
/// keys 0..min(n_keys - 1, pos_r0 + t). P (F16, leading dimension ld) = the softmax of those
/// scores (max-subtracted, F32 sums), 0 for the masked keys below n_keys; P_lo (optional, same
/// layout) = F16(softmax - P).
void attn_softmax_causal(const float* S, uint16_t* P, uint16_t* P_lo, int64_t ld, int rows, int cols, int group,
                         int pos_r0, int n_keys, gpuStream_t s);

// ---- sampling and logprobs (engine/sampler.hpp semantics) -------------------------------

constexpr int kMaxTop = 20;

/// A logit_bias entry of an id named more than once (applied in order, as the reference does).
struct BiasEntry {
    int32_t id = 0;
    float bias = 0;
};

/// Bit 31 of a penalty state word: the id occurs in the prompt or the output (repetition
/// penalty); bits 0..30: how often it occurs in the output (frequency/presence penalties).
constexpr uint32_t kSeenBit = 0x80000000u;

/// A sampling slot's configuration and the device pointers of its state (written when the slot
/// opens, read by every sampling launch). The state: `allowed` (n_cand sorted ids when
/// has_allowed), `bias` (n_vocab floats, 0 where none; NaN marks an id with several entries in
/// `multi`), `pen` (n_vocab penalty state words, updated on the device as tokens are sampled).
struct SampleCfg {
    int32_t n_vocab = 0;
    int32_t n_cand = 0;  ///< candidates: allowed ids (sorted) or the whole vocabulary
    int32_t has_allowed = 0;
    int32_t has_bias = 0;
    int32_t penalties = 0;  ///< repetition, presence or frequency penalty active
    int32_t n_multi = 0;
    float temperature = 1.0f;
    int32_t greedy = 0;
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    int32_t filter = 0;        ///< top-k/top-p/min-p active (and needed)
    int32_t k_raw = -1;        ///< raw top-K wanted (0..20), -1: no raw logprobs
    int32_t k_proc = 0;        ///< processed top-K wanted (0..20)
    int32_t processed_lp = 0;  ///< logprobs from the processed distribution
    float rep_penalty = 1.0f, presence = 0.0f, frequency = 0.0f;
    const int32_t* allowed = nullptr;
    const float* bias = nullptr;
    uint32_t* pen = nullptr;
    const BiasEntry* multi = nullptr;
};

/// One row of a sampling launch: the slot (index into the SampleCfg array), the logits row it
/// samples from, the uniform draw u in [0, 1) and the grammar's token mask of this draw.
struct SampleRow {
    int32_t slot = 0;
    int32_t logits_row = 0;
    double u = 0;
    /// Device words of the row's token mask (bit id % 32 of word id / 32 set = allowed,
    /// ceil(n_vocab / 32) words; engine/sampler.hpp sample_logits), null: no grammar.
    const uint32_t* mask = nullptr;
};

/// SampleOut::nan of a row whose token mask allows none of its candidates (no token drawn).
constexpr int32_t kMaskEmpty = 2;

/// One prompt-logprob row: the logits row, the scored token and the top-k (k <= 20) wanted.
struct ScoreRow {
    int32_t logits_row = 0;
    int32_t target = 0;
    int32_t k = 0;
    int32_t pad = 0;
};

/// What crosses back to the host: the token, its logprob and the top pairs.
struct SampleOut {
    int32_t token = -1;
    float logprob = 0;
    int32_t n_top = 0;
    int32_t nan = 0;  ///< 1: NaN logits; kMaskEmpty: the mask left no candidate
    int32_t top_id[kMaxTop];
    float top_lp[kMaxTop];
};

/// Stage-1 blocks that cover n_cand candidates (the `nblk` of sample_rows).
int sample_blocks(int n_cand);

/// Device scratch of sample_rows for up to `rows` rows over a vocabulary of n_vocab, in bytes.
size_t sample_scratch_bytes(int n_vocab, int rows);

/// Samples `n` rows at once (engine/sampler.cpp's order of steps): row i draws from logits row
/// rows[i].logits_row (leading dimension ld) with the configuration cfgs[rows[i].slot], into
/// out[i]; its slot's penalty state then counts the sampled token. Slots of the rows are
/// distinct; nblk = sample_blocks(largest n_cand of the rows); scratch has
/// sample_scratch_bytes(n_vocab, n). A row with rows[i].mask samples, and takes its processed
/// logprobs, over the candidates the mask allows (its raw logprobs stay the model's); none
/// allowed: out[i].nan = kMaskEmpty. Three launches whatever n, no host sync.
void sample_rows(const float* logits, int64_t ld, int n_vocab, const SampleCfg* cfgs, const SampleRow* rows, int n,
                 int nblk, void* scratch, SampleOut* out, gpuStream_t s);

/// Prompt logprobs: for each of `n` rows, the raw logprob of rows[i].target from logits row
/// rows[i].logits_row over the whole vocabulary, and the top rows[i].k raw pairs, into out[i].
void score_rows(const float* logits, int64_t ld, int n_vocab, const ScoreRow* rows, int n, SampleOut* out,
                gpuStream_t s);

}  // namespace loom::gpu
