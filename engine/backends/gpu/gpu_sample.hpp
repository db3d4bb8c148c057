// DeviceSampler: engine/sampler.hpp's sampling and logprobs run on a device logits vector; only
// the token, its logprob and the top (token, logprob) pairs come back to the host.
#pragma once

#include <vector>

#include "engine/backends/gpu/kernels.hpp"
#include "engine/sampler.hpp"

namespace loom::gpu {

/// Fills `c` and the per-id logit changes `mods` (sorted by id, ids unique) for one draw, in the
/// reference's order: logit bias, repetition penalty over prompt and output, frequency and
/// presence penalties over the output (engine/sampler.cpp).
void build_sample_cfg(const engine::SamplingParams& p, const engine::TokenHistory& history, double u, int n_vocab,
                      SampleCfg& c, std::vector<SampleMod>& mods);

/// Owns the device scratch and pinned buffers of the sampler for one vocabulary size.
class DeviceSampler {
public:
    /// Allocates for n_vocab logits; throws GpuError when memory runs out.
    DeviceSampler(int n_vocab, gpuStream_t s);
    ~DeviceSampler();
    DeviceSampler(const DeviceSampler&) = delete;
    DeviceSampler& operator=(const DeviceSampler&) = delete;

    /// Samples from `logits` (device, n_vocab F32) and waits for the result. Throws
    /// std::runtime_error when the logits hold NaN, GpuError on a device failure.
    engine::SampleResult sample(const float* logits, const engine::SamplingParams& p,
                                const engine::TokenHistory& history, double u);

private:
    int n_vocab_;
    gpuStream_t stream_;
    void* scratch_ = nullptr;
    SampleOut* out_dev_ = nullptr;
    SampleOut* out_host_ = nullptr;
    SampleMod* mods_dev_ = nullptr;
    size_t mods_cap_ = 0;
    int32_t* allowed_dev_ = nullptr;
    void* upload_host_ = nullptr;
    size_t upload_cap_ = 0;
    std::vector<SampleMod> mods_;
};

}  // namespace loom::gpu
