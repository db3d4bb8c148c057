// parse_sampling_params and gen_for_choice: the body's sampling fields become the exact
// GEN line of each choice (prompt, max_tokens, logprobs, prompt_logprobs, per-choice
// seed, every sampling key), and reach the engine's SamplingParams unchanged.
#include <catch2/catch.hpp>

#include "engine/sampling_params.hpp"
#include "gateway/sampling_params.hpp"
#include "gateway/serving_completions.hpp"
#include "gateway_vocab.hpp"

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
    CHECK(line(gen_for_choice(r, 0, 0, 32)) == "GEN c1 prompt=1,403,407,261,378 max_tokens=3 temperature=1 logprobs=4");
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

TEST_CASE("parse_sampling_params: absent fields are GEN's defaults") {
    const auto tok = test::test_tokenizer();
    rapidjson::Document d;
    d.Parse("{}");
    protocol::Gen g = parse_sampling_params(d, *tok);
    CHECK_FALSE(g.max_tokens);
    CHECK_FALSE(g.logprobs);
    g.prompt = {1};
    CHECK(line(g) == "GEN c1 prompt=1 temperature=1");  // every other key at its default
}

TEST_CASE("a body's sampling fields reach the engine's SamplingParams") {
    const auto tok = test::test_tokenizer();
    ModelContext ctx;
    ctx.model_id = std::string("m");
    ctx.tokenizer = tok.get();
    ctx.n_ctx = 32;
    const GenerationRequest r = build_completion_request(
        R"({"model":"m","prompt":[259,262],"n":2,"max_tokens":4,"temperature":0.25,"top_p":0.5,"top_k":7,
            "min_p":0.125,"seed":9,"presence_penalty":1.5,"frequency_penalty":-1,"repetition_penalty":1.25,
            "logit_bias":{"262":-100,"259":3.5},"allowed_token_ids":[262,259,262],"logprobs":2,
            "logprobs_mode":"processed","ignore_eos":true})",
        ctx);
    const protocol::Gen gen = gen_for_choice(r, 0, 1, ctx.n_ctx);
    CHECK(line(gen) ==
          "GEN c1 prompt=259,262 max_tokens=4 temperature=0.25 top_k=7 top_p=0.5 min_p=0.125 seed=10 logprobs=2 "
          "allowed=262,259,262 presence_penalty=1.5 frequency_penalty=-1 repetition_penalty=1.25 "
          "logit_bias=262:-100,259:3.5 logprobs_mode=processed ignore_eos=1");
    // Through the protocol's bytes, as the engine receives it.
    auto parsed = protocol::parse_gateway_line(line(gen));
    REQUIRE(std::holds_alternative<protocol::GatewayLine>(parsed));
    const auto p = engine::sampling_params_from(std::get<protocol::Gen>(std::get<protocol::GatewayLine>(parsed)));
    CHECK(p.temperature == 0.25f);
    CHECK(p.top_k == 7);
    CHECK(p.top_p == 0.5f);
    CHECK(p.min_p == 0.125f);
    CHECK(p.presence_penalty == 1.5f);
    CHECK(p.frequency_penalty == -1.0f);
    CHECK(p.repetition_penalty == 1.25f);
    CHECK(p.logit_bias == std::vector<std::pair<int32_t, float>>{{262, -100.0f}, {259, 3.5f}});
    CHECK(p.allowed == std::vector<int32_t>{259, 262});
    CHECK(p.n_logprobs == 2);
    CHECK(p.processed_logprobs);
}
