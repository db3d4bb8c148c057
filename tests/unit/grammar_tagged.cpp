// grammar::compile_tagged_json and the tagged_json constraint (docs/protocol.md, "Grammars"):
// tool calls in a template family's syntax, e.g. Hermes' <tool_call>\n{...}\n</tool_call>.
#include <catch2/catch.hpp>

#include "grammar/compile.hpp"

using namespace loom::grammar;

namespace {

const char* kCall = R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":)"
                    R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],)"
                    R"("additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false})";

}  // namespace

TEST_CASE("tagged JSON: begin, a value of the schema, end; repeated with a separator", "[grammar]") {
    const Grammar one = compile_tagged_json("<tool_call>\n", kCall, "\n</tool_call>", false, "\n");
    const std::string call =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    CHECK(one.accepts(call));
    CHECK(one.accepts("<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"\"}}\n</tool_call>"));
    CHECK_FALSE(one.accepts(call + "\n" + call));  // one call only
    CHECK_FALSE(
        one.accepts("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    CHECK_FALSE(one.accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));  // required
    CHECK_FALSE(one.accepts("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"));          // no tags
    CHECK(one.accepts_prefix("<tool_ca"));
    CHECK_FALSE(one.accepts_prefix("Sure, <tool_call>"));  // nothing before the first tag

    const Grammar many = compile_tagged_json("<tool_call>\n", kCall, "\n</tool_call>", true, "\n");
    CHECK(many.accepts(call));
    CHECK(many.accepts(call + "\n" + call + "\n" + call));
    CHECK_FALSE(many.accepts(call + call));  // the separator is required
    CHECK_FALSE(many.accepts(""));

    CHECK_THROWS_AS(compile_tagged_json("\xff", kCall, "", false, ""), GrammarError);
    CHECK_THROWS_AS(compile_tagged_json("", R"({"not":{}})", "", false, ""), SchemaError);
}

TEST_CASE("the tagged_json source: an object of tags, repeat and schema", "[grammar]") {
    const std::string src =
        std::string(R"({"begin":"<tool_call>\n","end":"\n</tool_call>","separator":"\n","repeat":true,"schema":)") +
        kCall + "}";
    const Constraint c = Constraint::from_source("tagged_json", src);
    CHECK(c.kind == Constraint::Kind::TaggedJson);
    CHECK(c.begin == "<tool_call>\n");
    CHECK(c.end == "\n</tool_call>");
    CHECK(c.separator == "\n");
    CHECK(c.repeat);
    CHECK(compile(c).accepts("<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}\n</tool_call>"));
    // to_text and from_text round trip it.
    const Constraint back = Constraint::from_text(c.to_text());
    CHECK(back.kind == Constraint::Kind::TaggedJson);
    CHECK(back.begin == c.begin);
    CHECK(back.text == c.text);
    CHECK(back.repeat);
    for (const char* bad : {"[]", "{}", R"({"begin":1,"schema":{}})", R"({"schema":{},"extra":1})", R"({"begin":"a"})"})
        CHECK_THROWS_WITH(Constraint::from_source("tagged_json", bad), Catch::Contains("tagged_json: wants"));
}
