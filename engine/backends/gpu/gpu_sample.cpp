// DeviceSampler: turns SamplingParams and the token history into a SampleCfg and a list of
// per-id logit changes, runs the device sampler (k_sample.cu) and reads back only the token, its
// logprob and the top pairs. Semantics: engine/sampler.hpp.
#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "engine/backends/gpu/gpu_sample.hpp"

namespace loom::gpu {

void build_sample_cfg(const engine::SamplingParams& p, const engine::TokenHistory& history, double u, int n_vocab,
                      SampleCfg& c, std::vector<SampleMod>& out_mods) {
    c = SampleCfg{};
    c.n_vocab = n_vocab;
    c.has_allowed = p.allowed.empty() ? 0 : 1;
    c.n_cand = c.has_allowed ? static_cast<int32_t>(p.allowed.size()) : n_vocab;
    c.temperature = p.temperature;
    c.greedy = p.temperature <= 0.0f ? 1 : 0;
    c.top_k = p.top_k;
    c.top_p = p.top_p;
    c.min_p = p.min_p;
    const bool want_lp = p.n_logprobs >= 0;
    const int k_lp = want_lp ? std::min(std::min(p.n_logprobs, kMaxTop), c.n_cand) : 0;
    const bool filter = (p.top_k > 0 && p.top_k < c.n_cand) || p.top_p < 1.0f || p.min_p > 0.0f;
    c.processed_lp = want_lp && p.processed_logprobs ? 1 : 0;
    c.filter = filter && (!c.greedy || c.processed_lp) ? 1 : 0;
    c.k_raw = want_lp && !p.processed_logprobs ? k_lp : -1;
    c.k_proc = std::max(c.greedy ? 1 : 0, c.processed_lp ? k_lp : 0);
    c.rep_penalty = p.repetition_penalty;
    c.presence = p.presence_penalty;
    c.frequency = p.frequency_penalty;
    c.u = u;

    std::map<int32_t, SampleMod> mods;
    const bool penalties = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (!p.logit_bias.empty() || penalties) {
        auto mod = [&](int32_t id) -> SampleMod& {
            SampleMod& m = mods[id];
            m.id = id;
            return m;
        };
        for (const auto& [id, b] : p.logit_bias) {
            if (id < 0 || id >= n_vocab) continue;
            SampleMod& m = mod(id);
            if (m.nbias < 4) m.bias[m.nbias++] = b;
            else m.bias[3] += b;
        }
        if (p.repetition_penalty != 1.0f)
            for (const auto* list : {&history.prompt, &history.output})
                for (int32_t id : *list)
                    if (id >= 0 && id < n_vocab) mod(id).rep = 1;
        if (penalties)
            for (const auto& [id, count] : history.output_counts)
                if (id >= 0 && id < n_vocab) mod(id).count = count;
    }
    out_mods.clear();
    for (const auto& [id, m] : mods) out_mods.push_back(m);
    c.n_mods = static_cast<int32_t>(out_mods.size());
}

DeviceSampler::DeviceSampler(int n_vocab, gpuStream_t s) : n_vocab_(n_vocab), stream_(s) {
    LOOM_GPU_CHECK(gpuMalloc(&scratch_, sample_scratch_bytes(n_vocab)));
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, sizeof(SampleOut)));
    out_dev_ = static_cast<SampleOut*>(p);
    LOOM_GPU_CHECK(gpuMallocHost(&p, sizeof(SampleOut)));
    out_host_ = static_cast<SampleOut*>(p);
    LOOM_GPU_CHECK(gpuMalloc(&p, sizeof(int32_t) * static_cast<size_t>(n_vocab)));
    allowed_dev_ = static_cast<int32_t*>(p);
}

DeviceSampler::~DeviceSampler() {
    (void)gpuFree(scratch_);
    (void)gpuFree(out_dev_);
    (void)gpuFreeHost(out_host_);
    (void)gpuFree(allowed_dev_);
    if (mods_dev_) (void)gpuFree(mods_dev_);
    if (upload_host_) (void)gpuFreeHost(upload_host_);
}

engine::SampleResult DeviceSampler::sample(const float* logits, const engine::SamplingParams& p,
                                           const engine::TokenHistory& history, double u) {
    SampleCfg c;
    build_sample_cfg(p, history, u, n_vocab_, c, mods_);
    // Upload the variable parts (mods, allowed ids) through one pinned buffer.
    const size_t mod_bytes = sizeof(SampleMod) * mods_.size();
    const size_t allowed_bytes = sizeof(int32_t) * p.allowed.size();
    if (mod_bytes + allowed_bytes > upload_cap_) {
        if (upload_host_) (void)gpuFreeHost(upload_host_);
        upload_host_ = nullptr;
        upload_cap_ = std::max(mod_bytes + allowed_bytes, upload_cap_ * 2);
        LOOM_GPU_CHECK(gpuMallocHost(&upload_host_, upload_cap_));
    }
    if (mods_.size() > mods_cap_) {
        if (mods_dev_) (void)gpuFree(mods_dev_);
        mods_dev_ = nullptr;
        mods_cap_ = std::max(mods_.size(), mods_cap_ * 2);
        void* m = nullptr;
        LOOM_GPU_CHECK(gpuMalloc(&m, sizeof(SampleMod) * mods_cap_));
        mods_dev_ = static_cast<SampleMod*>(m);
    }
    auto* up = static_cast<uint8_t*>(upload_host_);
    if (mod_bytes) {
        std::memcpy(up, mods_.data(), mod_bytes);
        LOOM_GPU_CHECK(gpuMemcpyAsync(mods_dev_, up, mod_bytes, gpuMemcpyHostToDevice, stream_));
    }
    if (allowed_bytes) {
        std::memcpy(up + mod_bytes, p.allowed.data(), allowed_bytes);
        LOOM_GPU_CHECK(gpuMemcpyAsync(allowed_dev_, up + mod_bytes, allowed_bytes, gpuMemcpyHostToDevice, stream_));
    }
    loom::gpu::sample(logits, c, mods_dev_, allowed_dev_, scratch_, out_dev_, stream_);
    LOOM_GPU_CHECK(gpuMemcpyAsync(out_host_, out_dev_, sizeof(SampleOut), gpuMemcpyDeviceToHost, stream_));
    const gpuError_t e = gpuStreamSynchronize(stream_);
    if (e != gpuSuccess) throw GpuError(std::string("sampling: ") + gpuGetErrorString(e));
    const SampleOut& o = *out_host_;
    if (o.nan) throw std::runtime_error("the model produced NaN logits");
    engine::SampleResult r;
    r.token = o.token;
    if (p.n_logprobs >= 0) {
        r.logprob = o.logprob;
        const int k_lp = std::min(std::min(p.n_logprobs, kMaxTop), c.n_cand);
        for (int j = 0; j < o.n_top && j < k_lp; ++j) r.top.emplace_back(o.top_id[j], o.top_lp[j]);
    }
    return r;
}

}  // namespace loom::gpu
