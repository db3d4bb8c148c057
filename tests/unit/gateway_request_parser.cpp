// build_completion_request and build_chat_request: every parameter's parsing and every
// validation error (status, param, code), against the hand-built test vocabulary and a
// small context.
#include <catch2/catch.hpp>

#include "gateway/chat_prompt.hpp"
#include "gateway/serving_chat.hpp"
#include "gateway/serving_completions.hpp"
#include "gateway_vocab.hpp"

using namespace loom;
using namespace loom::gateway;
using namespace loom::test;

namespace {

const auto tok = test_tokenizer();

ModelContext context() {
    ModelContext ctx;
    ctx.model_id = std::string("m");  // (assigning a literal trips GCC 12's -Wrestrict false positive)
    ctx.tokenizer = tok.get();
    ctx.n_ctx = 32;
    ctx.render_chat = [](const rapidjson::Value& m, const rapidjson::Value*, bool, const rapidjson::Value*) {
        return ChatRenderer::fallback(m);
    };
    return ctx;
}

GenerationRequest completions(const std::string& json) { return build_completion_request(json, context()); }
GenerationRequest chat(const std::string& json) { return build_chat_request(json, context()); }

// The ApiError a body raises (status 0 when it parses).
ApiError error_of(const std::string& json, Endpoint ep = Endpoint::Completions) {
    try {
        if (ep == Endpoint::ChatCompletions) chat(json);
        else completions(json);
    } catch (const ApiError& e) { return e; }
    return ApiError(0, "no error");
}

}  // namespace

TEST_CASE("completions: defaults and sampling parameters") {
    auto r = completions(R"({"model":"m","prompt":"!"})");
    CHECK(r.prompts.size() == 1);
    CHECK(r.prompts[0] == std::vector<int32_t>{kBos, kBang});
    CHECK(r.n == 1);
    CHECK(r.max_tokens == 16);  // the completions API's default
    CHECK_FALSE(r.logprobs);
    CHECK(r.sampling.temperature == 1.0f);
    CHECK_FALSE(r.sampling.seed);
    // One model is served: `model` may be left out (as vLLM allows).
    CHECK(completions(R"({"prompt":"!"})").prompts[0] == std::vector<int32_t>{kBos, kBang});
    CHECK(chat(R"({"messages":[{"role":"user","content":"!"}]})").prompts.size() == 1);

    r = completions(R"({"model":"m","prompt":"x","max_tokens":3,"temperature":0,"top_p":0.5,"top_k":7,
        "min_p":0.1,"seed":42,"presence_penalty":1.5,"frequency_penalty":-1,"repetition_penalty":1.3,
        "logit_bias":{"259":-100,"260":100},"allowed_token_ids":[259,260],"logprobs":5,"echo":true,
        "stop":["a","b"],"n":3,"logprobs_mode":"processed","ignore_eos":true})");
    CHECK(r.max_tokens == 3);
    CHECK(r.sampling.temperature == 0.0f);
    CHECK(r.sampling.top_p == 0.5f);
    CHECK(r.sampling.top_k == 7);
    CHECK(r.sampling.min_p == Approx(0.1f));
    CHECK(r.sampling.seed == 42u);
    CHECK(r.sampling.presence_penalty == 1.5f);
    CHECK(r.sampling.frequency_penalty == -1.0f);
    CHECK(r.sampling.repetition_penalty == Approx(1.3f));
    CHECK(r.sampling.logit_bias == std::vector<std::pair<int32_t, float>>{{259, -100.0f}, {260, 100.0f}});
    CHECK(r.sampling.allowed == std::vector<int32_t>{259, 260});
    CHECK(r.logprobs);
    CHECK(r.top_logprobs == 5);
    CHECK(r.echo);
    CHECK(r.stop == std::vector<std::string>{"a", "b"});
    CHECK(r.n == 3);
    CHECK(r.sampling.processed_logprobs);
    CHECK(r.sampling.ignore_eos);

    CHECK(completions(R"({"model":"m","prompt":"x","seed":18446744073709551615})").sampling.seed ==
          18446744073709551615u);
    CHECK(completions(R"({"model":"m","prompt":"x","seed":-1})").sampling.seed == 18446744073709551615u);
    CHECK(completions(R"({"model":"m","prompt":"x","top_k":-1})").sampling.top_k == 0);
    CHECK(completions(R"({"model":"m","prompt":"x","stop":"zz"})").stop == std::vector<std::string>{"zz"});
    CHECK_FALSE(completions(R"({"model":"m","prompt":"x","logprobs_mode":"raw"})").sampling.processed_logprobs);
    CHECK(completions(R"({"model":"m","prompt":"x","max_tokens":0})").max_tokens == 0);
}

TEST_CASE("completions: the four prompt forms") {
    CHECK(completions(R"({"model":"m","prompt":["!","A"]})").prompts ==
          std::vector<std::vector<int32_t>>{{kBos, kBang}, {kBos, kA}});
    CHECK(completions(R"({"model":"m","prompt":[259,262]})").prompts == std::vector<std::vector<int32_t>>{{259, 262}});
    CHECK(completions(R"({"model":"m","prompt":[[259],[1,262]]})").prompts ==
          std::vector<std::vector<int32_t>>{{259}, {1, 262}});
}

TEST_CASE("chat: logprobs, max_completion_tokens, stream options") {
    auto r = chat(R"({"model":"m","messages":[{"role":"user","content":"!"}],"logprobs":true,"top_logprobs":20,
        "max_completion_tokens":4,"max_tokens":9,"stream":true,"stream_options":{"include_usage":true}})");
    CHECK(r.logprobs);
    CHECK(r.top_logprobs == 20);
    CHECK(r.max_tokens == 4);  // max_completion_tokens wins
    CHECK(r.stream);
    CHECK(r.include_usage);
    CHECK(r.prompts[0] == std::vector<int32_t>{kBos, kBang});
    CHECK_FALSE(chat(R"({"model":"m","messages":[{"role":"user","content":"!"}]})").max_tokens);
    CHECK_FALSE(r.continuous_usage);
    // vLLM's continuous_usage_stats: usage on every chunk, with include_usage only (as vLLM).
    const std::string msgs = R"({"model":"m","messages":[{"role":"user","content":"!"}],"stream":true,)";
    CHECK(chat(msgs + R"("stream_options":{"include_usage":true,"continuous_usage_stats":true}})").continuous_usage);
    CHECK_FALSE(chat(msgs + R"("stream_options":{"continuous_usage_stats":true}})").continuous_usage);
    CHECK(chat(msgs + R"("stream_options":{"include_obfuscation":false}})").stream);
}

TEST_CASE("stream_options: unknown keys are named, as unknown top-level members are") {
    const ApiError e =
        error_of(R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true,"usage":1,"x":2}})");
    CHECK(e.status == 400);
    CHECK(e.message == "Unrecognized request arguments supplied: stream_options.usage, stream_options.x");
    const ApiError one = error_of(R"({"model":"m","prompt":"x","stream":true,"stream_options":{"inclde_usage":true}})");
    CHECK(one.message == "Unrecognized request argument supplied: stream_options.inclde_usage");
    CHECK(one.param == "stream_options.inclde_usage");
}

TEST_CASE("validation errors carry status, param and code") {
    struct Case {
        const char* body;
        int status;
        const char* param;
        const char* code;
        Endpoint ep = Endpoint::Completions;
    };
    const Case cases[] = {
        {"{not json", 400, "", ""},
        {"[1,2]", 400, "", ""},
        {R"({"model":7,"prompt":"x"})", 400, "model", ""},  // may be left out, not be a number
        {R"({"model":"other","prompt":"x"})", 404, "model", "model_not_found"},
        {R"({"model":"m"})", 400, "prompt", ""},
        {R"({"model":"m","prompt":7})", 400, "prompt", ""},
        {R"({"model":"m","prompt":[]})", 400, "prompt", ""},
        {R"({"model":"m","prompt":["a",1]})", 400, "prompt", ""},
        {R"({"model":"m","prompt":[99999]})", 400, "prompt", ""},
        {R"({"model":"m","prompt":[[1],[]]})", 400, "prompt", ""},
        {R"({"model":"m","prompt":"x","temperature":"hot"})", 400, "temperature", ""},
        {R"({"model":"m","prompt":"x","temperature":2.5})", 400, "temperature", ""},
        {R"({"model":"m","prompt":"x","top_p":0})", 400, "top_p", ""},
        {R"({"model":"m","prompt":"x","n":0})", 400, "n", ""},
        {R"({"model":"m","prompt":"x","n":129})", 400, "n", ""},
        {R"({"model":"m","prompt":"x","n":1.5})", 400, "n", ""},
        {R"({"model":"m","prompt":"x","logprobs":21})", 400, "logprobs", ""},
        {R"({"model":"m","prompt":"x","logprobs":-1})", 400, "logprobs", ""},
        {R"({"model":"m","prompt":"x","logprobs":true})", 400, "logprobs", ""},
        {R"({"model":"m","prompt":"x","echo":"yes"})", 400, "echo", ""},
        {R"({"model":"m","prompt":"x","stop":["a","b","c","d","e"]})", 400, "stop", ""},
        {R"({"model":"m","prompt":"x","stop":[""]})", 400, "stop", ""},
        {R"({"model":"m","prompt":"x","stop":5})", 400, "stop", ""},
        {R"({"model":"m","prompt":"x","logit_bias":{"abc":1}})", 400, "logit_bias", ""},
        {R"({"model":"m","prompt":"x","logit_bias":{"259":101}})", 400, "logit_bias", ""},
        {R"({"model":"m","prompt":"x","allowed_token_ids":[-1]})", 400, "allowed_token_ids", ""},
        {R"({"model":"m","prompt":"x","allowed_token_ids":[]})", 400, "allowed_token_ids", ""},
        {R"({"model":"m","prompt":"x","logprobs_mode":"best"})", 400, "logprobs_mode", ""},
        {R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", 400, "stream_options", ""},
        {R"({"model":"m","prompt":"x","stream":1})", 400, "stream", ""},
        {R"({"model":"m","prompt":"x","max_tokens":-1})", 400, "max_tokens", ""},
        {R"({"model":"m","prompt":"x","max_tokens":33})", 400, "max_tokens", ""},
        {R"({"model":"m","prompt":"x","max_tokens":31})", 400, "max_tokens", "context_length_exceeded"},
        {R"({"model":"m","prompt":"x","suffix":"y"})", 400, "suffix", "unsupported_parameter"},
        {R"({"model":"m","messages":[]})", 400, "messages", "", Endpoint::ChatCompletions},
        {R"({"model":"m"})", 400, "messages", "", Endpoint::ChatCompletions},
        {R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0].role", "",
         Endpoint::ChatCompletions},
        {R"({"model":"m","messages":[{"role":"user","content":5}]})", 400, "messages[0].content", "",
         Endpoint::ChatCompletions},
        {R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})", 400, "top_logprobs", "",
         Endpoint::ChatCompletions},
        {R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})", 400,
         "top_logprobs", "", Endpoint::ChatCompletions},
        {R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})", 400, "max_tokens", "",
         Endpoint::ChatCompletions},
    };
    for (const Case& c : cases) {
        INFO(c.body);
        const ApiError e = error_of(c.body, c.ep);
        CHECK(e.status == c.status);
        CHECK(e.param == c.param);
        CHECK(e.code == c.code);
        CHECK(e.type == "invalid_request_error");
        CHECK_FALSE(e.message.empty());
    }
}

TEST_CASE("a prompt as long as the context") {
    std::string ids = "[";
    for (int i = 0; i < 32; ++i) ids += (i ? ",259" : "259");
    ids += "]";
    const ApiError e = error_of(R"({"model":"m","prompt":)" + ids + "}");
    CHECK(e.status == 400);
    CHECK(e.code == "context_length_exceeded");
    CHECK(e.message.find("32 tokens") != std::string::npos);
    // Scoring the whole prompt (echo, no completion) fits exactly.
    const auto r = completions(R"({"model":"m","echo":true,"logprobs":1,"max_tokens":0,"prompt":)" + ids + "}");
    CHECK(r.prompts[0].size() == 32);
}
