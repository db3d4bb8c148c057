// POST /v1/responses (the OpenAI Responses API, stateless): a validated body becomes the
// chat request it stands for. `input` (a string, or items: messages whose content is a
// string or input_text/output_text parts; function_call items, an earlier call, which
// join the assistant message before them as its tool_calls; function_call_output items,
// which become tool messages) and `instructions` (a system message first) become
// `messages`; `tools` (function tools: type, name, description, parameters, strict),
// `tool_choice` ({"type": "function", "name"} naming one) and `text.format`
// (json_object, json_schema with name, schema, description, strict) become chat's tools,
// tool_choice and response_format; max_output_tokens, temperature, top_p, top_logprobs
// and include: ["message.output_text.logprobs"] map to their chat counterparts; the rest
// of the chat request is then built and checked as /v1/chat/completions does.
//
// Source: the OpenAI API reference, "Responses: create" (input and its item types,
// instructions, tools, tool_choice, text.format, max_output_tokens, include,
// top_logprobs, previous_response_id, store), and vLLM's Responses serving, which also
// maps a response onto one chat generation.
#pragma once

#include <string_view>

#include "gateway/api_types.hpp"
#include "gateway/request_parser.hpp"

namespace loom::gateway {

/// The `include` value that asks for the output text's logprobs.
inline constexpr std::string_view kIncludeLogprobs = "message.output_text.logprobs";

/// The GenerationRequest (endpoint Responses) of a POST /v1/responses `body`. loom keeps
/// no state, so `previous_response_id`, `conversation`, `store: true` and `background:
/// true` are refused with 400; so are what a text model cannot do here: tools other than
/// function tools, `reasoning`, `include` values other than kIncludeLogprobs, input items
/// other than the three above, content parts other than text, and unknown keys in tools,
/// tool_choice and text. Throws ApiError: 400 (naming the Responses field), 404 for an
/// unknown model.
GenerationRequest build_responses_request(std::string_view body, const ModelContext& ctx);

}  // namespace loom::gateway
