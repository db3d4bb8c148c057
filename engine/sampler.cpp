// Reference sampler and logprobs; see sampler.hpp for the semantics.
#include "engine/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace loom::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Orders (value, id) pairs: larger value first, then lower id.
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// log(sum(exp(v))) over the candidates, computed around the maximum in double.
double log_sum_exp(const std::vector<std::pair<float, int32_t>>& cand) {
    float m = kNegInf;
    for (const auto& c : cand) m = std::max(m, c.first);
    if (m == kNegInf) return kNegInf;
    double s = 0;
    for (const auto& c : cand) s += std::exp(static_cast<double>(c.first) - m);
    return m + std::log(s);
}

// The k best candidates in order (k small: a bounded insertion pass).
std::vector<std::pair<float, int32_t>> best_k(const std::vector<std::pair<float, int32_t>>& cand, size_t k) {
    std::vector<std::pair<float, int32_t>> top;
    if (k == 0) return top;
    top.reserve(k + 1);
    for (const auto& c : cand) {
        if (top.size() == k && !better(c, top.back())) continue;
        auto it = std::upper_bound(top.begin(), top.end(), c, better);
        top.insert(it, c);
        if (top.size() > k) top.pop_back();
    }
    return top;
}

void check_finite(std::span<const float> logits) {
    for (float v : logits)
        if (std::isnan(v)) throw std::runtime_error("the model produced NaN logits");
}

}  // namespace

SampleResult score_token(std::span<const float> logits, int32_t token, int k) {
    check_finite(logits);
    std::vector<std::pair<float, int32_t>> cand(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) cand[i] = {logits[i], static_cast<int32_t>(i)};
    const double lz = log_sum_exp(cand);
    SampleResult r;
    r.token = token;
    r.logprob = static_cast<float>(logits[static_cast<size_t>(token)] - lz);
    for (const auto& [v, id] : best_k(cand, static_cast<size_t>(std::max(k, 0))))
        r.top.emplace_back(id, static_cast<float>(v - lz));
    return r;
}

namespace {

// sample_logits with the penalty inputs spelled out: `repeated` the distinct ids of prompt and
// output that are < n_vocab (read only when the repetition penalty is on), `output_counts`
// each output id's count.
SampleResult sample_core(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> repeated,
                         const std::unordered_map<int32_t, int32_t>& output_counts, double u, SamplerScratch& scratch,
                         std::span<const uint32_t> mask) {
    check_finite(logits);
    const auto n_vocab = static_cast<int32_t>(logits.size());

    // Candidate set with raw logits.
    auto& cand = scratch.cand;
    cand.clear();
    if (p.allowed.empty()) {
        cand.resize(logits.size());
        for (int32_t i = 0; i < n_vocab; ++i) cand[static_cast<size_t>(i)] = {logits[static_cast<size_t>(i)], i};
    } else {
        for (int32_t id : p.allowed) cand.emplace_back(logits[static_cast<size_t>(id)], id);
    }
    const bool want_lp = p.n_logprobs >= 0;
    const size_t k_lp = want_lp ? std::min(static_cast<size_t>(p.n_logprobs), cand.size()) : 0;

    SampleResult r;
    double raw_lz = 0;
    std::vector<std::pair<float, int32_t>> raw_top;
    if (want_lp && !p.processed_logprobs) {
        raw_lz = log_sum_exp(cand);
        raw_top = best_k(cand, k_lp);
    }
    // A grammar's mask narrows what is sampled (and the processed distribution), after the
    // raw logprobs: those stay the model's own.
    if (!mask.empty()) {
        if (mask.size() * 32 < logits.size()) throw std::invalid_argument("token mask shorter than the vocabulary");
        std::erase_if(cand, [&](const std::pair<float, int32_t>& c) {
            const auto id = static_cast<uint32_t>(c.second);
            return ((mask[id >> 5] >> (id & 31)) & 1u) == 0;
        });
        if (cand.empty()) throw std::runtime_error("the grammar allows none of the request's candidate tokens");
    }

    // Processed logits, in place: bias, penalties, temperature.
    const bool greedy = p.temperature <= 0.0f;
    const bool penalties = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (!p.logit_bias.empty() || penalties) {
        auto& w = scratch.work;  // dense processed logits, then copied back to cand
        w.assign(logits.begin(), logits.end());
        for (const auto& [id, b] : p.logit_bias)
            if (id >= 0 && id < n_vocab) w[static_cast<size_t>(id)] += b;
        if (p.repetition_penalty != 1.0f)
            for (int32_t id : repeated) {  // distinct ids: each penalised once
                float& v = w[static_cast<size_t>(id)];
                v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
            }
        for (const auto& [id, count] : output_counts)
            if (id >= 0 && id < n_vocab)
                w[static_cast<size_t>(id)] -=
                    p.frequency_penalty * static_cast<float>(count) + (count > 0 ? p.presence_penalty : 0.0f);
        for (auto& c : cand) c.first = w[static_cast<size_t>(c.second)];
    }
    if (!greedy && p.temperature != 1.0f)
        for (auto& c : cand) c.first /= p.temperature;

    // Kept set: a prefix of the candidates ordered best-first (top-k, top-p and min-p
    // are all monotone in the processed logit). Only ordered when a filter needs it.
    size_t n_keep = cand.size();
    const bool filter = (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand.size()) || p.top_p < 1.0f || p.min_p > 0.0f;
    std::vector<std::pair<float, int32_t>> ordered;
    if (filter) {
        ordered = cand;
        if (p.top_k > 0 && static_cast<size_t>(p.top_k) < ordered.size()) {
            std::partial_sort(ordered.begin(), ordered.begin() + p.top_k, ordered.end(), better);
            n_keep = static_cast<size_t>(p.top_k);
        } else {
            std::sort(ordered.begin(), ordered.end(), better);
        }
        const float m = ordered[0].first;
        double total = 0;
        for (size_t i = 0; i < n_keep; ++i) total += std::exp(static_cast<double>(ordered[i].first) - m);
        if (p.top_p < 1.0f) {
            double cum = 0;
            size_t i = 0;
            for (; i < n_keep; ++i) {
                cum += std::exp(static_cast<double>(ordered[i].first) - m) / total;
                if (cum >= p.top_p) break;
            }
            n_keep = std::min(n_keep, i + 1);
        }
        if (p.min_p > 0.0f) {
            const double cut = std::log(static_cast<double>(p.min_p));  // p_i / p_max >= min_p
            size_t i = 1;
            while (i < n_keep && static_cast<double>(ordered[i].first) - m >= cut) ++i;
            n_keep = i;
        }
    }

    // A candidate is kept when it is at least as good as the last kept one.
    auto kept = [&](const std::pair<float, int32_t>& c) {
        return !filter || n_keep == ordered.size() || !better(ordered[n_keep - 1], c);
    };
    // The largest kept value and the sum of exp(value - largest) over the kept candidates:
    // the softmax the sampler draws from, and its log-normaliser.
    auto kept_max_sum = [&] {
        float m = kNegInf;
        for (const auto& c : cand)
            if (kept(c)) m = std::max(m, c.first);
        double sum = 0;
        for (const auto& c : cand)
            if (kept(c)) sum += std::exp(static_cast<double>(c.first) - m);
        return std::pair<float, double>{m, sum};
    };

    if (greedy) {
        std::pair<float, int32_t> best{kNegInf, -1};
        for (const auto& c : cand)
            if (best.second < 0 || better(c, best)) best = c;
        r.token = best.second;
    } else {
        const auto [m, total] = kept_max_sum();
        const double target = u * total;
        double cum = 0;
        int32_t last = -1;
        for (const auto& c : cand) {
            if (!kept(c)) continue;
            last = c.second;
            cum += std::exp(static_cast<double>(c.first) - m);
            if (cum > target) break;
        }
        r.token = last;
    }

    if (want_lp) {
        if (!p.processed_logprobs) {
            r.logprob = static_cast<float>(logits[static_cast<size_t>(r.token)] - raw_lz);
            for (const auto& [v, id] : raw_top) r.top.emplace_back(id, static_cast<float>(v - raw_lz));
        } else {
            // Distribution actually sampled from (temperature 1 when greedy).
            const auto [m, sum] = kept_max_sum();
            const double lz = m + std::log(sum);
            auto lp_of = [&](const std::pair<float, int32_t>& c) {
                return kept(c) ? static_cast<float>(c.first - lz) : kNegInf;
            };
            for (const auto& c : cand)
                if (c.second == r.token) r.logprob = lp_of(c);
            for (const auto& c : best_k(cand, k_lp)) r.top.emplace_back(c.second, lp_of(c));
        }
    }
    return r;
}

}  // namespace

SampleResult sample_logits(std::span<const float> logits, const SamplingParams& p, const TokenHistory& history,
                           double u, SamplerScratch& scratch, std::span<const uint32_t> mask) {
    std::vector<int32_t> repeated;
    if (p.repetition_penalty != 1.0f) {
        std::vector<char> seen(logits.size(), 0);
        for (const auto* list : {&history.prompt, &history.output})
            for (int32_t id : *list)
                if (id >= 0 && static_cast<size_t>(id) < logits.size() && !seen[static_cast<size_t>(id)]) {
                    seen[static_cast<size_t>(id)] = 1;
                    repeated.push_back(id);
                }
    }
    return sample_core(logits, p, repeated, history.output_counts, u, scratch, mask);
}

void PenaltyState::reset(int32_t n_vocab, bool repetition, std::span<const int32_t> prompt,
                         std::span<const int32_t> output) {
    n_vocab_ = n_vocab;
    repetition_ = repetition;
    seen_.assign(repetition ? static_cast<size_t>(n_vocab) : 0, 0);
    repeated_.clear();
    counts_.clear();
    for (int32_t id : prompt) see(id);
    for (int32_t id : output) add_output(id);
}

void PenaltyState::see(int32_t id) {
    if (repetition_ && id >= 0 && id < n_vocab_ && !seen_[static_cast<size_t>(id)]) {
        seen_[static_cast<size_t>(id)] = 1;
        repeated_.push_back(id);
    }
}

void PenaltyState::add_output(int32_t id) {
    see(id);
    ++counts_[id];
}

SampleResult sample_logits(std::span<const float> logits, const SamplingParams& p, const PenaltyState& state, double u,
                           SamplerScratch& scratch, std::span<const uint32_t> mask) {
    if (p.repetition_penalty != 1.0f && !state.tracks_repetition())
        throw std::logic_error("PenaltyState made without repetition tracking");
    return sample_core(logits, p, state.repeated(), state.output_counts(), u, scratch, mask);
}

}  // namespace loom::engine
