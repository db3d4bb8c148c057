// The GPU backend (CUDA, HIP, or the CPU emulator): engine/backend.hpp's step interface over
// device weights, a paged KV pool sized once at start (engine/kv_layout.hpp's layout) and
// per-slot sampling state on the device; only sampled ids and their top pairs reach the host.
//
// A step flattens its rows into one batch of token rows (1-token rows first, then the prefill
// chunks) and runs one forward pass over all of them: the linear layers over every row at once
// (the register-dequantizing matvec kernel for up to GpuOptions::matvec_rows rows, GEMMs beyond:
// up to GpuOptions::decode_gemm_rows rows the tensor-core decode GEMM that dequantizes BF16 and
// quantized weights in registers, cuBLAS on F16 weights as they are and, for larger steps, on
// other types dequantized to F16), RoPE at each row's position, K/V stored through each row's
// block table, split-K decode attention for 1-token rows and, for chunks, prefill attention as
// cuBLAS products over the chunk's gathered K/V (CUDA) or the tiled kernel (both read the cached
// prefix through the table). Then prompt scoring, the output projection of
// the sampled rows, one batched sampling launch and one device-to-host copy. Pure-decode steps
// replay a captured CUDA/HIP graph per (rows, attention span, splits): captured the second time
// such a step is seen (the first runs eagerly, so that every kernel and cuBLAS shape has run once
// outside a capture), at most kMaxGraphs of them, the least recently used dropped first.
// The step is split in two (engine/backend.hpp): begin_step enqueues everything up to the
// logits and returns; finish_step uploads the grammar masks the scheduler built meanwhile,
// samples and reads back.
//
// With GpuOptions::batch_invariant every row is computed by the same kernels in the same order
// whatever the batch: the 8-vector matvec for every linear layer, no fused RMSNorm or RoPE, and
// split-K attention with a fixed split size for every query, prefill chunks included.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/backend.hpp"
#include "engine/llama_weights.hpp"
#include "engine/backends/gpu/device_model.hpp"
#include "engine/backends/gpu/gemm.hpp"
#include "engine/backends/gpu/gpu_sample.hpp"
#include "engine/backends/gpu/kernels.hpp"
#include "engine/kv_layout.hpp"
#include "model/gguf/gguf.hpp"

namespace loom::gpu {

/// The GPU engine's options and tuning (each has a flag in main.cpp's --help).
struct GpuOptions {
    int32_t n_ctx = 0;  ///< 0: the model's training context
    std::string engine_name = "loom-engine-cuda";
    int max_slots = 64;            ///< sequences running at once (--parallel)
    int max_step_tokens = 2048;    ///< tokens one step evaluates at most, over all its rows
    int64_t kv_tokens = 0;         ///< KV pool size in positions; 0: kv_fraction of the free memory
    double kv_fraction = 0.9;      ///< share of the device memory free after weights and buffers
    bool kv_f32 = false;           ///< F32 KV pool (default F16: half the memory)
    bool batch_invariant = false;  ///< a row's results independent of its batch (see above)
    bool graphs = true;            ///< replay pure-decode steps as graphs (CUDA/HIP), any row count
    bool fuse_rope = true;         ///< RoPE and the K/V store in the QKV matvec's epilogue
    bool own_gemm = false;         ///< loom's GEMM kernel instead of cuBLAS (CUDA)
    /// Prefill attention: Auto is Flash in CUDA builds where attn_flash_supports() the shape,
    /// else Gemm where cuBLAS runs the GEMMs, else Tiled; Flash (F16 KV pool, not
    /// batch_invariant) is the tensor-core FlashAttention kernel (kernels.hpp
    /// attn_prefill_flash; the emulator runs it on request); Gemm and Gemm16 (F16 KV pool, not
    /// batch_invariant) run products on cuBLAS or, without it, loom's plain kernel: Gemm16 one
    /// F16 product each for QK^T and PV (Q and P rounded to F16), Gemm two (Q and P split into
    /// F16 high and low parts, about F32's accuracy, twice the products).
    enum class PrefillAttn { Auto, Tiled, Gemm, Gemm16, Flash } prefill_attn = PrefillAttn::Auto;
    /// Steps of at most this many rows use the matvec kernel, larger ones GEMMs; -1 (the
    /// default): default_matvec_rows() of the model's weights.
    int matvec_rows = -1;
    /// Steps of more than matvec_rows and at most this many rows run their BF16 and quantized
    /// matrices through the tensor-core decode GEMM (kernels.hpp qgemm: dequantized in
    /// registers, no F16 copy of the weights); larger steps dequantize to F16 for the prefill
    /// GEMM. -1 (the default) in CUDA builds: 256 rows for Q4_K and Q6_K matrices on the
    /// fragment kernels (H100, 8B Q4_K_M, their products on wgmma: 256-row steps 22.7 against
    /// 23.2 ms dequantized, 192 rows 18.8 either way; docs/benchmarks.md), 64 for the tile
    /// kernel's types (BF16, Q8_0; from 128 rows dequantize + cuBLAS was faster on the H200),
    /// for decode_gemm_tiled and for the exact kernel (split_products); 0 (off) in the
    /// emulator, where it is checked on request, and in HIP builds, which do not have the
    /// kernel. A value given applies to every kernel. With split_products only Q4_K and Q6_K
    /// matrices take it (its exact kernel), and the default matvec_rows is 8 for other types.
    int decode_gemm_rows = -1;
    /// F16 matrices through the decode GEMM too (default: cuBLAS reads them as they are).
    bool decode_gemm_f16 = false;
    /// Q4_K and Q6_K matrices through the decode GEMM's tile kernel (weights decoded in F32
    /// into shared memory) instead of its fragment kernel (k_qgemm_frag.cu, the default): for
    /// comparisons.
    bool decode_gemm_tiled = false;
    /// One-row steps of Q4_K, Q6_K and Q8_0 matrices through the single-vector kernel
    /// (k_matvec1.cu, MatvecArgs::single), which fuses RMSNorm, instead of the batched matvec
    /// kernel after a separate RMSNorm (false: --no-matvec-single, for comparisons).
    bool matvec_single = true;
    /// Every GEMM-path product (steps of more than matvec_rows rows: prefill, larger decode
    /// steps, the logits) on F16 high and low parts of its activations and weights, so that
    /// neither operand is rounded to F16: Q4_K and Q6_K matrices in steps of up to
    /// decode_gemm_rows rows through the decode GEMM's exact kernel (kernels.hpp qgemm with
    /// QgLow: the quants as exact F16 integers, the activations' two parts, the block scales in
    /// F32; no copy of the weights), the others through Gemm::run_split (Xh.Wh + Xl.Wh + Xh.Wl,
    /// three tensor-core products for weights dequantized into both parts, two for F16 ones).
    /// Not with decode_gemm_tiled or decode_gemm_f16 (std::invalid_argument). The matvec and
    /// attention paths are unchanged (F32 products; the prefill attention's own choice), so with
    /// kv_f32 the logprobs are about F32's (docs/benchmarks.md).
    bool split_products = false;
};

/// The matvec/GEMM crossover for a model whose FFN matrices have ggml type `ffn_type`: 2 rows
/// for F16 (cuBLAS reads F16 weights as they are, and from 3 rows a GEMM step beats the batched
/// matvec, whose step time grows with its rows: on the H200, 8B F16, 6.2-6.5 ms against 6.7-14.7
/// ms at 3-8 rows; docs/benchmarks.md, "Small batches"); when `decode_gemm`
/// (GpuOptions::decode_gemm_rows > 0) 2 for the types the tensor-core decode GEMM takes (BF16,
/// Q8_0, Q4_K, Q6_K; 8B Q4_K_M on the H200, 2026-12-04: 5.0 ms a step at 2 rows on the matvec,
/// 5.1 at 3-4 rows on the decode GEMM against the matvec's 7.1 and 8.7; docs/benchmarks.md,
/// "Decode steps, prefill attention and graphs") and 4 for F32 (cuBLAS in F32); else 8 (their
/// GEMM path first dequantizes each matrix to F16).
int default_matvec_rows(uint32_t ffn_type, bool decode_gemm);

/// Per-operation device time of one profiled step (bench tool).
struct OpTimes {
    std::vector<std::pair<std::string, float>> ms;  ///< op name, milliseconds summed over layers
};

class GpuBackend final : public engine::Backend {
public:
    /// Loads the GGUF at `path`, uploads its weights and allocates the KV pool and every buffer
    /// a step needs. Throws model::GgufError (malformed), model::ModelError (unsupported
    /// architecture, shape or tensor type), std::invalid_argument (options out of range, a pool
    /// smaller than one block) or GpuError (device memory).
    GpuBackend(const std::string& path, const GpuOptions& opts);
    ~GpuBackend() override;

    const engine::ModelInfo& info() const override { return info_; }
    const engine::KvGeometry& kv() const override { return geom_; }
    void open_slot(int32_t slot, const engine::SamplingParams& params, std::span<const int32_t> prompt,
                   std::span<const int32_t> output) override;
    void close_slot(int32_t slot) override;
    /// begin_step(plan), then finish_step(plan, out).
    void step(const engine::StepPlan& plan, engine::StepOutput& out) override;
    /// Validates the plan, uploads its row, table and sampling descriptors and enqueues the
    /// forward pass, prompt scoring and the sampled rows' logits on the stream; returns without
    /// waiting for the device and without reading a mask word. Abandons (after a stream sync)
    /// a step begun and not finished.
    void begin_step(const engine::StepPlan& plan) override;
    /// Packs the masked rows' words into one pinned buffer and copies it (one copy, none when
    /// no row has a mask), enqueues the batched sampling, copies the results back and waits.
    /// std::logic_error without a begin_step before it.
    void finish_step(const engine::StepPlan& plan, engine::StepOutput& out) override;

    /// Device bytes of the weights, and of the KV pool.
    size_t weight_bytes() const { return dm_->bytes; }
    size_t kv_bytes() const { return kv_bytes_; }
    /// Runs step(plan, out) eagerly with an event after each operation and returns the time per
    /// operation (the step's effects are those of step()).
    OpTimes profile_step(const engine::StepPlan& plan, engine::StepOutput& out);
    /// The stream every kernel runs on.
    gpuStream_t stream() const { return stream_; }

private:
    static constexpr int32_t kBlockTokens = 16;  // positions per KV block
    static constexpr int kScoreGroup = 64;       // prompt-scored rows per output projection

    // ---- step preparation (gpu_backend.cpp; construction in gpu_setup.cpp) ----
    void validate(const engine::StepPlan& plan) const;
    void build_rows(const engine::StepPlan& plan);
    void upload();
    void upload_masks(const engine::StepPlan& plan);
    void finish(const engine::StepPlan& plan, engine::StepOutput& out);
    // ---- the forward pass (gpu_forward.cpp) ----
    void forward(int T);
    void attention(int T, int layer);
    void prefill_attention_gemm(const PrefillTile& chunk, int layer);
    void linear(const DevMatrix* const* mats, float* const* ys, int nmat, int rows, const float* x32, int64_t ldx,
                const uint16_t* x16, int64_t ldx16, int64_t ldy, bool add, const float* norm_w = nullptr,
                const int8_t* roles = nullptr, int layer = 0);
    void ffn(const DevLayer& L, int rows, bool fuse);
    void logits(const int32_t* idx, int rows);
    /// Runs a pure-decode step of T rows (forward pass and logits) from its graph, capturing
    /// it when this (T, span, splits) was seen before; eagerly otherwise. Throws GpuError.
    void decode_graph(int T);
    bool mv(int rows) const { return opts_.batch_invariant || rows <= opts_.matvec_rows; }
    bool rope_fusable(const DevLayer& L) const;
    void sync(const char* what);
    void tick(const char* name);

    template <class T>
    T* alloc(size_t n);

    // ---- model ----
    model::GgufFile file_;
    engine::LlamaWeights w_;
    std::unique_ptr<DeviceModel> dm_;
    engine::ModelInfo info_;
    engine::KvGeometry geom_;
    GpuOptions opts_;
    AttnShape sh_;
    gpuStream_t stream_ = nullptr;
    std::unique_ptr<Gemm> gemm_;
    bool f16_in_ = false;     // the GEMMs read F16 copies of their inputs (cuBLAS)
    bool fuse_norm_ = false;  // RMSNorm fused into single-row matvecs
    /// Whether a step of T rows fuses RMSNorm into its matvecs (one row, fuse_norm_).
    bool fuse_norm(int T) const { return !opts_.batch_invariant && fuse_norm_ && T == 1; }
    int64_t d_ = 0;    // n_embd
    int64_t nq_ = 0;   // n_head * head_dim
    int64_t nkv_ = 0;  // n_head_kv * head_dim
    int64_t ff_ = 0;   // n_ff
    int64_t V_ = 0;    // n_vocab
    // Leading dimensions (elements) of the activation buffers, multiples of 64.
    int64_t ld_d_ = 0, ld_qkv_ = 0, ld_att_ = 0, ld_ff2_ = 0, ld_ff_ = 0, ld_v_ = 0;

    // ---- device memory ----
    std::vector<void*> allocs_;
    PagedKv kv_;  // the pool; kv_.tables = tables_.dev
    size_t kv_bytes_ = 0;
    float* rope_cs_ = nullptr;  // [n_ctx][rope_dim / 2][cos, sin]
    // Activations, R = max_step_tokens rows each.
    float* x_ = nullptr;                                        // [R][ld_d] residual stream
    float* xn_ = nullptr;                                       // [R][ld_d] normalised input of a linear layer
    float* qkv_ = nullptr;                                      // [R][ld_qkv] q | k | v
    float* att_ = nullptr;                                      // [R][ld_att] attention output
    float* ffy_ = nullptr;                                      // [R][ld_ff2] gate | up
    float* g_ = nullptr;                                        // [R][ld_ff] SwiGLU output
    uint16_t *xh_ = nullptr, *atth_ = nullptr, *gh_ = nullptr;  // F16 copies (cuBLAS inputs)
    uint16_t* wscratch_ = nullptr;                              // a quantized matrix dequantized to F16 (GEMM path)
    size_t wscratch_elems_ = 0;
    // split_products: the dequantized weights' low parts, and F16 high and low parts of a GEMM's
    // input ([R][ld_xs_] each; cuBLAS and the emulator).
    uint16_t *wscratch_lo_ = nullptr, *xs_hi_ = nullptr, *xs_lo_ = nullptr;
    uint16_t* xs_sum_ = nullptr;  // [Rx][ld_sum_] the parts' block sums for the exact decode GEMM
    int64_t ld_sum_ = 0;
    int64_t ld_xs_ = 0;
    float* logits_ = nullptr;   // [logit_rows_][ld_v]
    int logit_rows_ = 0;        // max(max_slots, score group)
    int tile_gemm_rows_ = 0;    // decode GEMM rows for all but the fragment kernels (GpuOptions::decode_gemm_rows)
    float* qg_part_ = nullptr;  // the decode GEMM's split-K partials (qgemm_partial_floats)
    float* part_ = nullptr;     // split-K partials: part_rows_ queries, splits_max_ splits
    int part_rows_ = 0, splits_max_ = 1;
    SampleOut* out_dev_ = nullptr;  // [max_slots + R]: sampled rows, then scored rows
    bool attn_flash_ = false;       // prefill chunks through attn_prefill_flash (PrefillAttn::Flash)
    // GEMM prefill attention (cuBLAS, F16 pool; kernels.hpp): attn_gemm_ when it runs.
    bool attn_gemm_ = false;
    bool attn_split_ = false;                       // high and low F16 parts of Q and P (PrefillAttn::Gemm)
    uint16_t *kc_ = nullptr, *vc_ = nullptr;        // [n_ctx][nkv] a chunk's gathered keys and values
    uint16_t* qp_ = nullptr;                        // [R * nq] queries packed by KV head
    float* op_ = nullptr;                           // [R * nq] outputs, same layout
    float* ss_ = nullptr;                           // [attn_elems_] scores of a sub-block of queries
    uint16_t* pp_ = nullptr;                        // [attn_elems_] their softmax
    uint16_t *qp_lo_ = nullptr, *pp_lo_ = nullptr;  // the low parts (attn_split_)
    int64_t attn_elems_ = 0;
    SampleOut* out_host_ = nullptr;

    /// One array of a step's inputs: a pinned host copy and its device twin at a fixed address (so
    /// that graphs replay), filled on the host and uploaded together.
    template <class T>
    struct Staged {
        T* host = nullptr;
        T* dev = nullptr;
        size_t cap = 0;
        size_t n = 0;  // entries used this step
    };
    Staged<RowDesc> rows_;             // [R] flat token rows
    Staged<int32_t> tables_;           // [max_slots * blocks per sequence] block tables
    Staged<PrefillTile> tiles_;        // [R] prefill attention tiles
    std::vector<PrefillTile> chunks_;  // the step's prefill chunks, one entry each (host)
    Staged<int32_t> gather_;           // [max_slots + R] x rows of the sampled rows, then of the scored rows
    Staged<SampleRow> sample_rows_;    // [max_slots]
    Staged<ScoreRow> score_rows_;      // [R]
    Staged<uint32_t> masks_;           // [max_slots][mask_words_] the sampled rows' grammar masks
    size_t mask_words_ = 0;            // ceil(n_vocab / 32)
    bool any_mask_ = false;            // some sampled row of this step has a mask
    bool begun_ = false;               // begin_step ran and its finish_step has not
    template <class T>
    void stage(Staged<T>& s, size_t cap);
    template <class T>
    void upload(Staged<T>& s);

    // ---- step state ----
    std::unique_ptr<SlotSampler> sampler_;
    std::vector<int> flat_start_;  // per plan row: its first flat token row
    int n_dec_ = 0;                // flat rows 0..n_dec_-1: 1-token rows and short chunks (decode attention)
    /// Chunks of at most this many tokens go through split-K decode attention, one row per query.
    static constexpr int kShortChunkRows = 32;
    int span_ = 64;               // decode attention positions per split this step (attn_decode_span)
    int splits_ = 1;              // decode attention splits this step
    bool pure_decode_ = false;    // every row: one token, sampled, not scored; sampled row i = flat row i
    int nblk_ = 1;                // sampler stage-1 blocks this step
    int qpt_ = 1;                 // queries per prefill attention tile
    std::vector<int> sample_at_;  // per plan row: its entry in sample_rows_ (-1: none)
    std::vector<int> score_at_;   // per plan row: its first entry in score_rows_ (-1: none)
    /// A captured pure-decode step: its graph, the executable and the step count at its last replay.
    struct DecodeGraph {
        gpuGraph_t graph = nullptr;
        gpuGraphExec_t exec = nullptr;
        int64_t used = 0;
    };
    static constexpr size_t kMaxGraphs = 512;
    std::map<std::tuple<int, int, int>, DecodeGraph> graphs_;  // by (rows, attention span, splits)
    std::map<std::tuple<int, int, int>, int> graph_seen_;      // eager runs of a key not captured yet
    int64_t steps_ = 0;                                        // begin_step calls (for the LRU order)
    void drop_graph(std::map<std::tuple<int, int, int>, DecodeGraph>::iterator it);
    bool profiling_ = false;
    std::vector<std::pair<std::string, gpuEvent_t>> events_;
};

/// Loads `path` for the GPU backend (see GpuBackend's constructor for errors).
std::unique_ptr<engine::Backend> make_gpu_backend(const std::string& path, const GpuOptions& opts);

}  // namespace loom::gpu
