// The reference sampler (engine/sampler.hpp) on hand-made logits with hand-computed
// answers.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "engine/sampler.hpp"

using namespace loom::engine;

namespace {

SampleResult run(const std::vector<float>& logits, const SamplingParams& p, double u = 0.5,
                 const TokenHistory& h = {}) {
    SamplerScratch scratch;
    return sample_logits(logits, p, h, u, scratch);
}

double lse(std::initializer_list<double> v) {
    double s = 0;
    for (double x : v) s += std::exp(x);
    return std::log(s);
}

}  // namespace

TEST_CASE("raw logprobs are the log-softmax of the raw logits") {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
    SamplingParams p;
    p.temperature = 0;
    p.n_logprobs = 3;
    auto r = run(logits, p);
    const double z = lse({1.0, 3.0, 2.0, 0.5});
    CHECK(r.token == 1);
    CHECK(r.logprob == Approx(3.0 - z).margin(1e-6));
    REQUIRE(r.top.size() == 3);
    CHECK(r.top[0] == TokenLogprob{1, static_cast<float>(3.0 - z)});
    CHECK(r.top[1].first == 2);
    CHECK(r.top[2].first == 0);
    CHECK(r.top[2].second == Approx(1.0 - z).margin(1e-6));
}

TEST_CASE("raw logprobs ignore temperature, penalties and bias") {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
    SamplingParams p;
    p.temperature = 0;
    p.n_logprobs = 1;
    p.logit_bias = {{0, 10.0f}};  // forces token 0
    auto r = run(logits, p);
    CHECK(r.token == 0);
    CHECK(r.logprob == Approx(1.0 - lse({1.0, 3.0, 2.0, 0.5})).margin(1e-6));
    CHECK(r.top[0].first == 1);  // raw order
}

TEST_CASE("allowed ids renormalise over exactly that set") {
    const std::vector<float> logits = {5.0f, 1.0f, 2.0f, 4.0f, 0.0f};
    SamplingParams p;
    p.temperature = 0;
    p.n_logprobs = 20;
    p.allowed = {1, 2, 4};
    auto r = run(logits, p);
    CHECK(r.token == 2);  // best allowed, although 0 and 3 are larger
    REQUIRE(r.top.size() == 3);
    const double z = lse({1.0, 2.0, 0.0});
    CHECK(r.top[0] == TokenLogprob{2, static_cast<float>(2.0 - z)});
    CHECK(r.top[1] == TokenLogprob{1, static_cast<float>(1.0 - z)});
    CHECK(r.top[2] == TokenLogprob{4, static_cast<float>(0.0 - z)});
    double sum = 0;
    for (const auto& [id, lp] : r.top) sum += std::exp(lp);
    CHECK(sum == Approx(1.0).margin(1e-6));
}

TEST_CASE("greedy ties go to the lowest id; top-K ties too") {
    SamplingParams p;
    p.temperature = 0;
    p.n_logprobs = 2;
    auto r = run({2.0f, 7.0f, 7.0f, 7.0f}, p);
    CHECK(r.token == 1);
    CHECK(r.top[0].first == 1);
    CHECK(r.top[1].first == 2);
}

TEST_CASE("inverse-CDF draw in ascending id order") {
    // probabilities 0.1, 0.2, 0.3, 0.4
    const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
    SamplingParams p;
    CHECK(run(logits, p, 0.05).token == 0);
    CHECK(run(logits, p, 0.15).token == 1);
    CHECK(run(logits, p, 0.35).token == 2);
    CHECK(run(logits, p, 0.65).token == 3);
    CHECK(run(logits, p, 0.999).token == 3);
}

TEST_CASE("top-k, top-p and min-p keep the expected sets") {
    const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
    SamplingParams p;
    p.top_k = 2;  // keeps ids 3 and 2: p = 3/7, 4/7 renormalised
    CHECK(run(logits, p, 0.0).token == 2);
    CHECK(run(logits, p, 0.42).token == 2);
    CHECK(run(logits, p, 0.44).token == 3);
    p = {};
    p.top_p = 0.65f;  // 0.4 + 0.3 >= 0.65: keeps 3 and 2
    CHECK(run(logits, p, 0.0).token == 2);
    p = {};
    p.min_p = 0.6f;  // keeps p >= 0.24: ids 2, 3
    CHECK(run(logits, p, 0.0).token == 2);
    p.min_p = 0.9f;  // only id 3
    CHECK(run(logits, p, 0.0).token == 3);
}

TEST_CASE("processed logprobs are the distribution sampled from, -inf outside it") {
    const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
    SamplingParams p;
    p.top_k = 2;
    p.n_logprobs = 4;
    p.processed_logprobs = true;
    auto r = run(logits, p, 0.9);
    CHECK(r.token == 3);
    CHECK(r.logprob == Approx(std::log(4.0 / 7.0)).margin(1e-6));
    REQUIRE(r.top.size() == 4);
    CHECK(r.top[1].first == 2);
    CHECK(r.top[1].second == Approx(std::log(3.0 / 7.0)).margin(1e-6));
    CHECK(std::isinf(r.top[2].second));
    CHECK(r.top[2].second < 0);
    p = {};
    p.temperature = 0.5f;
    p.n_logprobs = 1;
    p.processed_logprobs = true;
    r = run(logits, p, 0.0);
    // temperature 0.5 squares the probabilities: 0.01, 0.04, 0.09, 0.16 over 0.30
    CHECK(r.token == 0);
    CHECK(r.logprob == Approx(std::log(0.01 / 0.30)).margin(1e-5));
}

TEST_CASE("penalties follow the OpenAI and CTRL definitions") {
    const std::vector<float> logits = {2.0f, 1.9f, -1.0f};
    SamplingParams p;
    p.temperature = 0;
    TokenHistory h;
    h.add_output(0);
    h.add_output(0);
    p.frequency_penalty = 0.1f;  // 2.0 - 0.2 = 1.8 < 1.9
    CHECK(run(logits, p, 0.5, h).token == 1);
    p = {};
    p.temperature = 0;
    p.presence_penalty = 0.05f;  // 1.95 > 1.9
    CHECK(run(logits, p, 0.5, h).token == 0);
    p.presence_penalty = 0.2f;  // 1.8 < 1.9
    CHECK(run(logits, p, 0.5, h).token == 1);
    p = {};
    p.temperature = 0;
    p.repetition_penalty = 1.1f;  // 2.0 / 1.1 = 1.818 < 1.9
    TokenHistory h2;
    h2.prompt = {0};
    CHECK(run(logits, p, 0.5, h2).token == 1);
}

TEST_CASE("NaN logits are an error, never a sample") {
    SamplingParams p;
    CHECK_THROWS_AS(run({1.0f, std::nanf(""), 0.0f}, p), std::runtime_error);
}

TEST_CASE("score_token gives prompt logprobs over the whole vocabulary") {
    auto r = score_token(std::vector<float>{0.0f, 1.0f, 2.0f}, 0, 2);
    const double z = lse({0.0, 1.0, 2.0});
    CHECK(r.logprob == Approx(-z).margin(1e-6));
    REQUIRE(r.top.size() == 2);
    CHECK(r.top[0].first == 2);
    CHECK(r.top[1].first == 1);
}

TEST_CASE("PenaltyState kept incrementally samples exactly as the TokenHistory it mirrors") {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> logit(-4.0f, 4.0f);
    std::vector<float> logits(50);
    for (int trial = 0; trial < 200; ++trial) {
        for (float& v : logits) v = logit(rng);
        SamplingParams p;
        p.temperature = trial % 3 == 0 ? 0.0f : 0.8f;
        p.repetition_penalty = trial % 2 ? 1.3f : 1.0f;
        p.presence_penalty = 0.4f;
        p.frequency_penalty = 0.25f;
        p.top_k = trial % 5;
        p.n_logprobs = 5;
        p.processed_logprobs = trial % 4 == 0;
        TokenHistory h;
        for (int i = 0; i < 12; ++i) h.prompt.push_back(static_cast<int32_t>(rng() % 50));
        PenaltyState st;
        st.reset(50, p.repetition_penalty != 1.0f, h.prompt, {});
        for (int i = 0; i < 30; ++i) {
            const double u = static_cast<double>(rng() % 1000) / 1000.0;
            SamplerScratch a, b;
            const auto want = sample_logits(logits, p, h, u, a);
            const auto got = sample_logits(logits, p, st, u, b);
            REQUIRE(got.token == want.token);
            REQUIRE(got.logprob == want.logprob);
            REQUIRE(got.top == want.top);
            h.add_output(want.token);
            st.add_output(want.token);
        }
        // Resuming from the output so far gives the same state.
        PenaltyState again;
        again.reset(50, p.repetition_penalty != 1.0f, h.prompt, h.output);
        SamplerScratch a, b;
        CHECK(sample_logits(logits, p, again, 0.3, a).token == sample_logits(logits, p, h, 0.3, b).token);
    }
    PenaltyState none;
    none.reset(50, false, {}, {});
    SamplingParams rep;
    rep.repetition_penalty = 1.2f;
    SamplerScratch s;
    CHECK_THROWS_AS(sample_logits(logits, rep, none, 0.5, s), std::logic_error);
}
