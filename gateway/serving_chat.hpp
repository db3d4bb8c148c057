// POST /v1/chat/completions: a validated body becomes a GenerationRequest. The chat-only
// fields (`messages`, `tools`, `chat_template_kwargs`, `add_generation_prompt`, boolean
// `logprobs` with `top_logprobs`) and the rendering of the chat into one prompt are this
// file's; the shared fields are request_parser's.
//
// Source: the OpenAI API reference, "Create chat completion" (messages and their roles,
// text content parts, logprobs/top_logprobs), and vLLM's chat extensions
// (chat_template_kwargs, add_generation_prompt).
#pragma once

#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "gateway/api_types.hpp"
#include "gateway/request_parser.hpp"

namespace loom::gateway {

/// Checks an OpenAI chat `messages` array: non-empty; each an object with a known
/// role (system, developer, user, assistant, tool) and string or text-part content
/// (an assistant message with tool_calls may have none). Throws ApiError(400) naming
/// the bad field, e.g. "messages[1].role".
void validate_messages(const rapidjson::Value& messages);

/// The prompt text of chat request `body`: its messages (validated; tool-call arguments
/// made objects, messages_for_template()), `tools` (an array) and `template_kwargs`
/// (chat_template_kwargs with reasoning_effort, from parse_output_request(); null or
/// Null for none) rendered by ctx.render_chat, with the generation prompt unless
/// `add_generation_prompt` is false. Throws ApiError(400) for invalid fields, and what
/// ctx.render_chat throws (a template's raise_exception).
std::string render_chat_prompt(const rapidjson::Value& body, const ModelContext& ctx,
                               const rapidjson::Value* template_kwargs = nullptr);

/// The GenerationRequest of a POST /v1/chat/completions `body` (JSON text): every member
/// known (check_known_params()), the shared fields (parse_common_fields()), tools and
/// the rest of the output's shape (parse_output_request()), `logprobs` (a boolean) and `top_logprobs` (0..20,
/// only with logprobs), max_tokens at least 1 when given (absent: until the context is
/// full), and the rendered chat tokenized (BOS added unless the chat template writes
/// it) and checked against ctx.n_ctx. Throws ApiError: 400 for invalid input or a
/// prompt too long for the context, 404 for an unknown model.
GenerationRequest build_chat_request(std::string_view body, const ModelContext& ctx);

}  // namespace loom::gateway
