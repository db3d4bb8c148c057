// The GPU backend (CUDA, HIP, or the CPU emulator): the llama-family forward pass of
// engine/backends/cpu/cpu_backend.cpp on device weights and a device KV cache, with sampling
// and logprobs on the device (only the sampled id and its top pairs reach the host).
//
// Decode steps of up to 8 sequences use the register-dequantizing matvec kernels and replay a
// captured CUDA/HIP graph per (batch size, attention split count); per-sequence state (token,
// position, cache pointer) lives in device memory so one graph serves every step. Prefill uses
// GEMMs (cuBLAS, or loom's own kernel) over weights dequantized to F16 per layer, and the tiled
// causal attention kernel.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.hpp"
#include "engine/llama_weights.hpp"
#include "engine/backends/gpu/device_model.hpp"
#include "engine/backends/gpu/gemm.hpp"
#include "engine/backends/gpu/gpu_sample.hpp"
#include "engine/backends/gpu/kernels.hpp"
#include "model/gguf/gguf.hpp"

namespace loom::gpu {

struct GpuOptions {
    int32_t n_ctx = 0;              ///< 0: the model's training context
    std::string engine_name = "loom-engine-cuda";
    int max_batch = 64;             ///< most sequences in one decode_batch call
    int prefill_chunk = 2048;       ///< tokens per prefill forward pass
    bool graphs = true;             ///< replay decode steps as graphs (CUDA/HIP)
    bool kv_f16 = false;            ///< F16 KV cache (half the memory; default F32, which tracks the CPU engine)
};

/// A sequence's device state: its KV cache and its last logits.
class GpuSequence final : public engine::Sequence {
public:
    /// Allocates the KV cache (kv_bytes) and an n_vocab F32 logits vector on the device; throws
    /// std::bad_alloc when device memory runs out.
    GpuSequence(int64_t capacity, size_t kv_bytes, int n_vocab);
    ~GpuSequence() override;
    void advance(int64_t n) { n_past_ += n; }
    int64_t capacity;
    void* kv = nullptr;
    float* logits = nullptr;
    bool has_logits = false;
};

/// Per-operation device time of one profiled decode step (bench tool).
struct OpTimes {
    std::vector<std::pair<std::string, float>> ms;  ///< op name, milliseconds summed over layers
};

class GpuBackend final : public engine::Backend {
public:
    /// Loads the GGUF at `path` and uploads its weights. Throws model::GgufError (malformed),
    /// model::ModelError (unsupported architecture, shape or tensor type) or GpuError.
    GpuBackend(const std::string& path, const GpuOptions& opts);
    ~GpuBackend() override;

    const engine::ModelInfo& info() const override { return info_; }
    std::unique_ptr<engine::Sequence> new_sequence(int64_t capacity) override;
    void eval(engine::Sequence& seq, std::span<const int32_t> tokens,
              std::vector<engine::SampleResult>* prompt_scores = nullptr, int prompt_k = 0) override;
    void decode_batch(std::span<engine::Sequence* const> seqs, std::span<const int32_t> tokens) override;
    engine::SampleResult sample(engine::Sequence& seq, const engine::SamplingParams& params,
                                const engine::TokenHistory& history, double u) override;

    /// Device bytes of the weights.
    size_t weight_bytes() const { return dm_->bytes; }
    /// Runs one decode step for `seqs` eagerly with an event after each operation and returns
    /// the time per operation (advances the sequences like decode_batch).
    OpTimes profile_decode(std::span<engine::Sequence* const> seqs, std::span<const int32_t> tokens);
    /// Runs eval(seq, tokens) (a prefill) the same way and returns the time per operation.
    OpTimes profile_prefill(engine::Sequence& seq, std::span<const int32_t> tokens);
    /// The stream every kernel runs on.
    gpuStream_t stream() const { return stream_; }

private:
    void* alloc(size_t bytes);
    void forward(int rows, bool decode);
    void linear(const DevMatrix* const* mats, float* const* ys, int nmat, int rows, const float* x32, int64_t ldx,
                const uint16_t* x16, int64_t ldx16, int64_t ldy, bool add, const float* norm_w = nullptr,
                const int8_t* roles = nullptr, int layer = 0);
    bool rope_fusable(const DevLayer& L) const;
    void ffn(const DevLayer& L, int rows, bool fuse);
    void output_rows(int rows, float* logits, int64_t ld);
    void run_decode(int nb, int splits);
    void ensure_part(int splits, int nb);
    void prefill_attention(int rows, int layer);
    void upload_slots(int n);
    void sync(const char* what);
    void tick(const char* name);
    OpTimes profile(const std::function<void()>& work);

    model::GgufFile file_;
    engine::LlamaWeights w_;
    std::unique_ptr<DeviceModel> dm_;
    engine::ModelInfo info_;
    GpuOptions opts_;
    AttnShape sh_;
    gpuStream_t stream_ = nullptr;
    std::unique_ptr<Gemm> gemm_;
    bool f16_in_ = false;
    bool fuse_norm_ = false;  // RMSNorm fused into single-row matvecs (plain weight types)
    // mv1_: the single-vector decode kernel (kernels.hpp MatvecArgs::single), opt-in with
    // LOOM_GPU_MV1=1; mvp_: the pipelined single-vector kernel (MatvecArgs::pipelined, k_mvp.cu),
    // opt-in with LOOM_GPU_MVP=1. Both were slower than the batched kernel in the 2026-11-30 H200
    // runs (docs/benchmarks.md). fuse_norm_mvp_: every matrix that takes a normalised input is
    // plain or pipelined, so RMSNorm is fused into them when mvp_ is on.
    // pdl_ (CUDA, with mv1_): programmatic dependent launches (LOOM_GPU_PDL=0 turns them off);
    // fuse_rope_: RoPE and the KV store in the QKV matvec's epilogue
    // (LOOM_GPU_FUSE_ROPE=0 turns it off).
    bool mv1_ = false;
    bool mvp_ = false;
    bool fuse_norm_mvp_ = false;
    bool pdl_ = false;
    bool fuse_rope_ = true;
    bool q4_magic_ = false;  // LOOM_GPU_Q4_MAGIC=1: the previous Q4_K dot product (A/B runs)
    int64_t d_ = 0, nq_ = 0, nkv_ = 0, ff_ = 0, V_ = 0;
    int64_t ld_d_ = 0, ld_qkv_ = 0, ld_att_ = 0, ld_ff2_ = 0, ld_ff_ = 0, ld_v_ = 0;
    int rmax_ = 0;
    int cur_splits_ = 1;
    std::vector<void*> allocs_;
    float *x_ = nullptr, *xn_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *ffy_ = nullptr, *g_ = nullptr;
    uint16_t *xh_ = nullptr, *atth_ = nullptr, *gh_ = nullptr, *wscratch_ = nullptr;
    size_t wscratch_elems_ = 0;
    float* logits_b_ = nullptr;
    float* rope_cs_ = nullptr;
    float* part_ = nullptr;
    float* attn_s_ = nullptr;  // prefill attention scores (cuBLAS path)
    size_t attn_s_elems_ = 0;
    bool no_gemm_attn_ = false;  // LOOM_GPU_FMA_ATTENTION=1: the tiled FMA kernel instead
    size_t part_elems_ = 0;
    SlotDesc* slots_dev_ = nullptr;
    SlotDesc* slots_host_ = nullptr;
    int32_t* tokens_dev_ = nullptr;
    int32_t* tokens_host_ = nullptr;
    // sampling and prompt scoring
    std::unique_ptr<DeviceSampler> sampler_;
    SampleOut* sout_dev_ = nullptr;
    SampleOut* sout_host_ = nullptr;
    // graphs keyed by (batch size, attention splits)
    std::map<std::pair<int, int>, std::pair<gpuGraph_t, gpuGraphExec_t>> graphs_;
    // profiling
    bool profiling_ = false;
    std::vector<std::pair<std::string, gpuEvent_t>> events_;
};

/// Loads `path` for the GPU backend (see GpuBackend's constructor for errors).
std::unique_ptr<engine::Backend> make_gpu_backend(const std::string& path, const GpuOptions& opts);

}  // namespace loom::gpu
