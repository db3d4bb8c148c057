// The per-request bounds (gateway/request_limits.hpp): tokens across choices, the response
// size estimate, and the 400 each limit gives, with the figures worked out by hand.
#include <catch2/catch.hpp>

#include "gateway/request_limits.hpp"

using namespace loom::gateway;

namespace {

GenerationRequest request(std::vector<size_t> prompt_lengths, int n, std::optional<int64_t> max_tokens) {
    GenerationRequest g;
    for (size_t len : prompt_lengths) g.prompts.emplace_back(len, 1);
    g.n = n;
    g.max_tokens = max_tokens;
    return g;
}

std::string refusal(const GenerationRequest& g, const RequestLimits& l, std::string* param = nullptr) {
    try {
        check_request_limits(g, 2048, l);
    } catch (const ApiError& e) {
        CHECK(e.status == 400);
        CHECK(e.code == "limit_exceeded");
        if (param) *param = e.param;
        return e.message;
    }
    return "";
}

}  // namespace

TEST_CASE("tokens across choices: each prompt once, n x max_tokens, the rest of the context when absent") {
    CHECK(requested_tokens(request({5}, 1, 10), 2048) == 15);
    CHECK(requested_tokens(request({5, 7}, 3, 10), 2048) == 5 + 30 + 7 + 30);
    CHECK(requested_tokens(request({48}, 2, std::nullopt), 2048) == 48 + 2 * 2000);
    // The request: n 128, 2,046 tokens each, one 2-token prompt.
    CHECK(requested_tokens(request({2}, 128, 2046), 2048) == 2 + 128 * 2046);
}

TEST_CASE("the response estimate counts 16 bytes a token and 24 a logprob entry") {
    GenerationRequest g = request({2}, 128, 2046);
    CHECK(estimated_response_bytes(g, 2048) == 128u * 2046u * 16u);
    g.logprobs = true;
    g.top_logprobs = 20;
    CHECK(estimated_response_bytes(g, 2048) == 128u * 2046u * (16u + 21u * 24u));  // about 130 MiB
    g.echo = true;  // echo with logprobs: the prompt's entries too
    CHECK(estimated_response_bytes(g, 2048) == 128u * 2048u * (16u + 21u * 24u));
}

TEST_CASE("each limit refuses with 400 naming what to lower") {
    RequestLimits l;
    std::string param;
    CHECK(refusal(request({2}, 128, 2046), l, &param) ==
          "this request asks for up to 261890 tokens (its prompts, and n x max_tokens per prompt, a missing "
          "max_tokens counting as the rest of the context); this server allows 131072 per request "
          "(--max-request-tokens): lower n or max_tokens");
    CHECK(param == "max_tokens");
    CHECK(refusal(request({2}, 64, 2046), l).empty());  // 130,946 tokens, 2 MiB of text
    l.max_n = 8;
    CHECK(refusal(request({2}, 9, 1), l, &param) ==
          "'n' is 9; this server allows at most 8 choices per prompt (--max-n)");
    CHECK(param == "n");
    // One prompt with one choice is bounded by the context alone.
    l.max_request_tokens = 100;
    CHECK(refusal(request({2}, 1, std::nullopt), l).empty());
    CHECK(!refusal(request({2}, 2, 50), l).empty());  // 2 + 2 x 50
    l = RequestLimits{};
    l.max_response_bytes = 100000;
    GenerationRequest g = request({2}, 2, 100);
    g.logprobs = true;
    g.top_logprobs = 20;  // 200 tokens x (16 + 21 x 24) bytes = 104,000
    CHECK(refusal(g, l, &param) ==
          "the response to this request could reach about 104000 bytes (n x max_tokens tokens, each with its logprob "
          "and top_logprobs alternatives); this server sends at most 100000 bytes (--max-response-bytes): lower n, "
          "max_tokens or top_logprobs");
    CHECK(param == "top_logprobs");
    g.top_logprobs = 19;  // 200 x 496 = 99,200
    CHECK(refusal(g, l).empty());
}
