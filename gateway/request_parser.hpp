// Parses and validates OpenAI request bodies into GenerationRequest.
//
// Source: the OpenAI API reference for /v1/completions and /v1/chat/completions
// (parameter types and ranges), plus vLLM's sampling extensions.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "gateway/api_types.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// What validation needs to know about the served model.
struct ModelContext {
    std::string model_id;                   ///< the id /v1/models lists; requests must name it
    const model::Tokenizer* tokenizer = nullptr;
    int64_t n_ctx = 0;                      ///< engine context (prompt + completion tokens)
    /// Renders a chat into prompt text (chat template or fallback). Throws ApiError
    /// (e.g. a template's raise_exception becomes a 400 carrying its message).
    std::function<std::string(const rapidjson::Value& messages, const rapidjson::Value* tools,
                              bool add_generation_prompt, const rapidjson::Value* kwargs)>
        render_chat;
    /// True when the rendered chat text already starts with BOS when needed (a chat
    /// template prints bos_token itself); false: the tokenizer adds BOS.
    bool template_adds_bos = false;
};

/// Checks an OpenAI chat `messages` array: non-empty; each an object with a known
/// role and string or text-part content. Throws ApiError(400) naming the bad field.
void validate_messages(const rapidjson::Value& messages);

/// Validates `body` (JSON) for `endpoint` and tokenizes its prompts. Throws ApiError
/// with status 400 (malformed JSON, wrong types, values out of range, prompt longer
/// than the context), 404 (unknown model).
GenerationRequest parse_generation_request(std::string_view body, Endpoint endpoint, const ModelContext& ctx);

}  // namespace loom::gateway
