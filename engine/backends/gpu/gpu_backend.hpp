// The GPU backend (CUDA, HIP, or the CPU emulator): engine/backend.hpp's step interface over
// device weights, a paged KV pool sized once at start (engine/kv_layout.hpp's layout) and
// per-slot sampling state on the device; only sampled ids and their top pairs reach the host.
//
// A step flattens its rows into one batch of token rows (1-token rows first, then the prefill
// chunks) and runs one forward pass over all of them: the linear layers over every row at once
// (the register-dequantizing matvec kernel for up to ForwardPlan::matvec_rows rows, GEMMs beyond:
// up to the plan's decode GEMM rows the tensor-core decode GEMM that dequantizes BF16 and
// quantized weights in registers, cuBLAS on F16 weights as they are and, for larger steps, on
// other types dequantized to F16), RoPE at each row's position, K/V stored through each row's
// block table, split-K decode attention for 1-token rows and, for chunks, prefill attention as
// cuBLAS products over the chunk's gathered K/V (CUDA) or the tiled kernel (both read the cached
// prefix through the table). Then prompt scoring, the output projection of
// the sampled rows, one batched sampling launch and one device-to-host copy. Pure-decode steps
// replay a captured CUDA/HIP graph per (rows, attention span, splits): captured the second time
// such a step is seen (the first runs eagerly, so that every kernel and cuBLAS shape has run once
// outside a capture), at most DecodeGraphs::kMax of them, the least recently used dropped first.
// The step is split in two (engine/backend.hpp): begin_step enqueues everything up to the
// logits and returns; finish_step uploads the grammar masks the scheduler built meanwhile,
// samples and reads back.
//
// Which kernel computes each product, attention and the logits at each row count is the forward
// plan's (gpu_plan.hpp), chosen once at load from the model, the build, the precision tier and
// the tuning knobs. Under Precision::Exact every row is computed by the same kernels in the
// same order whatever the batch: the 8-vector matvec for every linear layer, no fused RMSNorm
// or RoPE, and split-K attention with a fixed split size for every query, prefill chunks
// included.
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
#include "engine/backends/gpu/gpu_options.hpp"
#include "engine/backends/gpu/gpu_plan.hpp"
#include "engine/backends/gpu/gpu_sample.hpp"
#include "engine/backends/gpu/kernels.hpp"
#include "engine/kv_layout.hpp"
#include "model/gguf/gguf.hpp"

namespace loom::gpu {

/// Per-operation device time of one profiled step (bench tool).
struct OpTimes {
    std::vector<std::pair<std::string, float>> ms;  ///< op name, milliseconds summed over layers
};

class GpuBackend final : public engine::Backend {
public:
    /// Loads the GGUF at `path`, uploads its weights, makes the forward plan (make_plan) and
    /// allocates the KV pool and every buffer the plan's kernels need. Throws model::GgufError
    /// (malformed), model::ModelError (unsupported architecture, shape or tensor type),
    /// std::invalid_argument (options out of range, tuning the build or tier cannot run (see
    /// make_plan), a pool smaller than one block) or GpuError (device memory).
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
    /// The forward plan (every kernel choice) and the model it was made for (--print-plan).
    const ForwardPlan& forward_plan() const { return plan_; }
    const PlanModel& plan_model() const { return plan_model_; }

private:
    static constexpr int32_t kBlockTokens = 16;  // positions per KV block
    static constexpr int kScoreGroup = 64;       // prompt-scored rows per output projection

    // ---- construction (gpu_setup.cpp) ----
    void init_shapes();
    void alloc_activations(int R);
    void alloc_step_inputs(int R);
    void upload_rope();
    void alloc_kv_pool();
    // ---- step preparation (gpu_backend.cpp) ----
    void validate(const engine::StepPlan& plan) const;
    void build_rows(const engine::StepPlan& plan);
    void upload();
    void upload_masks(const engine::StepPlan& plan);
    void finish(const engine::StepPlan& plan, engine::StepOutput& out);
    // ---- the forward pass (gpu_forward.cpp) ----
    void forward(int T);
    void attention(int T, int layer);
    void prefill_attention_gemm(const PrefillTile& chunk, int layer);
    /// y_i (+)= x . W_i^T for the nmat matrices mats[i] (their routes in the plan: routes[i]) over
    /// `rows` rows, each by its route's kernel at that row count; norm_w (RMSNorm fused) and
    /// roles (RoPE and the K/V store fused) only on the matvec path.
    void linear(const DevMatrix* const* mats, const Route* const* routes, float* const* ys, int nmat, int rows,
                const float* x32, int64_t ldx, const uint16_t* x16, int64_t ldx16, int64_t ldy, bool add,
                const float* norm_w = nullptr, const int8_t* roles = nullptr, int layer = 0);
    void ffn(const DevLayer& L, const LayerPlan& P, int rows, bool fuse);
    void logits(const int32_t* idx, int rows);
    /// Runs a pure-decode step of T rows (forward pass and logits) from its graph, capturing
    /// it when this (T, span, splits) was seen before; eagerly otherwise. Throws GpuError.
    void decode_graph(int T);
    bool exact() const { return plan_.precision == Precision::Exact; }
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
    int64_t d_ = 0;    // n_embd
    int64_t nq_ = 0;   // n_head * head_dim
    int64_t nkv_ = 0;  // n_head_kv * head_dim
    int64_t ff_ = 0;   // n_ff
    int64_t V_ = 0;    // n_vocab

    // ---- the plan ----
    PlanModel plan_model_;  // the model's matrices as make_plan saw them
    ForwardPlan plan_;      // every kernel choice of the forward pass

    // ---- device memory ----
    std::vector<void*> allocs_;
    PagedKv kv_;  // the pool; kv_.tables = in_.tables.dev
    size_t kv_bytes_ = 0;
    float* rope_cs_ = nullptr;  // [n_ctx][rope_dim / 2][cos, sin]

    /// The forward pass's activations and scratch, in device memory: R = max(max_step_tokens,
    /// slots) token rows, Rx = max(R, logit_rows) where the logits' rows use them too. Leading
    /// dimensions (ld_*, elements) are multiples of 64.
    struct Activations {
        int64_t ld_d = 0, ld_qkv = 0, ld_att = 0, ld_ff2 = 0, ld_ff = 0, ld_v = 0;
        float* x = nullptr;            // [R][ld_d] residual stream
        float* xn = nullptr;           // [Rx][ld_d] normalised input of a linear layer
        float* qkv = nullptr;          // [R][ld_qkv] q | k | v
        float* att = nullptr;          // [R][ld_att] attention output
        float* ffy = nullptr;          // [R][ld_ff2] gate | up
        float* g = nullptr;            // [R][ld_ff] SwiGLU output
        uint16_t* xh = nullptr;        // [Rx][ld_d] F16 copy of xn (cuBLAS input, plan f16_in)
        uint16_t* atth = nullptr;      // [R][ld_att] F16 copy of att
        uint16_t* gh = nullptr;        // [R][ld_ff] F16 copy of g
        uint16_t* wscratch = nullptr;  // a quantized matrix (or a slice) dequantized to F16 (GEMM path)
        size_t wscratch_elems = 0;
        uint16_t* wscratch_lo = nullptr;  // its low parts (split products)
        // Split products (plan split_parts): F16 high and low parts of a GEMM's input, [Rx][ld_xs]
        // each, and (plan split_sums) their block sums [Rx][ld_sum] for the decode GEMM's exact kernel.
        uint16_t *xs_hi = nullptr, *xs_lo = nullptr, *xs_sum = nullptr;
        int64_t ld_xs = 0, ld_sum = 0;
        float* logits = nullptr;   // [logit_rows][ld_v]
        int logit_rows = 0;        // max(max_slots, score group)
        float* qg_part = nullptr;  // the decode GEMM's split-K partials (qgemm_partial_floats)
        float* part = nullptr;     // decode attention's split-K partials: part_rows queries, splits_max splits
        int part_rows = 0, splits_max = 1;
        // GEMM prefill attention (plan GemmSplit or Gemm16): a chunk's gathered keys and values
        // [n_ctx][nkv], its queries packed by KV head [R * nq] (qp; low parts qp_lo when split),
        // the outputs in the same layout (op), and the scores of a sub-block of queries and their
        // softmax (ss, pp; low parts pp_lo), attn_elems each.
        uint16_t *kc = nullptr, *vc = nullptr, *qp = nullptr, *qp_lo = nullptr;
        float* op = nullptr;
        float* ss = nullptr;
        uint16_t *pp = nullptr, *pp_lo = nullptr;
        int64_t attn_elems = 0;
    };
    Activations act_;
    int qpt_ = 1;  // queries per prefill attention tile

    /// One array of a step's inputs: a pinned host copy and its device twin at a fixed address (so
    /// that graphs replay), filled on the host and uploaded together.
    template <class T>
    struct Staged {
        T* host = nullptr;
        T* dev = nullptr;
        size_t cap = 0;
        size_t n = 0;  // entries used this step
    };
    template <class T>
    void stage(Staged<T>& s, size_t cap);
    template <class T>
    void upload(Staged<T>& s);

    /// A step's inputs (build_rows) and its results' buffers.
    struct StepInputs {
        Staged<RowDesc> rows;             // [R] flat token rows
        Staged<int32_t> tables;           // [max_slots * blocks per sequence] block tables
        Staged<PrefillTile> tiles;        // [R] prefill attention tiles
        std::vector<PrefillTile> chunks;  // the step's prefill chunks, one entry each (host)
        Staged<int32_t> gather;           // [max_slots + R] x rows of the sampled rows, then of the scored rows
        Staged<SampleRow> sample_rows;    // [max_slots]
        Staged<ScoreRow> score_rows;      // [R]
        Staged<uint32_t> masks;           // [max_slots][mask_words] the sampled rows' grammar masks
        size_t mask_words = 0;            // ceil(n_vocab / 32)
        bool any_mask = false;            // some sampled row of this step has a mask
        std::vector<int> flat_start;      // per plan row: its first flat token row
        std::vector<int> sample_at;       // per plan row: its entry in sample_rows (-1: none)
        std::vector<int> score_at;        // per plan row: its first entry in score_rows (-1: none)
        int n_dec = 0;                    // flat rows 0..n_dec-1: 1-token rows and short chunks (decode attention)
        int span = 64;                    // decode attention positions per split this step (attn_decode_span)
        int splits = 1;                   // decode attention splits this step
        bool pure_decode = false;         // every row: one token, sampled, not scored; sampled row i = flat row i
        int nblk = 1;                     // sampler stage-1 blocks this step
        SampleOut* out_dev = nullptr;     // [max_slots + R]: sampled rows, then scored rows
        SampleOut* out_host = nullptr;    // its pinned host copy
    };
    StepInputs in_;
    /// Chunks of at most this many tokens go through split-K decode attention, one row per query.
    static constexpr int kShortChunkRows = 32;
    bool begun_ = false;  // begin_step ran and its finish_step has not

    // ---- step state ----
    std::unique_ptr<SlotSampler> sampler_;

    /// Captured pure-decode steps by (rows, attention span, splits): at most kMax, the least
    /// recently replayed dropped first.
    struct DecodeGraphs {
        using Key = std::tuple<int, int, int>;
        /// A graph, its executable and the step count at its last replay.
        struct Graph {
            gpuGraph_t graph = nullptr;
            gpuGraphExec_t exec = nullptr;
            int64_t used = 0;
        };
        static constexpr size_t kMax = 512;
        std::map<Key, Graph> captured;
        std::map<Key, int> seen;  // eager runs of a key not captured yet
        /// Destroys the graph at `it` and forgets it.
        void drop(std::map<Key, Graph>::iterator it);
    };
    DecodeGraphs graphs_;
    int64_t steps_ = 0;  // begin_step calls (for the LRU order)
    bool profiling_ = false;
    std::vector<std::pair<std::string, gpuEvent_t>> events_;
};

}  // namespace loom::gpu
