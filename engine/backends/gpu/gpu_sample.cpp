// SlotSampler: a slot's SamplingParams become a SampleCfg and dense device rows (allowed ids,
// logit bias, penalty state) once, when the slot opens; each step then samples all its rows in
// one batched launch (k_sample.cu). Semantics: engine/sampler.hpp.
#include "engine/backends/gpu/gpu_sample.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

namespace loom::gpu {

SampleCfg build_sample_cfg(const engine::SamplingParams& p, int n_vocab) {
    SampleCfg c;
    c.n_vocab = n_vocab;
    c.has_allowed = p.allowed.empty() ? 0 : 1;
    c.n_cand = c.has_allowed ? static_cast<int32_t>(p.allowed.size()) : n_vocab;
    c.has_bias = p.logit_bias.empty() ? 0 : 1;
    c.penalties = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
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
    return c;
}

namespace {

template <class T>
T* device_array(size_t n) {
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, sizeof(T) * std::max<size_t>(n, 1)));
    return static_cast<T*>(p);
}

}  // namespace

SlotSampler::SlotSampler(int n_vocab, int max_slots, gpuStream_t s)
    : n_vocab_(n_vocab), max_slots_(max_slots), stream_(s), slots_(static_cast<size_t>(max_slots)) {
    const auto cells = static_cast<size_t>(n_vocab) * static_cast<size_t>(max_slots);
    cfgs_ = device_array<SampleCfg>(static_cast<size_t>(max_slots));
    allowed_ = device_array<int32_t>(cells);
    bias_ = device_array<float>(cells);
    pen_ = device_array<uint32_t>(cells);
    scratch_ = device_array<uint8_t>(sample_scratch_bytes(n_vocab, max_slots));
}

SlotSampler::~SlotSampler() {
    for (auto& s : slots_)
        if (s.multi) (void)gpuFree(s.multi);
    (void)gpuFree(cfgs_);
    (void)gpuFree(allowed_);
    (void)gpuFree(bias_);
    (void)gpuFree(pen_);
    (void)gpuFree(scratch_);
}

void SlotSampler::open(int slot, const engine::SamplingParams& p, std::span<const int32_t> prompt,
                       std::span<const int32_t> output) {
    if (slot < 0 || slot >= max_slots_)
        throw std::invalid_argument("slot " + std::to_string(slot) + " outside 0.." + std::to_string(max_slots_ - 1));
    if (slots_[static_cast<size_t>(slot)].open)
        throw std::invalid_argument("slot " + std::to_string(slot) + " is open");
    auto check = [&](int32_t id, const char* what) {
        if (id < 0 || id >= n_vocab_)
            throw std::invalid_argument(std::string(what) + " token id " + std::to_string(id) + " outside 0.." +
                                        std::to_string(n_vocab_ - 1));
    };
    for (int32_t id : p.allowed) check(id, "allowed");
    for (size_t i = 1; i < p.allowed.size(); ++i)
        if (p.allowed[i] <= p.allowed[i - 1]) throw std::invalid_argument("allowed ids are not sorted and unique");
    for (const auto& [id, b] : p.logit_bias) check(id, "logit_bias");
    for (int32_t id : prompt) check(id, "prompt");
    for (int32_t id : output) check(id, "output");

    Slot st;
    st.cfg = build_sample_cfg(p, n_vocab_);
    st.n_logprobs = p.n_logprobs;
    const auto off = static_cast<size_t>(slot) * static_cast<size_t>(n_vocab_);
    const size_t row = static_cast<size_t>(n_vocab_);
    if (st.cfg.has_allowed) {
        st.cfg.allowed = allowed_ + off;
        LOOM_GPU_CHECK(gpuMemcpyAsync(allowed_ + off, p.allowed.data(), sizeof(int32_t) * p.allowed.size(),
                                      gpuMemcpyHostToDevice, stream_));
    }
    std::vector<BiasEntry> multi;
    if (st.cfg.has_bias) {
        // Ids named once get their bias in the dense row; ids named more than once (or with a NaN
        // bias) are marked NaN there and keep all their entries, in order, in the multi list.
        std::map<int32_t, int> count;
        for (const auto& [id, b] : p.logit_bias) count[id] += std::isnan(b) ? 2 : 1;
        bias_row_.assign(row, 0.0f);
        for (const auto& [id, b] : p.logit_bias) {
            if (count[id] == 1) {
                bias_row_[static_cast<size_t>(id)] = b;
            } else {
                bias_row_[static_cast<size_t>(id)] = std::numeric_limits<float>::quiet_NaN();
                multi.push_back(BiasEntry{id, b});
            }
        }
        st.cfg.bias = bias_ + off;
        LOOM_GPU_CHECK(
            gpuMemcpyAsync(bias_ + off, bias_row_.data(), sizeof(float) * row, gpuMemcpyHostToDevice, stream_));
        if (!multi.empty()) {
            st.multi = device_array<BiasEntry>(multi.size());
            st.cfg.multi = st.multi;
            st.cfg.n_multi = static_cast<int32_t>(multi.size());
            LOOM_GPU_CHECK(gpuMemcpyAsync(st.multi, multi.data(), sizeof(BiasEntry) * multi.size(),
                                          gpuMemcpyHostToDevice, stream_));
        }
    }
    if (st.cfg.penalties) {
        pen_row_.assign(row, 0u);
        for (int32_t id : prompt) pen_row_[static_cast<size_t>(id)] |= kSeenBit;
        for (int32_t id : output) {
            uint32_t& w = pen_row_[static_cast<size_t>(id)];
            w = ((w & ~kSeenBit) + 1u) | kSeenBit;
        }
        st.cfg.pen = pen_ + off;
        LOOM_GPU_CHECK(
            gpuMemcpyAsync(pen_ + off, pen_row_.data(), sizeof(uint32_t) * row, gpuMemcpyHostToDevice, stream_));
    }
    LOOM_GPU_CHECK(gpuMemcpyAsync(cfgs_ + slot, &st.cfg, sizeof(SampleCfg), gpuMemcpyHostToDevice, stream_));
    // The host rows and st.cfg are sources of the copies: wait for them.
    const gpuError_t e = gpuStreamSynchronize(stream_);
    if (e != gpuSuccess) {
        if (st.multi) (void)gpuFree(st.multi);
        throw GpuError(std::string("open_slot: ") + gpuGetErrorString(e));
    }
    st.open = true;
    slots_[static_cast<size_t>(slot)] = st;
}

void SlotSampler::close(int slot) {
    if (!is_open(slot)) return;
    Slot& st = slots_[static_cast<size_t>(slot)];
    if (st.multi) {
        (void)gpuStreamSynchronize(stream_);  // no launch may still read it
        (void)gpuFree(st.multi);
    }
    st = Slot{};
}

void SlotSampler::sample(const float* logits, int64_t ld, const SampleRow* rows, int n, int nblk, SampleOut* out) {
    sample_rows(logits, ld, n_vocab_, cfgs_, rows, n, nblk, scratch_, out, stream_);
}

engine::SampleResult SlotSampler::result(int slot, const SampleOut& o) const {
    const Slot& st = slots_[static_cast<size_t>(slot)];
    engine::SampleResult r;
    r.token = o.token;
    if (st.n_logprobs >= 0) {
        r.logprob = o.logprob;
        const int k_lp = std::min(std::min(st.n_logprobs, kMaxTop), st.cfg.n_cand);
        for (int j = 0; j < o.n_top && j < k_lp; ++j) r.top.emplace_back(o.top_id[j], o.top_lp[j]);
    }
    return r;
}

}  // namespace loom::gpu
