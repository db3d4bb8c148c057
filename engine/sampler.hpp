// Sampling and logprobs from one position's logits: the reference semantics that
// every backend must reproduce.
//
// Raw logprobs (the default) are the log-softmax of the raw logits over the candidate
// set, before bias, penalties, temperature or filters: the candidate set is the
// `allowed` ids when given (so the logprobs renormalise over exactly that set), else
// the whole vocabulary. The processed distribution, which is sampled from, applies in
// this order (as vLLM does): logit_bias; repetition penalty (over prompt and output,
// CTRL paper, Keskar et al. 2019: positive logits divided, negative multiplied);
// presence and frequency penalties (over output tokens, as the OpenAI API defines
// them); temperature; top-k; top-p (nucleus, Holtzman et al. 2020); min-p. With
// temperature 0 the token is the argmax of the processed logits (ties: lowest id),
// and processed logprobs use temperature 1.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom::engine {

using TokenLogprob = std::pair<int32_t, float>;

struct SamplingParams {
    float temperature = 1.0f;
    int32_t top_k = 0;   ///< 0: off
    float top_p = 1.0f;  ///< 1: off
    float min_p = 0.0f;  ///< 0: off
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;
    std::vector<std::pair<int32_t, float>> logit_bias;
    std::vector<int32_t> allowed;  ///< sorted, unique, each < n_vocab; empty: all ids
    int n_logprobs = -1;           ///< -1: no logprobs wanted; else K in 0..20
    bool processed_logprobs = false;
};

/// The tokens a request has seen, for the penalties.
struct TokenHistory {
    std::vector<int32_t> prompt;
    std::vector<int32_t> output;
    std::unordered_map<int32_t, int32_t> output_counts;
    void add_output(int32_t id) {
        output.push_back(id);
        ++output_counts[id];
    }
};

/// A sequence's penalty inputs kept up to date as tokens arrive (a backend's per-slot state):
/// the distinct ids of prompt and output (repetition penalty) and each output id's count
/// (presence and frequency penalties). add_output() is O(1), so a long sequence does not make
/// each sampling step slower; sampling with it gives exactly what sampling with the equivalent
/// TokenHistory gives.
class PenaltyState {
public:
    /// Starts over for a sequence of `prompt` that has output `output` so far. With
    /// `repetition` false the distinct ids are not tracked (no n_vocab-byte table), and sampling
    /// with a repetition penalty is refused.
    void reset(int32_t n_vocab, bool repetition, std::span<const int32_t> prompt, std::span<const int32_t> output);
    /// Counts `id` as the next output token.
    void add_output(int32_t id);
    bool tracks_repetition() const { return repetition_; }
    /// Distinct ids (< n_vocab) of prompt and output, in first-seen order.
    std::span<const int32_t> repeated() const { return repeated_; }
    const std::unordered_map<int32_t, int32_t>& output_counts() const { return counts_; }

private:
    void see(int32_t id);
    int32_t n_vocab_ = 0;
    bool repetition_ = false;
    std::vector<uint8_t> seen_;
    std::vector<int32_t> repeated_;
    std::unordered_map<int32_t, int32_t> counts_;
};

/// A sampled token with its logprob and the top-K (token, logprob) pairs, sorted by
/// logprob descending, ties by lower id. logprob may be -inf (processed mode only).
struct SampleResult {
    int32_t token = -1;
    float logprob = 0;
    std::vector<TokenLogprob> top;
};

/// Reusable buffers, so that sampling allocates nothing per token once warm.
struct SamplerScratch {
    std::vector<std::pair<float, int32_t>> cand;
    std::vector<float> work;
};

/// Samples one token from `logits` (n_vocab floats, F32, raw model output).
/// `u` is a uniform draw in [0, 1) from the request's seeded generator; the token is
/// the first, in ascending id order, whose cumulative kept probability exceeds
/// u * (total kept probability). Fills logprob/top when params.n_logprobs >= 0 (top
/// has min(K, candidate count) entries). Throws std::runtime_error when the logits
/// contain NaN (the engine turns that into an ERR line).
///
/// `mask` (a grammar's token mask: bit id % 32 of word id / 32 set = allowed; at least
/// ceil(n_vocab / 32) words, else std::invalid_argument; empty: no mask) removes candidates
/// after the raw logprobs are taken and before the processed logits: raw logprobs stay the
/// model's distribution over the candidate set (the vocabulary or `allowed`), the processed
/// ones and the sampled token are over the masked set. std::runtime_error when the mask
/// leaves no candidate.
SampleResult sample_logits(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                           double u, SamplerScratch& scratch, std::span<const uint32_t> mask = {});

/// sample_logits() with the penalties read from `state` (same result as with a TokenHistory of
/// the same prompt and output). Throws std::logic_error when params asks for a repetition
/// penalty that `state` does not track, std::runtime_error on NaN logits; `mask` as above.
SampleResult sample_logits(std::span<const float> logits, const SamplingParams& params, const PenaltyState& state,
                           double u, SamplerScratch& scratch, std::span<const uint32_t> mask = {});

/// Raw logprob of `token` and the top-k raw (token, logprob) pairs over the whole
/// vocabulary (prompt logprobs). Throws std::runtime_error on NaN logits.
SampleResult score_token(std::span<const float> logits, int32_t token, int k);

}  // namespace loom::engine
