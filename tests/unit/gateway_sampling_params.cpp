// gen_for_choice: a validated request becomes the exact GEN line of each choice
// (prompt, max_tokens, logprobs, prompt_logprobs, per-choice seed, every sampling key).
#include <catch2/catch.hpp>

#include "gateway/sampling_params.hpp"

using namespace loom;
using namespace loom::gateway;

namespace {

// Two stories260K prompts ("Once upon a time", "The little dog"; ../shared/reference),
// two choices each, every sampling key set.
GenerationRequest request() {
    GenerationRequest r;
    r.prompts = {{1, 403, 407, 261, 378}, {1, 291, 376, 400, 428}};
    r.n = 2;
    auto& s = r.sampling;
    s.temperature = 0.5f;
    s.top_k = 40;
    s.top_p = 0.9f;
    s.min_p = 0.05f;
    s.seed = 42;
    s.allowed = {428, 261};
    s.presence_penalty = 0.5f;
    s.frequency_penalty = -0.25f;
    s.repetition_penalty = 1.25f;
    s.logit_bias = {{261, -1.5f}};
    s.processed_logprobs = true;
    s.ignore_eos = true;
    return r;
}

std::string line(protocol::Gen g) {
    g.id = "c1";
    return protocol::format(protocol::GatewayLine{std::move(g)});
}

}  // namespace

TEST_CASE("each choice gets its prompt, a context-filling max_tokens and its own seed") {
    const GenerationRequest r = request();
    CHECK(line(gen_for_choice(r, 0, 0, 32)) ==
          "GEN c1 prompt=1,403,407,261,378 max_tokens=27 temperature=0.5 top_k=40 top_p=0.9 min_p=0.05 seed=42 "
          "allowed=428,261 presence_penalty=0.5 frequency_penalty=-0.25 repetition_penalty=1.25 logit_bias=261:-1.5 "
          "logprobs_mode=processed ignore_eos=1");
    CHECK(line(gen_for_choice(r, 1, 1, 32)) ==
          "GEN c1 prompt=1,291,376,400,428 max_tokens=27 temperature=0.5 top_k=40 top_p=0.9 min_p=0.05 seed=43 "
          "allowed=428,261 presence_penalty=0.5 frequency_penalty=-0.25 repetition_penalty=1.25 logit_bias=261:-1.5 "
          "logprobs_mode=processed ignore_eos=1");
    CHECK(gen_for_choice(r, 0, 0, 32).id.empty());  // EngineClient::submit assigns it
}

TEST_CASE("logprobs, echo and max_tokens become logprobs=, prompt_logprobs= and max_tokens=") {
    GenerationRequest r;
    r.prompts = {{1, 403, 407, 261, 378}};
    r.max_tokens = 3;
    CHECK(line(gen_for_choice(r, 0, 0, 32)) == "GEN c1 prompt=1,403,407,261,378 max_tokens=3 temperature=1");
    r.logprobs = true;
    r.top_logprobs = 4;
    CHECK(line(gen_for_choice(r, 0, 0, 32)) ==
          "GEN c1 prompt=1,403,407,261,378 max_tokens=3 temperature=1 logprobs=4");
    r.echo = true;
    r.max_tokens = 0;
    CHECK(line(gen_for_choice(r, 0, 0, 32)) ==
          "GEN c1 prompt=1,403,407,261,378 max_tokens=0 temperature=1 logprobs=4 prompt_logprobs=4");
    r.logprobs = false;  // echo without logprobs: the prompt is echoed without PLP lines
    CHECK(line(gen_for_choice(r, 0, 0, 32)) == "GEN c1 prompt=1,403,407,261,378 max_tokens=0 temperature=1");
}

TEST_CASE("a request without a seed stays unseeded for every choice") {
    GenerationRequest r;
    r.prompts = {{1}};
    r.n = 4;
    CHECK_FALSE(gen_for_choice(r, 0, 3, 8).seed);
}
