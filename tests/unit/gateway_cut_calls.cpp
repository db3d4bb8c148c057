// Output cut by max_tokens (SpanParser::feed's `cut`): text held back because it may begin a
// marker or a tool call is no part's, never content or reasoning; a call cut after its
// complete name is a call (empty arguments); a call cut inside its arguments keeps what was
// written. Each family, parsed whole, byte by byte and in random pieces alike; the same
// texts ended otherwise (a stop) keep today's rule: what never became a call is content.
#include "tool_fixtures.hpp"

#include <optional>

#include "gateway/tool_parser.hpp"

using namespace loom;
using namespace loom::gateway;
using namespace loom::test;

namespace {

struct Cut {
    std::string text;
    std::string content;                              // cut by max_tokens
    std::vector<std::string> names;                   // the calls, cut by max_tokens
    std::string last_arguments = "";                  // the last call's arguments, cut by max_tokens
    std::optional<std::string> content_if_stopped{};  // the same text ended by a stop (nullopt: the text)
    size_t calls_if_stopped = 0;
};

void check_cut(const OutputOptions& o, const Cut& c) {
    INFO(c.text);
    const Parsed cut = parse_all_ways(maker(o), c.text, true);
    CHECK(cut.content == c.content);
    REQUIRE(cut.calls.size() == c.names.size());
    for (size_t i = 0; i < c.names.size(); ++i) {
        CHECK(cut.calls[i].name == c.names[i]);
        CHECK(cut.calls[i].name_text == c.names[i]);
    }
    if (!c.names.empty()) CHECK(cut.calls.back().arguments == c.last_arguments);
    const Parsed stopped = parse_all_ways(maker(o), c.text);
    CHECK(stopped.content == c.content_if_stopped.value_or(c.text));
    CHECK(stopped.calls.size() == c.calls_if_stopped);
}

const std::string kDsBegin = "<｜tool▁calls▁begin｜>", kDsCall = "<｜tool▁call▁begin｜>", kDsSep = "<｜tool▁sep｜>",
                  kDsEnd = "<｜tool▁call▁end｜>";

}  // namespace

TEST_CASE("cut calls: hermes (tool_choice required, parallel calls)") {
    const OutputOptions o = tools_of(ToolFamily::Hermes);
    const std::string one =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    // The two cases: a partial start marker, and a name with no arguments yet.
    check_cut(o, {"I'll check.\n<tool_ca", "I'll check.", {}});
    check_cut(o, {"<tool_call>\n{\"name\": \"get_time\", \"arguments", "", {"get_time"}, ""});
    check_cut(o, {"<tool_call>\n{\"name\": \"get_ti", "", {}});
    check_cut(o, {"<tool_call>\n{\"arguments\": {}, \"name\": \"get_ti", "", {}});
    // After a complete call: the next one's envelope is dropped or is a call.
    check_cut(o, {one + "\n<tool_ca", "", {"get_weather"}, "{\"city\": \"Paris\"}", "<tool_ca", 1});
    check_cut(o, {one + "\n<tool_call>\n{\"name\": \"get_time\", \"arguments",
                  "",
                  {"get_weather", "get_time"},
                  "",
                  "<tool_call>\n{\"name\": \"get_time\", \"arguments",
                  1});
    // Cut inside the arguments: the call keeps what was written (as before).
    check_cut(o, {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"C",
                  "",
                  {"get_time"},
                  "{\"tz\": \"C",
                  std::string(),
                  1});
    // A name that cannot be a function's is no call; cut, it is dropped all the same.
    check_cut(o, {"Hi <tool_call>\n{\"name\": \"get time\", \"arguments", "Hi", {}});
}

TEST_CASE("cut calls: the other families") {
    check_cut(tools_of(ToolFamily::Llama3), {"{\"name\": \"get_time\", \"parameters", "", {"get_time"}, ""});
    check_cut(tools_of(ToolFamily::Llama3), {"<|python_ta", "", {}});
    check_cut(tools_of(ToolFamily::Granite), {"<|tool_call|>[{\"name\": \"get_time\"", "", {"get_time"}, ""});
    check_cut(tools_of(ToolFamily::Granite), {"Sure.\n<|tool_call|>[", "Sure.", {}});
    // Mistral Small 3.2: the name is complete at [ARGS] (or [CALL_ID]); Nemo's JSON list.
    const OutputOptions m = tools_of(ToolFamily::Mistral);
    check_cut(m, {"[TOOL_CALLS]get_time[AR", "", {"get_time"}, ""});
    check_cut(m, {"[TOOL_CALLS]get_time[CALL_ID]abc", "", {"get_time"}, ""});
    check_cut(m, {"[TOOL_CALLS]get_ti", "", {}});
    check_cut(m, {"[TOOL_CALLS][{\"name\": \"get_time\", \"arguments", "", {"get_time"}, ""});
    // DeepSeek V3.1: the name is before the separator; R1: on the line after "function".
    const OutputOptions d = tools_of(ToolFamily::DeepSeek);
    check_cut(d, {kDsBegin + kDsCall + "get_time" + kDsSep, "", {"get_time"}, ""});
    check_cut(d, {kDsBegin + kDsCall + "get_ti", "", {}});
    check_cut(d, {kDsBegin + kDsCall + "function" + kDsSep + "get_time\n", "", {"get_time"}, ""});
    check_cut(d, {kDsBegin + kDsCall + "function" + kDsSep + "get_time\n```js", "", {"get_time"}, ""});
    check_cut(d, {kDsBegin + kDsCall + "function" + kDsSep, "", {}});
    check_cut(d, {kDsBegin + kDsCall + "function" + kDsSep + "get_ti", "", {}});
    // Broken arguments run to the call's end marker; cut, a partial end marker is no part's.
    check_cut(d, {"OK." + kDsBegin + kDsCall + "get_time" + kDsSep + "{\"tz\" 1}" + kDsEnd.substr(0, 4),
                  "OK.",
                  {"get_time"},
                  "{\"tz\" 1}",
                  "OK.",
                  1});
    // Kimi K2: the V3.1 form with its own markers; the header "functions.NAME:IDX" holds the name.
    const OutputOptions k = tools_of(ToolFamily::KimiK2);
    const std::string kb = "<|tool_calls_section_begin|><|tool_call_begin|>";
    check_cut(k, {kb + "functions.get_time:0<|tool_call_argument_begin|>", "", {"get_time"}, ""});
    check_cut(k, {kb + "functions.get_time:0<|tool_call_argu", "", {}});
    // Forced calls without a template syntax: a JSON list of {"name", "parameters"}.
    OutputOptions c;
    c.constrained = true;
    c.calls = true;
    check_cut(c, {"[{\"name\": \"get_time\", \"param", "", {"get_time"}, ""});
}

TEST_CASE("cut calls: after reasoning, and reasoning cut at its close marker") {
    OutputOptions o = tools_of(ToolFamily::Hermes);
    o.reasoning = ReasoningFamily::Think;
    const Parsed p =
        parse_all_ways(maker(o), "<think>Weather.</think>\n\nOK.\n<tool_call>\n{\"name\": \"get_time\", \"argu", true);
    CHECK(p.reasoning == "Weather.");
    CHECK(p.content == "OK.");
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].name == "get_time");
    CHECK(p.calls[0].arguments.empty());
    // A partial close marker (and the whitespace before it) is no part's.
    o.inside_reasoning = true;
    Parsed r = parse_all_ways(maker(o), "Let me think.\n</thi", true);
    CHECK(r.reasoning == "Let me think.");
    CHECK(r.content.empty());
    CHECK(r.labels == std::string(13, 'r') + std::string(6, 'm'));
    r = parse_all_ways(maker(o), "Let me think.\n</thi");  // ended by a stop: as before
    CHECK(r.reasoning == "Let me think.\n</thi");
    // Only reasoning, no tools: the same.
    OutputOptions t;
    t.reasoning = ReasoningFamily::Think;
    t.inside_reasoning = true;
    CHECK(parse_all_ways(maker(t), "Hmm </th", true).reasoning == "Hmm");
}
