// grammar::compile_tagged_json and the tagged_json constraint (docs/protocol.md, "Grammars"):
// tool calls in a template family's syntax: a prefix, one or more items (each one of several
// alternatives of literal text and JSON values) joined by a separator, a suffix.
#include <catch2/catch.hpp>

#include <memory>

#include "grammar/compile.hpp"
#include "grammar/matcher.hpp"
#include "grammar_vocab.hpp"

using namespace loom::grammar;

namespace {

const char* kCity = R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],)"
                    R"("additionalProperties":false})";
const char* kTz = R"({"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]})";

TaggedPiece text(std::string s) { return {false, std::move(s)}; }
TaggedPiece schema(std::string s) { return {true, std::move(s)}; }

// Hermes: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one alternative a tool.
TaggedJson hermes(bool repeat) {
    TaggedJson t;
    t.separator = "\n";
    t.repeat = repeat;
    t.alternatives = {
        {text("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "), schema(kCity), text("}\n</tool_call>")},
        {text("<tool_call>\n{\"name\": \"get_time\", \"arguments\": "), schema(kTz), text("}\n</tool_call>")}};
    return t;
}

}  // namespace

TEST_CASE("tagged JSON: an alternative's literals and values; repeated with a separator", "[grammar]") {
    const Grammar one = compile_tagged_json(hermes(false));
    const std::string call =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
    CHECK(one.accepts(call));
    CHECK(one.accepts(time));
    CHECK(one.accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"\"}}\n</tool_call>"));
    CHECK_FALSE(one.accepts(call + "\n" + call));  // one call only
    // Each alternative's value follows its own schema.
    CHECK_FALSE(
        one.accepts("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    CHECK_FALSE(one.accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // required
    CHECK_FALSE(one.accepts("<tool_call>\n{\"name\": \"get_other\", \"arguments\": {}}\n</tool_call>"));
    CHECK_FALSE(one.accepts("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"));  // no tags
    CHECK(one.accepts_prefix("<tool_ca"));
    CHECK_FALSE(one.accepts_prefix("Sure, <tool_call>"));  // nothing before the first literal

    const Grammar many = compile_tagged_json(hermes(true));
    CHECK(many.accepts(call));
    CHECK(many.accepts(call + "\n" + time + "\n" + call));
    CHECK_FALSE(many.accepts(call + time));  // the separator is required
    CHECK_FALSE(many.accepts(""));
}

TEST_CASE("tagged JSON: prefix and suffix around the items (a JSON array after a marker)", "[grammar]") {
    // Granite: <|tool_call|>[{"name": "f", "arguments": {...}}, ...]
    TaggedJson t;
    t.prefix = "<|tool_call|>[";
    t.suffix = "]";
    t.separator = ", ";
    t.repeat = true;
    t.alternatives = {{text("{\"name\": \"get_weather\", \"arguments\": "), schema(kCity), text("}")}};
    const Grammar g = compile_tagged_json(t);
    const std::string item = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}";
    CHECK(g.accepts("<|tool_call|>[" + item + "]"));
    CHECK(g.accepts("<|tool_call|>[" + item + ", " + item + "]"));
    CHECK_FALSE(g.accepts("<|tool_call|>[]"));
    CHECK_FALSE(g.accepts("<|tool_call|>[" + item));  // the suffix is required
    CHECK_FALSE(g.accepts("[" + item + "]"));
    t.repeat = false;
    CHECK_FALSE(compile_tagged_json(t).accepts("<|tool_call|>[" + item + ", " + item + "]"));
}

TEST_CASE("tagged JSON: the name outside the JSON, and several values in one item", "[grammar]") {
    // DeepSeek V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
    TaggedJson d;
    d.prefix = "<｜tool▁calls▁begin｜>";
    d.suffix = "<｜tool▁calls▁end｜>";
    d.repeat = true;
    d.alternatives = {
        {text("<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"), schema(kCity), text("<｜tool▁call▁end｜>")},
        {text("<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>"), schema(kTz), text("<｜tool▁call▁end｜>")}};
    const Grammar g = compile_tagged_json(d);
    const std::string w = "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Rome\"}<｜tool▁call▁end｜>";
    const std::string z = "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\":\"UTC\"}<｜tool▁call▁end｜>";
    CHECK(g.accepts("<｜tool▁calls▁begin｜>" + w + z + "<｜tool▁calls▁end｜>"));
    CHECK_FALSE(
        g.accepts("<｜tool▁calls▁begin｜>" +
                  std::string("<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Rome\"}<｜tool▁call▁end｜>") +
                  "<｜tool▁calls▁end｜>"));

    // Mistral Nemo: each call's arguments and then a 9-character id, two values in one item.
    TaggedJson m;
    m.prefix = "[TOOL_CALLS][";
    m.suffix = "]";
    m.alternatives = {{text("{\"name\": \"get_time\", \"arguments\": "), schema(kTz), text(", \"id\": "),
                       schema(R"({"type":"string","pattern":"^[A-Za-z0-9]{9}$"})"), text("}")}};
    const Grammar n = compile_tagged_json(m);
    CHECK(n.accepts("[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": \"abcDEF123\"}]"));
    CHECK_FALSE(n.accepts("[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": \"abc\"}]"));

    // Each schema compiles on its own: its $ref "#..." points into itself.
    TaggedJson r;
    r.alternatives = {
        {text("A"),
         schema(R"({"$defs":{"n":{"type":"integer"}},"type":"object","properties":{"x":{"$ref":"#/$defs/n"}},)"
                R"("required":["x"]})")},
        {text("B"), schema(R"({"type":"array","items":{"$ref":"#"},"maxItems":2})")}};
    const Grammar rg = compile_tagged_json(r);
    CHECK(rg.accepts("A{\"x\": 3}"));
    CHECK_FALSE(rg.accepts("A{\"x\": \"3\"}"));
    CHECK(rg.accepts("B[[],[[]]]"));
}

TEST_CASE("tagged JSON: what does not compile", "[grammar]") {
    TaggedJson t;
    CHECK_THROWS_AS(compile_tagged_json(t), GrammarError);  // no alternatives
    t.alternatives = {{}};
    CHECK_THROWS_AS(compile_tagged_json(t), GrammarError);  // an empty one
    t.alternatives = {{text("\xff")}};
    CHECK_THROWS_AS(compile_tagged_json(t), GrammarError);
    t.alternatives = {{text("a")}};
    t.suffix = "\xff";
    CHECK_THROWS_AS(compile_tagged_json(t), GrammarError);
    t.suffix.clear();
    t.alternatives = {{text("a"), schema(R"({"not":{}})")}};
    CHECK_THROWS_AS(compile_tagged_json(t), SchemaError);
}

TEST_CASE("tagged JSON: a token spanning a literal and a value is allowed when the whole token fits", "[grammar]") {
    // Byte-level BPE: `{"` is one token, spanning the end of `[` (the prefix) and the
    // value's opening; `"}` the end of the value and the literal `}` after it.
    const loom::test::TestVocab v = loom::test::load_test_vocab("gpt-2");
    const auto& vocab = v.tok->vocab();
    const int32_t brace_quote = vocab.find("{\""), quote_brace = vocab.find("\"}"), bracket = vocab.find("[");
    REQUIRE(brace_quote >= 0);
    REQUIRE(quote_brace >= 0);
    REQUIRE(bracket >= 0);
    TaggedJson t;
    t.prefix = "[";
    t.suffix = "]";
    t.alternatives = {{text("{\"a\":"), schema(R"({"type":"string"})"), text("}")}};
    auto a = std::make_shared<const TokenAutomaton>(compile_tagged_json(t, JsonOptions{.compact = true}), v.bytes);
    Matcher m(a);
    std::vector<uint32_t> mask(m.mask_words());
    auto bit = [&](int32_t id) { return (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u; };
    m.fill_mask(mask);
    CHECK(bit(bracket));
    CHECK_FALSE(bit(brace_quote));  // the prefix first
    REQUIRE(m.advance(bracket));
    m.fill_mask(mask);
    CHECK(bit(brace_quote));  // the literal `{"a":` starts with it
    REQUIRE(m.advance(brace_quote));
    REQUIRE(m.advance_bytes("a\":\"x"));
    m.fill_mask(mask);
    CHECK(bit(quote_brace));  // closes the string value and writes the literal `}`
    REQUIRE(m.advance(quote_brace));
    REQUIRE(m.advance_bytes("]"));
    CHECK(m.is_done());
}

TEST_CASE("the tagged_json source: prefix, suffix, separator, repeat and alternatives", "[grammar]") {
    const std::string src =
        std::string(R"({"prefix":"<p>","suffix":"</p>","separator":";","repeat":true,"alternatives":[["A=",)") + kCity +
        R"(,"."],["B=",true]]})";
    const Constraint c = Constraint::from_source("tagged_json", src);
    CHECK(c.kind == Constraint::Kind::TaggedJson);
    CHECK(c.tagged.prefix == "<p>");
    CHECK(c.tagged.suffix == "</p>");
    CHECK(c.tagged.separator == ";");
    CHECK(c.tagged.repeat);
    REQUIRE(c.tagged.alternatives.size() == 2);
    REQUIRE(c.tagged.alternatives[0].size() == 3);
    CHECK_FALSE(c.tagged.alternatives[0][0].schema);
    CHECK(c.tagged.alternatives[0][1].schema);
    CHECK(c.tagged.alternatives[0][1].text == kCity);
    CHECK(c.tagged.alternatives[1][1].text == "true");
    const Grammar g = compile(c);
    CHECK(g.accepts("<p>A={\"city\":\"x\"}.;B=[1, \"y\"]</p>"));
    CHECK_FALSE(g.accepts("<p>A={\"city\":\"x\"}</p>"));
    // Left out: prefix, suffix and separator "", repeat false.
    const Constraint bare = Constraint::from_source("tagged_json", R"({"alternatives":[["x"]]})");
    CHECK(compile(bare).accepts("x"));
    CHECK_FALSE(compile(bare).accepts("xx"));
    // to_text and from_text round trip it.
    const Constraint back = Constraint::from_text(c.to_text());
    CHECK(back.kind == Constraint::Kind::TaggedJson);
    CHECK(back.tagged.prefix == c.tagged.prefix);
    CHECK(back.tagged.separator == c.tagged.separator);
    CHECK(back.tagged.alternatives[0][1].text == kCity);
    CHECK(back.tagged.alternatives[0][2].text == ".");
    CHECK(back.tagged.repeat);
    for (const char* bad : {"[]", "{}", R"({"alternatives":[]})", R"({"alternatives":[[]]})",
                            R"({"alternatives":[[1]]})", R"({"alternatives":["x"]})",
                            R"({"prefix":1,"alternatives":[["x"]]})", R"({"alternatives":[["x"]],"extra":1})",
                            R"({"begin":"a","end":"b","separator":"","repeat":false,"schema":{}})"})
        CHECK_THROWS_WITH(Constraint::from_source("tagged_json", bad), Catch::Contains("tagged_json: wants"));
}
