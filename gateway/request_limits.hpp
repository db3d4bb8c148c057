// What one request may ask of the server, checked before any work is done: a 150-byte
// request (`n` 128, 2,046 tokens each, 20 top logprobs) would otherwise keep the engine busy
// for minutes and answer with 89 MB of JSON.
//
// Three bounds, each a loom-gateway flag (--max-n, --max-request-tokens,
// --max-response-bytes): the choices per prompt; the tokens a request asks for across its
// choices (each prompt once, as usage counts it, and every choice's max_tokens, a missing
// max_tokens counting as the rest of the context); and an estimate of the response's size
// from those tokens and the logprobs asked for each.
//
// Source: the OpenAI API reference (`n` at most 128, `top_logprobs` at most 20); vLLM's
// serving layer refuses requests past the context in the same place (before the engine).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gateway/api_types.hpp"

namespace loom::gateway {

/// The operator's bounds (loom-gateway --help).
struct RequestLimits {
    int max_n = 128;                        ///< choices (`n`) per prompt, 1..128
    int64_t max_request_tokens = 131072;    ///< prompt tokens + n x max_tokens, summed over prompts
    size_t max_response_bytes = 64u << 20;  ///< the estimate of estimated_response_bytes()
};

/// Bytes estimated per generated token without logprobs, and per logprob entry (the sampled
/// token's or an alternative's): typical sizes of their JSON, not worst cases.
inline constexpr size_t kTokenBytesEstimate = 16;
inline constexpr size_t kLogprobBytesEstimate = 24;

/// Tokens request `g` asks for: per prompt its tokens, plus n x its max_tokens (absent: the
/// context's `n_ctx` less the prompt).
int64_t requested_tokens(const GenerationRequest& g, int64_t n_ctx);

/// The response size `g` may reach, in bytes, estimated: every choice's max_tokens (and,
/// with echo or prompt_logprobs, its prompt) at kTokenBytesEstimate each, plus
/// kLogprobBytesEstimate per logprob entry (1 + top_logprobs per token when logprobs are
/// asked for).
size_t estimated_response_bytes(const GenerationRequest& g, int64_t n_ctx);

/// Throws ApiError(400, code "limit_exceeded") naming the member to lower when `g` has more
/// than l.max_n choices per prompt (param "n"), asks for more than l.max_request_tokens
/// tokens (param "max_tokens"; a request of one prompt and one choice that fits the context
/// is never refused for its tokens), or may answer with more than l.max_response_bytes
/// (param "top_logprobs", or "max_tokens" without logprobs). `n_ctx`: the engine's context.
void check_request_limits(const GenerationRequest& g, int64_t n_ctx, const RequestLimits& l);

}  // namespace loom::gateway
