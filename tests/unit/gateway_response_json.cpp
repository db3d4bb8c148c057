// response_json: the OpenAI response, chunk and error JSON, read back and checked
// field by field: token spelling, bytes, -inf as -9999.0, unique top_logprobs keys,
// echo's null first logprob, usage chunks.
#include <catch2/catch.hpp>

#include <rapidjson/document.h>

#include <cmath>
#include <limits>

#include "gateway/response_json.hpp"
#include "gateway_vocab.hpp"

using namespace loom;
using namespace loom::gateway;
using namespace loom::test;

namespace {

const auto tok = test_tokenizer();

rapidjson::Document parse(const std::string& s) {
    rapidjson::Document d;
    d.Parse(s.data(), s.size());
    REQUIRE_FALSE(d.HasParseError());
    return d;
}

LogprobEntry entry(int32_t id, float lp, std::vector<protocol::TokenLogprob> top = {}) {
    LogprobEntry e;
    e.token = id;
    e.bytes = tok->token_bytes(id);
    e.special = tok->vocab().is_special(id);
    e.logprob = lp;
    e.top = std::move(top);
    return e;
}

GenerationRequest request(Endpoint ep, bool logprobs) {
    GenerationRequest r;
    r.endpoint = ep;
    r.logprobs = logprobs;
    return r;
}

const ResponseMeta meta{"chatcmpl-1", 1700000000, "test-model"};

std::string str(const rapidjson::Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

}  // namespace

TEST_CASE("token_display: text when valid UTF-8, else bytes:\\xNN, vocabulary text for specials") {
    CHECK(token_display(*tok, kHello, " Hello", false) == " Hello");
    CHECK(token_display(*tok, byte_token(0xF0), "\xF0", false) == "bytes:\\xf0");
    CHECK(token_display(*tok, byte_token(0xC3), "\xC3\xA9\xFF", false) == "bytes:\\xc3\\xa9\\xff");
    CHECK(token_display(*tok, kEot, "", true) == "<|eot|>");
}

TEST_CASE("chat: logprobs.content with token, logprob, bytes and top_logprobs") {
    const float ninf = -std::numeric_limits<float>::infinity();
    ChoiceOut c;
    c.text = " Hello\xF0\x9F\x98\x80";
    c.entries = {entry(kHello, -0.125f, {{kHello, -0.125f}, {kEot, ninf}}),
                 entry(kEot, -3.0f),
                 entry(byte_token(0xF0), ninf),
                 entry(byte_token(0x9F), -1.0f),
                 entry(byte_token(0x98), -1.0f),
                 entry(byte_token(0x80), std::numeric_limits<float>::quiet_NaN())};
    c.finish_reason = "stop";
    const std::string body = full_response(request(Endpoint::ChatCompletions, true), meta, *tok, {c}, Usage{5, 6});
    CHECK(body.find("-9999.0") != std::string::npos);
    CHECK(body.find("nan") == std::string::npos);
    CHECK(body.find("inf") == std::string::npos);
    auto d = parse(body);
    CHECK(str(d["object"]) == "chat.completion");
    const auto& ch = d["choices"][0];
    CHECK(str(ch["message"]["role"]) == "assistant");
    CHECK(str(ch["message"]["content"]) == " Hello\xF0\x9F\x98\x80");
    CHECK(str(ch["finish_reason"]) == "stop");
    const auto& content = ch["logprobs"]["content"];
    REQUIRE(content.Size() == 6);
    CHECK(str(content[0]["token"]) == " Hello");
    CHECK(content[0]["logprob"].GetDouble() == -0.125);
    CHECK(content[0]["bytes"].Size() == 6);
    CHECK(content[0]["bytes"][0].GetInt() == ' ');
    REQUIRE(content[0]["top_logprobs"].Size() == 2);
    CHECK(content[0]["top_logprobs"][1]["logprob"].GetDouble() == -9999.0);
    CHECK(content[0]["top_logprobs"][1]["bytes"].IsNull());
    CHECK(str(content[1]["token"]) == "<|eot|>");
    CHECK(content[1]["bytes"].IsNull());
    CHECK(str(content[2]["token"]) == "bytes:\\xf0");
    CHECK(content[2]["logprob"].GetDouble() == -9999.0);
    CHECK(content[2]["bytes"].Size() == 1);
    CHECK(content[2]["bytes"][0].GetInt() == 0xF0);
    CHECK(content[5]["logprob"].GetDouble() == -9999.0);  // NaN never reaches JSON
    // The joined bytes spell the content.
    std::string joined;
    for (const auto& e : content.GetArray())
        if (!e["bytes"].IsNull())
            for (const auto& b : e["bytes"].GetArray()) joined += static_cast<char>(b.GetInt());
    CHECK(joined == str(ch["message"]["content"]));
    CHECK(d["usage"]["total_tokens"].GetInt() == 11);
}

TEST_CASE("logprobs are the shortest decimal that reads back to the same float") {
    ChoiceOut c;
    c.text = " Hello";
    c.entries = {entry(kHello, -0.1f)};
    const std::string body = full_response(request(Endpoint::ChatCompletions, true), meta, *tok, {c}, Usage{});
    CHECK(body.find("\"logprob\":-0.1,") != std::string::npos);
}

TEST_CASE("completions: legacy logprobs, unique top keys, echo's null first entry, text_offset") {
    ChoiceOut c;
    c.index = 1;
    LogprobEntry bos = entry(kBos, 0);
    bos.has_logprob = false;
    bos.bytes = "<s>";  // completions spell special tokens with their text
    // <0x41> and "A" have the same text: one key, the larger logprob.
    c.entries = {bos, entry(kHello, -0.5f, {{kHello, -0.5f}, {byte_token('A'), -2.0f}, {kA, -1.5f}}),
                 entry(byte_token(0xC3), -1.0f), entry(byte_token(0xA9), -1.0f), entry(kBang, -0.25f)};
    c.text = "<s> Hello\xC3\xA9!";
    c.finish_reason = "length";
    auto req = request(Endpoint::Completions, true);
    req.echo = true;
    auto d = parse(full_response(req, meta, *tok, {c}, Usage{5, 3}));
    CHECK(str(d["object"]) == "text_completion");
    const auto& ch = d["choices"][0];
    CHECK(ch["index"].GetInt() == 1);
    CHECK(str(ch["text"]) == "<s> Hello\xC3\xA9!");
    const auto& lp = ch["logprobs"];
    REQUIRE(lp["tokens"].Size() == 5);
    CHECK(str(lp["tokens"][0]) == "<s>");
    CHECK(str(lp["tokens"][1]) == " Hello");
    CHECK(str(lp["tokens"][2]) == "bytes:\\xc3");
    CHECK(lp["token_logprobs"][0].IsNull());
    CHECK(lp["token_logprobs"][1].GetDouble() == -0.5);
    CHECK(lp["top_logprobs"][0].IsNull());
    const auto& top = lp["top_logprobs"][1];
    CHECK(top.MemberCount() == 2);
    CHECK(top["A"].GetDouble() == -1.5);
    CHECK(top[" Hello"].GetDouble() == -0.5);
    const auto& off = lp["text_offset"];
    CHECK(off[0].GetInt() == 0);
    CHECK(off[1].GetInt() == 3);
    CHECK(off[2].GetInt() == 9);
    CHECK(off[3].GetInt() == 10);  // a continuation byte starts no character
    CHECK(off[4].GetInt() == 10);
}

TEST_CASE("return_tokens_as_token_ids spells tokens as token_id:<id>") {
    ChoiceOut c;
    c.text = " Hello";
    c.entries = {entry(kHello, -0.5f, {{kHello, -0.5f}})};
    auto req = request(Endpoint::ChatCompletions, true);
    req.tokens_as_ids = true;
    auto d = parse(full_response(req, meta, *tok, {c}, Usage{}));
    const auto& e = d["choices"][0]["logprobs"]["content"][0];
    CHECK(str(e["token"]) == "token_id:259");
    CHECK(str(e["top_logprobs"][0]["token"]) == "token_id:259");
}

TEST_CASE("text that is not valid UTF-8 is written with U+FFFD, as valid JSON") {
    ChoiceOut c;
    c.text = "a\xF0\x9F";
    auto d = parse(full_response(request(Endpoint::Completions, false), meta, *tok, {c}, Usage{}));
    CHECK(str(d["choices"][0]["text"]) == "a\xEF\xBF\xBD");
    CHECK(d["choices"][0]["logprobs"].IsNull());
}

TEST_CASE("stream chunks: role first, usage null until the usage chunk") {
    auto req = request(Endpoint::ChatCompletions, false);
    req.stream = true;
    req.include_usage = true;
    ChoiceOut first;
    first.first_chunk = true;
    auto d = parse(stream_chunk(req, meta, *tok, &first, nullptr));
    CHECK(str(d["object"]) == "chat.completion.chunk");
    CHECK(str(d["choices"][0]["delta"]["role"]) == "assistant");
    CHECK(d["usage"].IsNull());
    ChoiceOut next;
    next.text = "x";
    d = parse(stream_chunk(req, meta, *tok, &next, nullptr));
    CHECK_FALSE(d["choices"][0]["delta"].HasMember("role"));
    CHECK(str(d["choices"][0]["delta"]["content"]) == "x");
    CHECK(d["choices"][0]["finish_reason"].IsNull());
    Usage u{4, 2};
    d = parse(stream_chunk(req, meta, *tok, nullptr, &u));
    CHECK(d["choices"].Size() == 0);
    CHECK(d["usage"]["prompt_tokens"].GetInt() == 4);
    CHECK(d["usage"]["completion_tokens"].GetInt() == 2);
    CHECK(d["usage"]["total_tokens"].GetInt() == 6);
    CHECK_FALSE(d["usage"].HasMember("prompt_tokens_details"));  // nothing came from the prefix cache
    Usage cached{40, 2, 32};
    d = parse(stream_chunk(req, meta, *tok, nullptr, &cached));
    CHECK(d["usage"]["prompt_tokens_details"]["cached_tokens"].GetInt() == 32);
    CHECK(d["usage"]["total_tokens"].GetInt() == 42);
    req.include_usage = false;
    d = parse(stream_chunk(req, meta, *tok, &next, nullptr));
    CHECK_FALSE(d.HasMember("usage"));
}

TEST_CASE("error_body is OpenAI's error object") {
    auto d = parse(error_body(ApiError(400, "bad \xFF value", "top_logprobs", "")));
    const auto& e = d["error"];
    CHECK(e.MemberCount() == 4);
    CHECK(str(e["message"]) == "bad \xEF\xBF\xBD value");
    CHECK(str(e["type"]) == "invalid_request_error");
    CHECK(str(e["param"]) == "top_logprobs");
    CHECK(e["code"].IsNull());
    d = parse(error_body(ApiError(503, "no", "", "engine_error", "server_error")));
    CHECK(d["error"]["param"].IsNull());
    CHECK(str(d["error"]["code"]) == "engine_error");
    CHECK(str(d["error"]["type"]) == "server_error");
}
