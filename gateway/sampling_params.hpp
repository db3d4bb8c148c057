// The one conversion of a validated OpenAI request into the GEN line (protocol::Gen) of
// each of its choices.
//
// Source: docs/protocol.md ("GEN": the keys and their defaults) and the OpenAI API
// reference (`n`, `echo`, `logprobs`, `seed`).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gateway/api_types.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

/// The GEN request of choice `sample` (0..r.n-1) of prompt `prompt_index` of `r`:
/// r.sampling with prompt = r.prompts[prompt_index]; max_tokens = r.max_tokens, else
/// what `n_ctx` leaves after the prompt; logprobs = r.top_logprobs when r.logprobs;
/// prompt_logprobs = r.top_logprobs when r.echo and r.logprobs; a seed s becomes
/// s + sample, so each choice draws its own reproducible stream. The id is left empty
/// (EngineClient::submit assigns it). Requires prompt_index < r.prompts.size().
protocol::Gen gen_for_choice(const GenerationRequest& r, size_t prompt_index, int sample, int64_t n_ctx);

}  // namespace loom::gateway
