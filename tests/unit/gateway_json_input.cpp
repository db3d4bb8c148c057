// parse_json_body: the strict reading of request bodies (lone surrogates, repeated
// keys, invalid UTF-8, deep nesting) and the exact messages it refuses them with.
#include <catch2/catch.hpp>

#include <string>

#include "gateway/api_types.hpp"
#include "gateway/json_input.hpp"
#include "gateway/quote.hpp"

using loom::gateway::ApiError;
using loom::gateway::parse_json_body;

namespace {

// The message parse_json_body refuses `body` with ("" when it accepts it).
std::string refusal(const std::string& body) {
    rapidjson::Document d;
    try {
        parse_json_body(d, body);
    } catch (const ApiError& e) {
        CHECK(e.status == 400);
        CHECK(e.code.empty());
        return e.message;
    }
    return "";
}

}  // namespace

TEST_CASE("lone surrogates are refused, high or low; pairs are kept") {
    CHECK(refusal(R"({"prompt": "\ud800"})") ==
          "the request body is not valid JSON: The surrogate pair in string is invalid. (at byte 12)");
    CHECK(refusal(R"({"prompt": "a\udc00b"})") ==
          "the request body holds a lone UTF-16 surrogate (\\uD800..\\uDFFF without its pair) in a value 'a\xED\xB0\x80"
          "b'");
    CHECK(refusal(R"({"\udfff": 1})").find("in a key") != std::string::npos);
    CHECK(refusal(R"(["x", ["\udc00"]])").find("lone UTF-16 surrogate") != std::string::npos);
    rapidjson::Document d;
    parse_json_body(d, R"({"prompt": "\ud83d\ude00 \u00e9"})");
    CHECK(std::string(d["prompt"].GetString()) == "\xF0\x9F\x98\x80 \xC3\xA9");
}

TEST_CASE("a key given twice in one object is refused, in any object") {
    CHECK(refusal(R"({"max_tokens": 4, "max_tokens": -1})") ==
          "the request body repeats the key 'max_tokens' in one object");
    CHECK(refusal(R"({"messages": [{"role": "user", "content": "a", "role": "system"}]})") ==
          "the request body repeats the key 'role' in one object");
    CHECK(refusal(R"({"a": {"x": 1}, "b": {"x": 2}})").empty());  // the same key in two objects is fine
    std::string big = "{";
    for (int i = 0; i < 1000; ++i) big += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ", ";
    CHECK(refusal(big + "\"k500\": 0}") == "the request body repeats the key 'k500' in one object");
    const std::string long_key(1 << 20, 'k');
    const std::string msg = refusal("{\"" + long_key + "\": 1, \"" + long_key + "\": 2}");
    CHECK(msg == "the request body repeats the key '" + std::string(200, 'k') + "...' (1048576 bytes) in one object");
}

TEST_CASE("bytes that are not UTF-8 and malformed JSON are refused with the offset") {
    CHECK(refusal("{\"prompt\": \"\xff\"}") ==
          "the request body is not valid JSON: Invalid encoding in string. (at byte 12)");
    CHECK(refusal("{\"prompt\": \"\xED\xA0\x80\"}").find("Invalid encoding in string") != std::string::npos);
    CHECK(refusal(R"({"a": 1,})") ==
          "the request body is not valid JSON: Missing a name for object member. (at byte 8)");
    CHECK(refusal("").find("The document is empty") != std::string::npos);
}

TEST_CASE("nesting is limited without recursion") {
    auto nested = [](int depth) {
        return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']');
    };
    CHECK(refusal(nested(loom::gateway::kMaxJsonDepth)).empty());
    CHECK(refusal(nested(loom::gateway::kMaxJsonDepth + 1)) ==
          "the request body nests arrays and objects deeper than 128 levels");
    // Deep enough to overflow a recursive parser's stack: refused, not a crash.
    CHECK(refusal(nested(4 << 20)).find("deeper than 128 levels") != std::string::npos);
}

TEST_CASE("quoted() cuts long input at a character boundary and says how long it was") {
    using loom::gateway::quoted;
    CHECK(quoted("abc") == "'abc'");
    CHECK(quoted(std::string(300, 'x')) == "'" + std::string(200, 'x') + "...' (300 bytes)");
    // 199 ASCII bytes then a 2-byte character straddling byte 200: the cut goes before it.
    CHECK(quoted(std::string(199, 'x') + "\xC3\xA9" + std::string(10, 'y')) ==
          "'" + std::string(199, 'x') + "...' (211 bytes)");
    CHECK(loom::gateway::cut(std::string(7 << 20, 'm')) == std::string(200, 'm') + "... (7340032 bytes)");
}
