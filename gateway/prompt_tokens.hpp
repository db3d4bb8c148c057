// The tokenization step both endpoints share: prompt text becomes token ids, and the
// token counts are checked against the engine's context.
//
// Source: the OpenAI API's context-length error ("This model's maximum context length
// is N tokens ...", code context_length_exceeded), as vLLM words it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/api_types.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// Token ids of prompt `text`: special tokens written in the text (e.g. "<s>") are
/// parsed as such; BOS is added first when `add_bos` (and the vocabulary has one).
/// Throws ApiError(400, param, empty_message) when the text yields no tokens.
std::vector<int32_t> tokenize_prompt(const model::Tokenizer& tok, std::string_view text, bool add_bos,
                                     const std::string& param, const std::string& empty_message);

/// Refuses, with ApiError(400, code context_length_exceeded), a request whose prompt
/// leaves no room in `n_ctx` tokens (param `prompt_param`), except a prompt of exactly
/// n_ctx tokens that is only scored (echo with max_tokens 0); or whose prompt plus
/// max_tokens exceeds n_ctx (param "max_tokens").
void check_context_length(const GenerationRequest& r, int64_t n_ctx, const std::string& prompt_param);

}  // namespace loom::gateway
