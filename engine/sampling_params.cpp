// protocol::Gen -> engine::SamplingParams; see sampling_params.hpp.
#include "engine/sampling_params.hpp"

#include <algorithm>

namespace loom::engine {

SamplingParams sampling_params_from(const protocol::Gen& g) {
    SamplingParams p;
    p.temperature = g.temperature;
    p.top_k = g.top_k;
    p.top_p = g.top_p;
    p.min_p = g.min_p;
    p.presence_penalty = g.presence_penalty;
    p.frequency_penalty = g.frequency_penalty;
    p.repetition_penalty = g.repetition_penalty;
    p.logit_bias = g.logit_bias;
    p.allowed = g.allowed;
    std::sort(p.allowed.begin(), p.allowed.end());
    p.allowed.erase(std::unique(p.allowed.begin(), p.allowed.end()), p.allowed.end());
    p.n_logprobs = g.logprobs.value_or(-1);
    p.processed_logprobs = g.processed_logprobs;
    return p;
}

}  // namespace loom::engine
