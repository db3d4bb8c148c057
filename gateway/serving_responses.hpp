// POST /v1/responses (the OpenAI Responses API, stateless): a validated body becomes the
// chat request it stands for. `input` (a string, or message items whose content is a
// string or input_text/output_text parts) and `instructions` (a system message first)
// become `messages`; max_output_tokens, temperature, top_p, top_logprobs and
// include: ["message.output_text.logprobs"] map to their chat counterparts; the rest of
// the chat request is then built and checked as /v1/chat/completions does.
//
// Source: the OpenAI API reference, "Responses: create" (input, instructions,
// max_output_tokens, include, top_logprobs, previous_response_id, store), and vLLM's
// Responses serving, which also maps a response onto one chat generation.
#pragma once

#include <string_view>

#include "gateway/api_types.hpp"
#include "gateway/request_parser.hpp"

namespace loom::gateway {

/// The `include` value that asks for the output text's logprobs.
inline constexpr std::string_view kIncludeLogprobs = "message.output_text.logprobs";

/// The GenerationRequest (endpoint Responses) of a POST /v1/responses `body`. loom keeps
/// no state, so `previous_response_id`, `conversation`, `store: true` and `background:
/// true` are refused with 400; so are what a text model cannot do here: non-empty
/// `tools`, `reasoning`, a `text.format` other than text, `include` values other than
/// kIncludeLogprobs, input items that are not messages, and content parts other than
/// text. Throws ApiError: 400 (naming the Responses field), 404 for an unknown model.
GenerationRequest build_responses_request(std::string_view body, const ModelContext& ctx);

}  // namespace loom::gateway
