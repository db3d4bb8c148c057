// The request -> GEN conversion; see sampling_params.hpp.
#include "gateway/sampling_params.hpp"

namespace loom::gateway {

protocol::Gen gen_for_choice(const GenerationRequest& r, size_t prompt_index, int sample, int64_t n_ctx) {
    protocol::Gen gen = r.sampling;
    gen.prompt = r.prompts[prompt_index];
    gen.max_tokens = r.max_tokens.value_or(n_ctx - static_cast<int64_t>(gen.prompt.size()));
    if (r.logprobs) gen.logprobs = r.top_logprobs;
    if (r.echo && r.logprobs) gen.prompt_logprobs = r.top_logprobs;
    if (gen.seed && sample > 0) gen.seed = *gen.seed + static_cast<uint64_t>(sample);
    return gen;
}

}  // namespace loom::gateway
