// The completions and chat request builders and the shared tokenization step, on the
// real tokenizer of stories260K.gguf: prompt forms, chat rendering (no chat template:
// the fallback), BOS handling and the context-length checks, asserting the token ids
// of ../shared/reference/stories260K.json.
#include <catch2/catch.hpp>

#include "gateway/chat_prompt.hpp"
#include "gateway/prompt_tokens.hpp"
#include "gateway/serving_chat.hpp"
#include "gateway/serving_completions.hpp"
#include "model/gguf/gguf.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "test_paths.hpp"

using namespace loom;
using namespace loom::gateway;
using Ids = std::vector<int32_t>;

namespace {

// Prompt ids from the reference file (llama.cpp's tokenizer).
const Ids kOnce = {1, 403, 407, 261, 378};  // "Once upon a time"
const Ids kDog = {1, 291, 376, 400, 428};   // "The little dog"

struct Stories {
    std::unique_ptr<model::Tokenizer> tok;
    std::unique_ptr<ChatRenderer> chat;
    Stories() {
        const auto f = model::GgufFile::open(test::shared_path("models/stories260K.gguf"));
        tok = model::Tokenizer::from_gguf(f);
        chat = std::make_unique<ChatRenderer>(tok->vocab());
    }
};

const Stories& stories() {
    static const Stories s;
    return s;
}

// As App::model_context() builds it, with a small context.
ModelContext context(int64_t n_ctx = 32) {
    ModelContext ctx;
    ctx.model_id = std::string("stories260K");
    ctx.tokenizer = stories().tok.get();
    ctx.n_ctx = n_ctx;
    const ChatRenderer* c = stories().chat.get();
    ctx.template_adds_bos = c->has_template();
    ctx.render_chat = [c](const rapidjson::Value& m, const rapidjson::Value* t, bool g, const rapidjson::Value* k) {
        return c->render(m, t, g, k);
    };
    return ctx;
}

ApiError error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const ApiError& e) { return e; }
    return ApiError(0, "no error");
}

rapidjson::Document json(const std::string& s) {
    rapidjson::Document d;
    d.Parse(s.c_str());
    REQUIRE_FALSE(d.HasParseError());
    return d;
}

}  // namespace

TEST_CASE("completions: text prompts are tokenized with BOS, token prompts kept") {
    auto r = build_completion_request(R"({"model":"stories260K","prompt":"Once upon a time"})", context());
    CHECK(r.endpoint == Endpoint::Completions);
    CHECK(r.prompts == std::vector<Ids>{kOnce});
    CHECK(r.max_tokens == 16);
    r = build_completion_request(R"({"model":"stories260K","prompt":["Once upon a time","The little dog"]})",
                                 context());
    CHECK(r.prompts == std::vector<Ids>{kOnce, kDog});
    r = build_completion_request(R"({"model":"stories260K","prompt":[[403,407],[1,291]],"max_tokens":2})", context());
    CHECK(r.prompts == std::vector<Ids>{{403, 407}, {1, 291}});
    // "<s>" written in the text is the BOS token, so the prompt starts with BOS twice.
    r = build_completion_request(R"({"model":"stories260K","prompt":"<s>Once upon a time"})", context());
    CHECK(r.prompts == std::vector<Ids>{{1, 1, 403, 407, 261, 378}});
}

TEST_CASE("completions: the prompt forms before tokenization") {
    const auto prompts =
        completion_prompts(json(R"({"prompt":["Once upon a time","The little dog"]})"), *stories().tok);
    REQUIRE(prompts.size() == 2);
    CHECK(std::get<std::string>(prompts[1]) == "The little dog");
    const auto ids = completion_prompts(json(R"({"prompt":[1,403,407,261,378]})"), *stories().tok);
    REQUIRE(ids.size() == 1);
    CHECK(std::get<Ids>(ids[0]) == kOnce);
    CHECK(tokenize_completion_prompts(prompts, *stories().tok) == std::vector<Ids>{kOnce, kDog});
    // The vocabulary has 512 ids.
    CHECK(error_of([] { completion_prompts(json(R"({"prompt":[1,512]})"), *stories().tok); }).param == "prompt");
    std::string many = R"({"prompt":[)";
    for (int i = 0; i < 65; ++i) many += i ? ",\"a\"" : "\"a\"";
    many += "]}";
    const ApiError e = error_of([&] { completion_prompts(json(many), *stories().tok); });
    CHECK(e.status == 400);
    CHECK(e.message == "at most 64 prompts per request");
}

TEST_CASE("chat: the fallback prompt is the messages' text, with BOS from the tokenizer") {
    REQUIRE_FALSE(stories().chat->has_template());  // stories260K has no chat template
    auto r = build_chat_request(
        R"({"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"logprobs":true})",
        context());
    CHECK(r.endpoint == Endpoint::ChatCompletions);
    CHECK(r.prompts == std::vector<Ids>{kOnce});
    CHECK(r.logprobs);
    CHECK_FALSE(r.max_tokens);  // chat: until the context is full
    // Text parts are joined by "\n", as vLLM flattens content parts to a string.
    const char* parts = R"({"model":"stories260K","messages":[{"role":"user","content":[
        {"type":"text","text":"Once upon"},{"type":"text","text":"a time"}]}]})";
    CHECK(render_chat_prompt(json(parts), context()) == "Once upon\na time");
    r = build_chat_request(parts, context());
    CHECK(r.prompts == std::vector<Ids>{stories().tok->encode("Once upon\na time", true, true)});
    CHECK(render_chat_prompt(json(R"({"messages":[{"role":"system","content":"The little dog"},
        {"role":"user","content":"Once upon a time"}]})"),
                             context()) == "The little dog\nOnce upon a time");
}

TEST_CASE("chat: invalid chat fields name themselves") {
    const auto ctx = context();
    auto param = [&](const std::string& body) { return error_of([&] { build_chat_request(body, ctx); }).param; };
    CHECK(param(R"({"model":"stories260K","messages":[{"role":"user","content":"x"}],"tools":{}})") == "tools");
    CHECK(param(R"({"model":"stories260K","messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]})") ==
          "chat_template_kwargs");
    CHECK(param(R"({"model":"stories260K","messages":[{"role":"user","content":"x"},{"role":"user"}]})") ==
          "messages[1].content");
    CHECK(param(R"({"model":"stories260K","messages":[{"role":"user","content":[{"type":"image_url"}]}]})") ==
          "messages[0].content");
    CHECK(param(R"({"model":"stories260K","messages":[{"role":"assistant","tool_calls":[]}]})") == "");
}

TEST_CASE("tokenize_prompt: BOS on request, an empty result refused") {
    const auto& tok = *stories().tok;
    CHECK(tokenize_prompt(tok, "Once upon a time", true, "prompt", "empty") == kOnce);
    CHECK(tokenize_prompt(tok, "Once upon a time", false, "prompt", "empty") == Ids{403, 407, 261, 378});
    CHECK(tokenize_prompt(tok, "", true, "prompt", "empty") == Ids{1});
    const ApiError e = error_of([&] { tokenize_prompt(tok, "", false, "messages", "nothing to say"); });
    CHECK(e.status == 400);
    CHECK(e.param == "messages");
    CHECK(e.message == "nothing to say");
}

TEST_CASE("check_context_length: the prompt must leave room, unless it is only scored") {
    GenerationRequest r;
    r.prompts = {kOnce};  // 5 tokens
    r.max_tokens = 3;
    CHECK_NOTHROW(check_context_length(r, 8, "prompt"));
    r.max_tokens = 4;
    ApiError e = error_of([&] { check_context_length(r, 8, "prompt"); });
    CHECK(e.param == "max_tokens");
    CHECK(e.code == "context_length_exceeded");
    CHECK(e.message ==
          "This model's maximum context length is 8 tokens. However, you requested 9 tokens (5 in the "
          "prompt, 4 for the completion).");
    r.max_tokens.reset();
    e = error_of([&] { check_context_length(r, 5, "messages"); });
    CHECK(e.param == "messages");
    CHECK(e.message == "This model's maximum context length is 5 tokens. However, your prompt has 5 tokens.");
    r.echo = true;
    r.max_tokens = 0;
    CHECK_NOTHROW(check_context_length(r, 5, "prompt"));
    // Through the builder: the whole request is refused.
    CHECK(error_of([] {
              build_completion_request(R"({"model":"stories260K","prompt":"Once upon a time"})", context(8));
          }).code == "context_length_exceeded");
}
