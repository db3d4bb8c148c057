// POST /v1/completions: a validated body becomes a GenerationRequest. The completions-
// only fields (integer `logprobs`, `echo`, `suffix`, the default max_tokens) and the four
// forms of `prompt` are this file's; the shared fields are request_parser's.
//
// Source: the OpenAI API reference, "Create completion" (prompt: "a string, array of
// strings, array of tokens, or array of token arrays"; logprobs: an integer, at most 5
// there, 20 here as in vLLM; max_tokens defaults to 16).
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <rapidjson/document.h>

#include "gateway/api_types.hpp"
#include "gateway/request_parser.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// One completions prompt before tokenization: text, or token ids as the client sent them.
using CompletionPrompt = std::variant<std::string, std::vector<int32_t>>;

/// Most prompts one completions request may carry.
inline constexpr size_t kMaxCompletionPrompts = 64;

/// The prompts of `body`'s `prompt` field: a string; an array of strings; an array of
/// token ids (one prompt); or an array of non-empty arrays of token ids. Token ids must
/// be in `tok`'s vocabulary. Throws ApiError(400, "prompt") when the field is missing,
/// of another form, empty, or holds more than kMaxCompletionPrompts prompts.
std::vector<CompletionPrompt> completion_prompts(const rapidjson::Value& body, const model::Tokenizer& tok);

/// Token ids of each prompt: text is tokenized with BOS added and special tokens parsed
/// (tokenize_prompt()); token ids are kept as they are. Throws ApiError(400, "prompt")
/// when a text tokenizes to nothing.
std::vector<std::vector<int32_t>> tokenize_completion_prompts(const std::vector<CompletionPrompt>& prompts,
                                                              const model::Tokenizer& tok);

/// The GenerationRequest of a POST /v1/completions `body` (JSON text): every member
/// known (check_known_params()), the shared fields (parse_common_fields()), a grammar
/// constraint (response_format, guided_*; parse_output_request()), `logprobs` (an integer 0..20; a boolean is refused), `echo`,
/// `suffix` (refused: not supported), max_tokens defaulting to 16, and the prompts
/// tokenized and checked against ctx.n_ctx. Throws ApiError: 400 for invalid input or a
/// prompt too long for the context, 404 for an unknown model.
GenerationRequest build_completion_request(std::string_view body, const ModelContext& ctx);

}  // namespace loom::gateway
