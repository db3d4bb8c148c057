// The request fields both OpenAI endpoints share, validated in one place: the JSON body
// itself, `model`, `n`, `best_of`, the sampling fields (sampling_params.hpp), `stream`,
// `stream_options`, `stop`, `return_tokens_as_token_ids` and the range of max_tokens.
// Each endpoint's own fields and its prompt are serving_completions' and serving_chat's.
//
// Source: the OpenAI API reference for /v1/completions and /v1/chat/completions
// (parameter types and ranges), plus vLLM's extensions.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "gateway/api_types.hpp"
#include "gateway/output_options.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// What validation needs to know about the served model.
struct ModelContext {
    std::string model_id;  ///< the id /v1/models lists; requests must name it
    const model::Tokenizer* tokenizer = nullptr;
    int64_t n_ctx = 0;  ///< engine context (prompt + completion tokens)
    /// Renders a chat into prompt text (chat template or fallback). Throws ApiError
    /// (e.g. a template's raise_exception becomes a 400 carrying its message).
    std::function<std::string(const rapidjson::Value& messages, const rapidjson::Value* tools,
                              bool add_generation_prompt, const rapidjson::Value* kwargs)>
        render_chat;
    /// True when the rendered chat text already starts with BOS when needed (a chat
    /// template prints bos_token itself); false: the tokenizer adds BOS.
    bool template_adds_bos = false;
    ChatFormat chat_format;     ///< tool-call and reasoning syntax of the chat output
    std::string chat_template;  ///< the GGUF's chat template ("" for none)
};

/// Parses a request body (parse_json_body(): strict JSON). Throws ApiError(400) when it
/// is not valid JSON (the message gives RapidJSON's reason and the byte offset), holds
/// a lone surrogate or a repeated key, nests too deeply, or is not a JSON object.
rapidjson::Document parse_json_object(std::string_view body);

/// Validates the fields of `body` that both endpoints share and returns them as a
/// request for `endpoint` without prompts: `model`, when given, must be ctx.model_id
/// (else 404, code model_not_found; left out, it is ctx.model_id); `n` in 1..128,
/// `best_of` equal to it; the sampling fields (parse_sampling_params()); `stream` and `stream_options.include_usage` (only with
/// stream); `stop`, a string or up to 4 non-empty strings; `return_tokens_as_token_ids`;
/// `max_completion_tokens`, else `max_tokens`, in 0..ctx.n_ctx (absent: left unset).
/// Throws ApiError(400) naming the first invalid field.
GenerationRequest parse_common_fields(const rapidjson::Value& body, Endpoint endpoint, const ModelContext& ctx);

}  // namespace loom::gateway
