// Choice: one choice's bookkeeping from GEN to DONE on the real stories260K tokenizer and
// the reference's greedy tokens (", there was a little" = 432 383 286 261 376): released
// text and entries, echo with and without PLP lines, stop strings, finish reasons,
// usage counts and stream chunk offsets.
#include <catch2/catch.hpp>

#include "gateway/choice.hpp"
#include "model/gguf/gguf.hpp"
#include "test_paths.hpp"

using namespace loom;
using namespace loom::gateway;

namespace {

const std::vector<int32_t> kOnce = {1, 403, 407, 261, 378};      // "Once upon a time"
const std::vector<int32_t> kTokens = {432, 383, 286, 261, 376};  // ", there was a little"

const model::Tokenizer& tok() {
    static const auto t =
        model::Tokenizer::from_gguf(model::GgufFile::open(test::shared_path("models/stories260K.gguf")));
    return *t;
}

GenerationRequest request(Endpoint ep) {
    GenerationRequest r;
    r.endpoint = ep;
    r.prompts = {kOnce};
    return r;
}

protocol::Done done(const char* finish, int64_t n) { return protocol::Done{"c1", finish, 5, n}; }

// Runs the generated tokens through `c` in the non-streamed way.
void feed(Choice& c, const std::vector<int32_t>& tokens) {
    for (int32_t t : tokens) c.keep(c.on_token(t, nullptr));
}

}  // namespace

TEST_CASE("a whole completion: the tokens' text, finish reason and count") {
    const GenerationRequest r = request(Endpoint::Completions);
    Choice c(tok(), r, 3, 0);
    CHECK(c.index() == 3);
    feed(c, kTokens);
    CHECK_FALSE(c.done());
    c.keep(c.on_done(done("length", 5)));
    CHECK(c.done());
    CHECK(c.finish_reason() == "length");
    CHECK(c.completion_tokens() == 5);
    const ChoiceOut out = c.take_whole();
    CHECK(out.index == 3);
    CHECK(out.text == ", there was a little");
    REQUIRE(out.entries.size() == 5);
    CHECK(out.entries[1].token == 383);
    CHECK(out.entries[1].bytes == " there");
    CHECK(out.finish_reason == "length");
}

TEST_CASE("a stop string cuts the text; the choice counts tokens up to it") {
    GenerationRequest r = request(Endpoint::Completions);
    r.stop = {" a "};
    Choice c(tok(), r, 0, 0);
    feed(c, kTokens);  // " a" arrives with 261, " " with 376: the stop completes there
    CHECK(c.stopped());
    CHECK(c.on_token(298, nullptr).empty());  // nothing after the stop
    c.keep(c.on_done(done("cancelled", 7)));
    CHECK(c.finish_reason() == "stop");
    CHECK(c.completion_tokens() == 5);  // not DONE's 7
    CHECK(c.take_whole().text == ", there was");
}

TEST_CASE("echo: prompt tokens with their PLP logprobs, then the completion") {
    GenerationRequest r = request(Endpoint::Completions);
    r.echo = true;
    Choice c(tok(), r, 0, 0);
    c.keep(c.on_prompt_logprobs(protocol::PromptLogprobs{"c1", 0, std::nullopt, {}}));
    c.keep(c.on_prompt_logprobs(protocol::PromptLogprobs{"c1", 1, -6.5f, {{403, -0.25f}}}));
    CHECK(c.on_prompt_logprobs(protocol::PromptLogprobs{"c1", 3, -1.0f, {}}).empty());  // not the next index
    feed(c, {432});  // the other prompt tokens are echoed without logprobs first
    c.keep(c.on_done(done("length", 1)));
    const ChoiceOut out = c.take_whole();
    CHECK(out.text == "<s> Once upon a time,");  // completions spell BOS with its text
    REQUIRE(out.entries.size() == 6);
    CHECK_FALSE(out.entries[0].has_logprob);  // the first prompt token has no logprob
    CHECK(out.entries[1].logprob == -6.5f);
    CHECK(out.entries[1].top == std::vector<protocol::TokenLogprob>{{403, -0.25f}});
    CHECK_FALSE(out.entries[2].has_logprob);  // no PLP line came for it
    CHECK(out.entries[5].token == 432);
}

TEST_CASE("echo of a text prompt: the prompt as sent, and its entries still join to it") {
    // What each token adds: BOS nothing, the first word no dummy-prefix space.
    CHECK(align_prompt_text(tok(), kOnce, "Once upon a time") ==
          std::vector<std::string>{"", "Once", " upon", " a", " time"});
    // Text the walk cannot follow goes to the token where it stops matching.
    CHECK(align_prompt_text(tok(), kOnce, "Once upon a tim") ==
          std::vector<std::string>{"", "Once", " upon", " a", " tim"});
    GenerationRequest r = request(Endpoint::Completions);
    r.echo = true;
    r.prompt_texts = {std::string("Once upon a time")};
    Choice c(tok(), r, 0, 0);
    feed(c, {432});
    c.keep(c.on_done(done("length", 1)));
    const ChoiceOut out = c.take_whole();
    CHECK(out.text == "Once upon a time,");
    REQUIRE(out.entries.size() == 6);
    CHECK(out.entries[0].token == 1);
    CHECK(out.entries[0].bytes.empty());
    CHECK(out.entries[1].token == 403);
    CHECK(out.entries[1].bytes == "Once");
    std::string joined;
    for (const auto& e : out.entries) joined += e.bytes;
    CHECK(joined == out.text);
}

TEST_CASE("chat gives special tokens no bytes; stream chunks carry their text offsets") {
    const GenerationRequest r = request(Endpoint::ChatCompletions);
    Choice c(tok(), r, 1, 0);
    ChoiceOut a = c.chunks(c.on_token(432, nullptr), std::nullopt).at(0);
    CHECK(a.index == 1);
    CHECK(a.text == ",");
    CHECK(a.text_offset == 0);
    Released bos = c.on_token(1, nullptr);
    CHECK(bos.text.empty());
    REQUIRE(bos.entries.size() == 1);
    CHECK(bos.entries[0].special);
    ChoiceOut b = c.chunks(c.on_token(383, nullptr), std::nullopt).at(0);
    CHECK(b.text == " there");
    CHECK(b.text_offset == 1);
    Released rest = c.on_done(done("stop", 3));
    ChoiceOut last = c.chunks(std::move(rest), c.finish_reason()).at(0);
    CHECK(last.finish_reason == "stop");
    CHECK(last.text_offset == 7);
}
