// sampling_params_from: every sampling key of a GEN line reaches engine::SamplingParams,
// `allowed` sorted and deduplicated, defaults mapping to the sampler's defaults.
#include <catch2/catch.hpp>

#include "engine/sampling_params.hpp"

using namespace loom;

namespace {

protocol::Gen gen_line(const std::string& line) {
    auto parsed = protocol::parse_gateway_line(line);
    REQUIRE(std::holds_alternative<protocol::GatewayLine>(parsed));
    auto& gl = std::get<protocol::GatewayLine>(parsed);
    REQUIRE(std::holds_alternative<protocol::Gen>(gl));
    return std::get<protocol::Gen>(gl);
}

}  // namespace

TEST_CASE("every sampling key of a GEN line is carried") {
    const auto p = engine::sampling_params_from(
        gen_line("GEN r1 prompt=1,403,407 max_tokens=5 temperature=0.7 top_k=40 top_p=0.9 min_p=0.05 seed=7 logprobs=3 "
                 "prompt_logprobs=2 allowed=409,3,409,261,3 presence_penalty=0.5 frequency_penalty=-0.25 "
                 "repetition_penalty=1.1 logit_bias=261:-1.5,3:2 logprobs_mode=processed ignore_eos=1"));
    CHECK(p.temperature == 0.7f);
    CHECK(p.top_k == 40);
    CHECK(p.top_p == 0.9f);
    CHECK(p.min_p == 0.05f);
    CHECK(p.presence_penalty == 0.5f);
    CHECK(p.frequency_penalty == -0.25f);
    CHECK(p.repetition_penalty == 1.1f);
    CHECK(p.logit_bias == std::vector<std::pair<int32_t, float>>{{261, -1.5f}, {3, 2.0f}});  // GEN order
    CHECK(p.allowed == std::vector<int32_t>{3, 261, 409});                                   // sorted, each once
    CHECK(p.n_logprobs == 3);
    CHECK(p.processed_logprobs);
}

TEST_CASE("a GEN line without sampling keys gives the sampler's defaults") {
    const auto p = engine::sampling_params_from(gen_line("GEN r2 prompt=1"));
    const engine::SamplingParams d;
    CHECK(p.temperature == d.temperature);
    CHECK(p.top_k == d.top_k);
    CHECK(p.top_p == d.top_p);
    CHECK(p.min_p == d.min_p);
    CHECK(p.presence_penalty == d.presence_penalty);
    CHECK(p.frequency_penalty == d.frequency_penalty);
    CHECK(p.repetition_penalty == d.repetition_penalty);
    CHECK(p.logit_bias.empty());
    CHECK(p.allowed.empty());
    CHECK(p.n_logprobs == -1);  // no logprobs= key: no LP lines
    CHECK_FALSE(p.processed_logprobs);
}

TEST_CASE("logprobs=0 asks for the sampled token's logprob only") {
    CHECK(engine::sampling_params_from(gen_line("GEN r3 prompt=1 logprobs=0")).n_logprobs == 0);
}

TEST_CASE("allowed ids already sorted and unique are kept as they are") {
    protocol::Gen g;
    g.prompt = {1};
    g.allowed = {2, 5, 511};
    CHECK(engine::sampling_params_from(g).allowed == std::vector<int32_t>{2, 5, 511});
    g.allowed = {7, 7, 7};
    CHECK(engine::sampling_params_from(g).allowed == std::vector<int32_t>{7});
}
