// The per-request bounds; see request_limits.hpp.
#include "gateway/request_limits.hpp"

#include <algorithm>
#include <string>

namespace loom::gateway {
namespace {

int64_t max_tokens_of(const GenerationRequest& g, size_t prompt_len, int64_t n_ctx) {
    // check_context_length (prompt_tokens.hpp) has kept prompt + max_tokens within n_ctx.
    return g.max_tokens ? *g.max_tokens : std::max<int64_t>(0, n_ctx - static_cast<int64_t>(prompt_len));
}

// "104000 bytes", or from 10 MiB on "130 MiB" (rounded).
std::string size_text(size_t bytes) {
    if (bytes < (10u << 20)) return std::to_string(bytes) + " bytes";
    return std::to_string((bytes + (1u << 19)) >> 20) + " MiB";
}

}  // namespace

int64_t requested_tokens(const GenerationRequest& g, int64_t n_ctx) {
    int64_t total = 0;
    for (const auto& p : g.prompts)
        total += static_cast<int64_t>(p.size()) + static_cast<int64_t>(g.n) * max_tokens_of(g, p.size(), n_ctx);
    return total;
}

size_t estimated_response_bytes(const GenerationRequest& g, int64_t n_ctx) {
    const bool prompt_entries = (g.echo && g.logprobs) || g.prompt_logprobs.has_value();
    int64_t tokens = 0;
    for (const auto& p : g.prompts)
        tokens += static_cast<int64_t>(g.n) *
                  (max_tokens_of(g, p.size(), n_ctx) + (prompt_entries ? static_cast<int64_t>(p.size()) : 0));
    size_t per_token = kTokenBytesEstimate;
    if (g.logprobs) per_token += kLogprobBytesEstimate * (1 + static_cast<size_t>(std::max(g.top_logprobs, 0)));
    if (g.prompt_logprobs)
        per_token += kLogprobBytesEstimate * (1 + static_cast<size_t>(std::max(*g.prompt_logprobs, 0)));
    return static_cast<size_t>(tokens) * per_token;
}

void check_request_limits(const GenerationRequest& g, int64_t n_ctx, const RequestLimits& l) {
    if (g.n > l.max_n)
        throw ApiError(400,
                       "'n' is " + std::to_string(g.n) + "; this server allows at most " + std::to_string(l.max_n) +
                           " choices per prompt (--max-n)",
                       "n", "limit_exceeded");
    const int64_t tokens = requested_tokens(g, n_ctx);
    const bool single = g.prompts.size() == 1 && g.n == 1;  // fits the context: checked elsewhere
    if (!single && tokens > l.max_request_tokens)
        throw ApiError(400,
                       "this request asks for up to " + std::to_string(tokens) +
                           " tokens (its prompts, and n x max_tokens per prompt, a missing max_tokens counting as "
                           "the rest of the context); this server allows " +
                           std::to_string(l.max_request_tokens) +
                           " per request (--max-request-tokens): lower n or max_tokens",
                       "max_tokens", "limit_exceeded");
    const size_t bytes = estimated_response_bytes(g, n_ctx);
    if (bytes > l.max_response_bytes) {
        const bool lp = g.logprobs || g.prompt_logprobs.has_value();
        throw ApiError(400,
                       "the response to this request could reach about " + size_text(bytes) +
                           (lp ? " (n x max_tokens tokens, each with its logprob and top_logprobs alternatives)"
                               : " (n x max_tokens tokens)") +
                           "; this server sends at most " + size_text(l.max_response_bytes) +
                           " (--max-response-bytes): lower n, max_tokens" + (lp ? " or top_logprobs" : ""),
                       lp ? "top_logprobs" : "max_tokens", "limit_exceeded");
    }
}

}  // namespace loom::gateway
