// Prompt tokenization and the context-length check; see prompt_tokens.hpp.
#include "gateway/prompt_tokens.hpp"

namespace loom::gateway {

std::vector<int32_t> tokenize_prompt(const model::Tokenizer& tok, std::string_view text, bool add_bos,
                                     const std::string& param, const std::string& empty_message) {
    std::vector<int32_t> ids = tok.encode(text, add_bos, true);
    if (ids.empty()) throw ApiError(400, empty_message, param);
    return ids;
}

void check_context_length(const GenerationRequest& r, int64_t n_ctx, const std::string& prompt_param) {
    for (const auto& p : r.prompts) {
        const auto n = static_cast<int64_t>(p.size());
        if (n >= n_ctx && !(r.echo && r.max_tokens == 0 && n <= n_ctx))
            throw ApiError(400,
                           "This model's maximum context length is " + std::to_string(n_ctx) +
                               " tokens. However, your prompt has " + std::to_string(n) + " tokens.",
                           prompt_param, "context_length_exceeded");
        if (r.max_tokens && n + *r.max_tokens > n_ctx)
            throw ApiError(400,
                           "This model's maximum context length is " + std::to_string(n_ctx) +
                               " tokens. However, you requested " + std::to_string(n + *r.max_tokens) + " tokens (" +
                               std::to_string(n) + " in the prompt, " + std::to_string(*r.max_tokens) +
                               " for the completion).",
                           "max_tokens", "context_length_exceeded");
    }
}

}  // namespace loom::gateway
