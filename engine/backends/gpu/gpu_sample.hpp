// SlotSampler: per-slot sampling state on the device (configuration, allowed ids, logit bias,
// penalty counts) and the batched sampling of a step's rows with engine/sampler.hpp's semantics;
// only the token, its logprob and the top (token, logprob) pairs come back to the host.
#pragma once

#include <span>
#include <vector>

#include "engine/backends/gpu/kernels.hpp"
#include "engine/sampler.hpp"

namespace loom::gpu {

/// The SampleCfg of `p` for a vocabulary of n_vocab, without its device pointers (host function):
/// which filters run, how many raw and processed top pairs, whether bias and penalty state apply.
SampleCfg build_sample_cfg(const engine::SamplingParams& p, int n_vocab);

/// Owns the sampling state of max_slots slots on the device: for each, its SampleCfg, allowed
/// ids [n_vocab], bias row [n_vocab] and penalty state [n_vocab] (kernels.hpp), allocated once.
class SlotSampler {
public:
    /// Allocates the state of max_slots slots and the scratch of max_slots rows; throws GpuError
    /// when device memory runs out.
    SlotSampler(int n_vocab, int max_slots, gpuStream_t s);
    ~SlotSampler();
    SlotSampler(const SlotSampler&) = delete;
    SlotSampler& operator=(const SlotSampler&) = delete;

    /// Opens `slot` for a request with `p` (allowed sorted and unique) whose prompt is `prompt`
    /// and that already output `output` (the penalty counts start from them). Waits until the
    /// state is on the device. Throws std::invalid_argument for a slot out of range or open, or
    /// an id outside 0..n_vocab-1 in allowed, logit_bias, prompt or output.
    void open(int slot, const engine::SamplingParams& p, std::span<const int32_t> prompt,
              std::span<const int32_t> output);
    /// Closes `slot` (no-op when it is not open).
    void close(int slot);
    bool is_open(int slot) const { return slot >= 0 && slot < max_slots_ && slots_[slot].open; }
    /// Stage-1 blocks for a row of `slot` (its candidate count).
    int blocks(int slot) const { return sample_blocks(slots_[slot].cfg.n_cand); }

    /// Enqueues the sampling of n rows (device SampleRow array, distinct open slots) from
    /// `logits` (leading dimension ld) into out[0..n) (device), nblk = the largest blocks() of
    /// the rows; the slots' penalty state counts the sampled tokens. No host sync.
    void sample(const float* logits, int64_t ld, const SampleRow* rows, int n, int nblk, SampleOut* out);

    /// The SampleResult of slot `slot` from its row's SampleOut (read back to the host): the
    /// logprob and min(K, candidates) top pairs when the slot wants logprobs.
    engine::SampleResult result(int slot, const SampleOut& o) const;

private:
    struct Slot {
        bool open = false;
        SampleCfg cfg;
        int n_logprobs = -1;
        BiasEntry* multi = nullptr;  // device list of the entries of ids named more than once
    };
    int n_vocab_, max_slots_;
    gpuStream_t stream_;
    std::vector<Slot> slots_;
    SampleCfg* cfgs_ = nullptr;    // [max_slots]
    int32_t* allowed_ = nullptr;   // [max_slots][n_vocab]
    float* bias_ = nullptr;        // [max_slots][n_vocab]
    uint32_t* pen_ = nullptr;      // [max_slots][n_vocab]
    void* scratch_ = nullptr;      // sample_scratch_bytes(n_vocab, max_slots)
    std::vector<float> bias_row_;  // host staging of one slot's rows
    std::vector<uint32_t> pen_row_;
};

}  // namespace loom::gpu
