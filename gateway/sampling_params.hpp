// The sampling fields both OpenAI endpoints share, validated in one place, and the one
// conversion of a validated request into the GEN line (protocol::Gen) of each choice.
//
// Source: the OpenAI API reference (temperature, top_p, seed, presence_penalty,
// frequency_penalty, logit_bias, n) and vLLM's SamplingParams extensions (top_k, min_p,
// repetition_penalty, allowed_token_ids, logprobs_mode, ignore_eos); docs/protocol.md
// ("GEN") for the keys they become.
#pragma once

#include <cstddef>
#include <cstdint>

#include <rapidjson/document.h>

#include "gateway/api_types.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

/// Validates the sampling fields of request `body` (a JSON object) and returns them as
/// a GEN's sampling keys: temperature in [0, 2] (default 1); top_p in (0, 1] (1);
/// top_k >= -1, where -1 and 0 mean off; min_p in [0, 1] (0); seed, any 64-bit integer
/// (negative ones wrap to uint64); presence_penalty and frequency_penalty in [-2, 2]
/// (0); repetition_penalty in [1e-3, 100] (1); logit_bias, an object of token ids of
/// `tok` to biases in [-100, 100], kept in body order; allowed_token_ids, a non-empty
/// array of token ids, as given; logprobs_mode "raw" or "processed" (vLLM's
/// "raw_logprobs", "processed_logprobs" too); ignore_eos, a boolean.
/// id, prompt, max_tokens, logprobs and prompt_logprobs are left unset (see
/// gen_for_choice()). Throws ApiError(400) naming the first invalid field.
protocol::Gen parse_sampling_params(const rapidjson::Value& body, const model::Tokenizer& tok);

/// The GEN request of choice `sample` (0..r.n-1) of prompt `prompt_index` of `r`:
/// r.sampling with prompt = r.prompts[prompt_index]; max_tokens = r.max_tokens, else
/// what `n_ctx` leaves after the prompt; logprobs = r.top_logprobs when r.logprobs;
/// prompt_logprobs = r.top_logprobs when r.echo and r.logprobs; a seed s becomes
/// s + sample, so each choice draws its own reproducible stream. The id is left empty
/// (EngineClient::submit assigns it). Requires prompt_index < r.prompts.size().
protocol::Gen gen_for_choice(const GenerationRequest& r, size_t prompt_index, int sample, int64_t n_ctx);

}  // namespace loom::gateway
