// Host-callable launchers of the GPU backend's kernels (CUDA, HIP and the CPU emulator build the
// same sources). All pointers are device pointers unless a comment says otherwise; every launcher
// enqueues on `s` and returns at once. Activations are F32, row-major, with explicit row strides
// ("ld", in elements); weights are in the device layouts of DevMatrix.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/backends/gpu/gpu_runtime.hpp"

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

/// One decode step's per-sequence state, in device memory so that a captured graph replays
/// for any positions: kv is the sequence's cache [layer][K,V][cap][kv_dim] in F16 or F32.
struct SlotDesc {
    int32_t token = 0;   ///< token to embed
    int32_t pos = 0;     ///< its position (n_past before the step)
    int32_t cap = 0;     ///< cache capacity in positions
    int32_t pad = 0;
    void* kv = nullptr;
    float* logits = nullptr;  ///< the sequence's logits [n_vocab], filled after the step
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
/// dequantized in registers; sums are F32.
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
    /// nb == 1 only: the single-vector kernel (k_mv1.cu, opt-in: slower on the H200 so far)
    /// instead of the batched one.
    bool single = false;
    /// nb == 1, F16/BF16/Q4_K/Q6_K (matvec_pipelined_supports): the pipelined kernel (k_mvp.cu,
    /// weights streamed through a shared-memory ring by asynchronous copies; opt-in, slower on
    /// the H200 so far).
    bool pipelined = false;
    /// With `single`, on CUDA: a programmatic dependent launch (the kernel loads its first weights
    /// before it waits for the previous kernel to finish).
    bool pdl = false;
    /// Decode steps (nb <= 8): what the epilogue does with each segment's rows instead of a
    /// plain store: 0 store, 1 rotate by RoPE (adjacent pairs) and store (q), 2 rotate and write
    /// to the K cache, 3 write to the V cache, at slots[b]'s position (as rope_store does).
    int8_t seg_role[3] = {0, 0, 0};
    /// Q4_K: the previous dot product (nibbles to floats through a magic-number add) instead
    /// of the denormal-nibble one; both are exact per product (LOOM_GPU_Q4_MAGIC=1, for A/B runs).
    bool q4_magic = false;
    const SlotDesc* slots = nullptr;
    const float* rope_cs = nullptr;
    int layer = 0;
    int head_dim = 0, rope_dim = 0;
    int64_t kv_dim = 0;
    bool kv_f16 = false;
};
void matvec(const MatvecArgs& a, gpuStream_t s);
/// Whether the pipelined single-vector kernel (MatvecArgs::pipelined) handles weight type
/// `type` with `cols` columns: Q4_K and Q6_K with cols % 256 == 0, F16 and BF16 with
/// cols % 8 == 0. Other matrices take the batched kernel.
bool matvec_pipelined_supports(uint32_t type, int cols);

/// Dequantizes rows [row0, row0 + n) of m into F16 rows of `dst` (leading dimension dst_ld
/// halves), for the GEMM path.
void dequant_f16(const DevMatrix& m, int64_t row0, int64_t n, uint16_t* dst, int64_t dst_ld, gpuStream_t s);

/// x[i] = row tokens[i] of m (dequantized to F32) for i < n; tokens come from slots[i].token
/// when `slots` is non-null, else from tokens.
void embed(const DevMatrix& m, const int32_t* tokens, const SlotDesc* slots, int n, float* x, int64_t ld,
           gpuStream_t s);

/// C[M x N] (+)= A[M x K] . W[N x K]^T with A in F32 and W in F16 (w_f16) or F32: loom's own
/// tiled GEMM (64 x 64 tiles, F32 accumulation), used where cuBLAS is absent (HIP, emulator).
void gemm_own(const float* A, int64_t lda, const void* W, bool w_f16, int64_t ldw, int M, int N, int K, float* C,
              int64_t ldc, bool accumulate, gpuStream_t s);

// ---- element-wise and normalisation -----------------------------------------------------

/// RMSNorm (Zhang & Sennrich 2019) of `rows` rows of n: y = x * (1/sqrt(mean(x^2) + eps)) * w,
/// the mean in double as in the CPU backend. yh (optional) receives an F16 copy.
void rmsnorm(const float* x, int64_t ldx, const float* w, int n, int rows, float eps, float* y, int64_t ldy,
             uint16_t* yh, int64_t ldyh, gpuStream_t s);

/// g[t][i] = silu(y[t][i]) * y[t][ff + i]; gh (optional) receives an F16 copy.
void swiglu(const float* y, int64_t ldy, int ff, int rows, float* g, int64_t ldg, uint16_t* gh, int64_t ldgh,
            gpuStream_t s);

/// F16 copy of `rows` rows of n floats.
void to_f16(const float* x, int64_t ldx, int n, int rows, uint16_t* y, int64_t ldy, gpuStream_t s);

/// Copies logits row b to slots[b].logits for b < nb.
void scatter_logits(const float* logits, int64_t ld, int n_vocab, const SlotDesc* slots, int nb, gpuStream_t s);

// ---- attention --------------------------------------------------------------------------

/// Shape of the attention layer.
struct AttnShape {
    int n_head = 0, n_head_kv = 0, head_dim = 0;
    int rope_dim = 0;
    bool neox = false;      ///< rotate (i, i + rope_dim/2) instead of (2i, 2i + 1)
    bool kv_f16 = true;     ///< cache element type
    float scale = 1.0f;     ///< 1/sqrt(head_dim)
    float eps = 1e-5f;      ///< qk-norm epsilon
    LOOM_HD int64_t kv_dim() const { return int64_t{n_head_kv} * head_dim; }
};

/// For each of `rows` rows of qkv ([q | k | v], leading dimension ld): adds the biases
/// (optional), applies the per-head RMSNorm of q and k (optional, qwen3), rotates q and k by
/// RoPE (Su et al. 2021) with the cos/sin table rope_cs[pos][rope_dim/2][2], and stores k and v
/// into layer `layer` of the cache. Row r's position and cache: slots[r] when per_row, else
/// slots[0].pos + r in slots[0]'s cache. q is rotated in place.
void rope_store(float* qkv, int64_t ld, int rows, const AttnShape& sh, int layer, const SlotDesc* slots, bool per_row,
                const float* rope_cs, const float* bq, const float* bk, const float* bv, const float* q_norm,
                const float* k_norm, gpuStream_t s);

/// Positions per split of attn_decode for this shape (64 or 128).
int attn_decode_span(const AttnShape& sh);

/// Decode attention, split-K over the cached positions (Flash-Decoding): query row b of q
/// (leading dimension q_ld) attends to positions 0..slots[b].pos of its cache; `splits` chunks
/// of attn_decode_span(sh) positions run in parallel and are combined. part holds splits * nb *
/// n_head * (head_dim + 2) floats. Output att[b][h * head_dim + d]. pdl: its kernels as
/// programmatic dependent launches (CUDA; the decode path of the opt-in single-vector matvec).
void attn_decode(const float* q, int64_t q_ld, const SlotDesc* slots, int nb, int layer, const AttnShape& sh,
                 int splits, float* part, float* att, int64_t att_ld, gpuStream_t s, bool pdl = false);

/// Prefill attention, tiled and causal (FlashAttention's online softmax, Dao et al. 2022, with
/// F32 arithmetic): query t (position slots[0].pos + t, t < T) attends to positions
/// 0..pos of slots[0]'s cache; all query heads of a KV group share each K/V tile.
void attn_prefill(const float* q, int64_t q_ld, const SlotDesc* slots, int T, int layer, const AttnShape& sh,
                  float* att, int64_t att_ld, gpuStream_t s);

/// In place over `batch` blocks of T rows of n scores (row t is query position p0 + t): the
/// softmax over columns 0..p0+t (sums in double, as the CPU backend), zero past them.
void softmax_causal(float* S, int T, int n, int batch, int p0, gpuStream_t s);

// ---- sampling and logprobs (engine/sampler.hpp semantics) -------------------------------

constexpr int kMaxTop = 20;

/// One logit change: bias entries (in order), then the repetition penalty when rep != 0, then
/// the frequency/presence penalties for `count` earlier outputs (engine/sampler.cpp).
struct SampleMod {
    int32_t id = 0;
    int32_t nbias = 0;
    float bias[4] = {0, 0, 0, 0};
    int32_t rep = 0;
    int32_t count = 0;
};

/// A sampling request (filled on the host, copied to the device).
struct SampleCfg {
    int32_t n_vocab = 0;
    int32_t n_cand = 0;        ///< candidates: allowed ids (sorted) or the whole vocabulary
    int32_t has_allowed = 0;
    int32_t n_mods = 0;
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
    double u = 0;              ///< uniform draw in [0, 1)
};

/// What crosses back to the host: the token, its logprob and the top pairs.
struct SampleOut {
    int32_t token = -1;
    float logprob = 0;
    int32_t n_top = 0;
    int32_t nan = 0;
    int32_t top_id[kMaxTop];
    float top_lp[kMaxTop];
};

/// Device scratch of the sampler for a vocabulary of n_vocab (sample_scratch_bytes bytes).
size_t sample_scratch_bytes(int n_vocab);

/// Samples from `logits` (device, n_vocab F32) per cfg (engine/sampler.cpp's order of steps);
/// mods (cfg.n_mods entries, ids unique) and allowed (cfg.n_cand sorted ids when has_allowed)
/// are device arrays; scratch has sample_scratch_bytes. Writes *out (device memory).
void sample(const float* logits, const SampleCfg& cfg, const SampleMod* mods, const int32_t* allowed, void* scratch,
            SampleOut* out, gpuStream_t s);

/// Prompt logprobs: for each of `rows` logits rows (leading dimension ld), the raw logprob of
/// targets[r] and the top-k (k <= 20) raw pairs, into out[r].
void score_rows(const float* logits, int64_t ld, int n_vocab, int rows, const int32_t* targets, int k, SampleOut* out,
                gpuStream_t s);

}  // namespace loom::gpu
