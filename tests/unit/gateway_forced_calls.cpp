// Forced tool calls in each family's own syntax (gateway/forced_calls.hpp): the tagged_json
// source per family, its grammar accepting the calls as the family's template renders them
// (and refusing other syntax), and the family's own parser reading the accepted text back.
#include "tool_fixtures.hpp"

#include "gateway/forced_calls.hpp"
#include "gateway/tool_request.hpp"
#include "grammar/compile.hpp"

using namespace loom;
using namespace loom::gateway;
using namespace loom::test;

namespace {

const std::vector<FunctionTool> kTools = {
    {"get_weather", R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"},
    {"get_time", ""}};

grammar::Grammar compiled(const std::string& source) {
    return grammar::compile(grammar::Constraint::from_source("tagged_json", source));
}

struct Case {
    const char* label;
    ToolFamily family;
    const char* template_file;  // picks the form within the family ("" for none)
    std::string two;            // get_weather(Paris) then get_time(CET), as the template renders them
    std::string one_time;       // get_time(UTC) alone
};

std::vector<Case> cases() {
    const std::string w = R"({"city": "Paris"})", t = R"({"tz": "CET"})", u = R"({"tz": "UTC"})";
    const std::string dsb = "<｜tool▁calls▁begin｜>", dse = "<｜tool▁calls▁end｜>", cb = "<｜tool▁call▁begin｜>",
                      ce = "<｜tool▁call▁end｜>", sep = "<｜tool▁sep｜>";
    return {
        {"hermes", ToolFamily::Hermes, "Qwen-Qwen2.5-7B-Instruct.jinja",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + w +
             "}\n</tool_call>\n<tool_call>\n{\"name\": "
             "\"get_time\", \"arguments\": " +
             t + "}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_time\", \"arguments\": " + u + "}\n</tool_call>"},
        {"llama3", ToolFamily::Llama3, "meta-llama-Llama-3.1-8B-Instruct.jinja",
         "{\"name\": \"get_weather\", \"parameters\": " + w + "}; {\"name\": \"get_time\", \"parameters\": " + t + "}",
         "{\"name\": \"get_time\", \"parameters\": " + u + "}"},
        {"mistral v11", ToolFamily::Mistral, "Mistral-Small-3.2-24B-Instruct-2506.jinja",
         "[TOOL_CALLS]get_weather[ARGS]" + w + "[TOOL_CALLS]get_time[ARGS]" + t, "[TOOL_CALLS]get_time[ARGS]" + u},
        {"mistral nemo", ToolFamily::Mistral, "mistralai-Mistral-Nemo-Instruct-2407.jinja",
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + w +
             ", \"id\": \"abcDEF123\"}, {\"name\": \"get_time\", \"arguments\": " + t + ", \"id\": \"ghiJKL456\"}]",
         "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": " + u + ", \"id\": \"000000000\"}]"},
        {"deepseek r1", ToolFamily::DeepSeek, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
         dsb + cb + "function" + sep + "get_weather\n```json\n" + w + "\n```" + ce + "\n" + cb + "function" + sep +
             "get_time\n```json\n" + t + "\n```" + ce + dse,
         dsb + cb + "function" + sep + "get_time\n```json\n" + u + "\n```" + ce + dse},
        {"deepseek v3.1", ToolFamily::DeepSeek, "deepseek-ai-DeepSeek-V3.1.jinja",
         dsb + cb + "get_weather" + sep + w + ce + cb + "get_time" + sep + t + ce + dse,
         dsb + cb + "get_time" + sep + u + ce + dse},
        {"granite", ToolFamily::Granite, "ibm-granite-granite-3.3-2B-Instruct.jinja",
         "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " + w +
             "}, {\"name\": \"get_time\", \"arguments\": " + t + "}]",
         "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": " + u + "}]"},
        {"command_r", ToolFamily::CommandR, "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
         "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": " + w +
             "},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", \"parameters\": " + t +
             "}\n]<|END_ACTION|>",
         "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_time\", \"parameters\": " + u +
             "}\n]<|END_ACTION|>"},
        {"gpt_oss", ToolFamily::GptOss, "openai-gpt-oss-120b.jinja",
         " to=functions.get_weather<|channel|>commentary json<|message|>" + w +
             "<|call|><|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>" + t + "<|call|>",
         " to=functions.get_time<|channel|>commentary json<|message|>" + u + "<|call|>"},
        {"kimi_k2", ToolFamily::KimiK2, "Kimi-K2-Instruct.jinja",
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" + w +
             "<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>" + t +
             "<|tool_call_end|><|tool_calls_section_end|>",
         "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:12<|tool_call_argument_begin|>" + u +
             "<|tool_call_end|><|tool_calls_section_end|>"},
        {"smollm3 (hermes)", ToolFamily::Hermes, "HuggingFaceTB-SmolLM3-3B.jinja",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + w +
             "}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": " + t + "}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_time\", \"arguments\": " + u + "}\n</tool_call>"},
    };
}

}  // namespace

TEST_CASE("forced calls: every family's own syntax, accepted by the grammar and read by its parser") {
    const std::string get_time = "get_time";
    const std::string generic = R"([{"name": "get_time", "parameters": {"tz": "UTC"}}])";
    for (const Case& c : cases()) {
        INFO(c.label);
        const std::string tmpl = template_text(c.template_file);
        REQUIRE(detect_tool_family(tmpl) == c.family);
        const std::string parallel = forced_call_source(c.family, tmpl, kTools, nullptr, true);
        const std::string single = forced_call_source(c.family, tmpl, kTools, nullptr, false);
        const std::string named = forced_call_source(c.family, tmpl, kTools, &get_time, true);
        REQUIRE_FALSE(parallel.empty());
        const grammar::Grammar gp = compiled(parallel), gs = compiled(single), gn = compiled(named);
        CHECK(gp.accepts(c.two));
        CHECK(gp.accepts(c.one_time));
        CHECK_FALSE(gs.accepts(c.two));  // parallel_tool_calls false: one call
        CHECK(gs.accepts(c.one_time));
        CHECK(gn.accepts(c.one_time));
        CHECK_FALSE(gn.accepts(c.two));    // a named function: only it, once
        CHECK_FALSE(gp.accepts(generic));  // not the generic JSON array
        CHECK_FALSE(gp.accepts("Sure. " + c.one_time));
        // get_weather's schema holds: its city is required.
        std::string no_city = c.two;
        no_city.replace(no_city.find(R"({"city": "Paris"})"), 17, "{}");
        CHECK_FALSE(gp.accepts(no_city));

        // The family's parser reads what the grammar accepted back into the calls.
        const Parsed p = parse_all_ways(maker(tools_of(c.family)), c.two);
        REQUIRE(p.calls.size() == 2);
        CHECK(p.calls[0].name == "get_weather");
        CHECK(p.calls[0].arguments == R"({"city": "Paris"})");
        CHECK(p.calls[1].name == "get_time");
        CHECK(p.calls[1].arguments == R"({"tz": "CET"})");
        CHECK(p.content.empty());
    }
    CHECK(forced_call_source(ToolFamily::None, "", kTools, nullptr, true).empty());
}

TEST_CASE("forced calls: the sources, exactly") {
    const std::string get_time = "get_time";
    CHECK(forced_call_source(ToolFamily::DeepSeek, "", kTools, &get_time, true) ==
          R"({"prefix":"<｜tool▁calls▁begin｜>","suffix":"<｜tool▁calls▁end｜>","repeat":false,"alternatives":[)"
          R"(["<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>",{"type":"object"},"<｜tool▁call▁end｜>"]]})");
    CHECK(forced_call_source(ToolFamily::GptOss, "", kTools, nullptr, false) ==
          R"({"separator":"<|start|>assistant","repeat":false,"alternatives":[)"
          R"([" to=functions.get_weather<|channel|>commentary json<|message|>",)"
          R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"<|call|>"],)"
          R"([" to=functions.get_time<|channel|>commentary json<|message|>",{"type":"object"},"<|call|>"]]})");
    CHECK(forced_call_source(ToolFamily::KimiK2, "", kTools, &get_time, false) ==
          R"({"prefix":"<|tool_calls_section_begin|>","suffix":"<|tool_calls_section_end|>","repeat":false,)"
          R"("alternatives":[["<|tool_call_begin|>functions.get_time:",{"type":"integer","minimum":0,"maximum":999},)"
          R"("<|tool_call_argument_begin|>",{"type":"object"},"<|tool_call_end|>"]]})");
    CHECK(forced_call_source(ToolFamily::Granite, "", kTools, &get_time, false) ==
          R"({"prefix":"<|tool_call|>[","suffix":"]","separator":", ","repeat":false,"alternatives":[)"
          R"(["{\"name\": \"get_time\", \"arguments\": ",{"type":"object"},"}"]]})");
}

TEST_CASE("forced calls: what the templates render for a call is what the grammar accepts") {
    const std::string msgs =
        R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "abcDEF123", "type": )"
        R"("function", "function": {"name": "get_time", "arguments": {"tz": "UTC"}}}]}])";
    const std::string tools =
        R"([{"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": {"type": "object"}}}])";
    struct R {
        const char *file, *before, *after;
    };
    for (const R& r : {R{"Qwen-Qwen2.5-7B-Instruct.jinja", "<|im_start|>assistant\n", "<|im_end|>"},
                       R{"meta-llama-Llama-3.1-8B-Instruct.jinja", "<|start_header_id|>assistant<|end_header_id|>\n\n",
                         "<|eot_id|>"},
                       R{"Mistral-Small-3.2-24B-Instruct-2506.jinja", "[/INST]", "</s>"},
                       R{"mistralai-Mistral-Nemo-Instruct-2407.jinja", "[/INST]", "</s>"},
                       R{"deepseek-ai-DeepSeek-V3.1.jinja", "<｜Assistant｜><think></think>", "<｜end▁of▁sentence｜>"},
                       R{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"},
                       R{"openai-gpt-oss-120b.jinja", "<|start|>assistant", "<|call|>"}}) {
        INFO(r.file);
        const std::string tmpl = template_text(r.file);
        // (gpt-oss's template wants no content key at all, DeepSeek R1's a null one.)
        std::string m = msgs;
        if (tmpl.find("<|channel|>") != std::string::npos) m.erase(m.find(R"("content": null, )"), 17);
        const std::string full = render(r.file, m, tools, false, "<s>", "</s>");
        std::string turn = between(full, r.before, r.after);
        if (std::string_view(r.after) == "<|call|>") turn += r.after;  // the call's end is the model's
        // Mistral Small's template renders the call's id ([CALL_ID] and 9 characters, not a
        // JSON value, so not in a tagged_json grammar); the model may leave it out.
        if (const size_t id = turn.find("[CALL_ID]"); id != std::string::npos) turn.erase(id, 9 + 9);
        INFO(turn);
        const std::vector<FunctionTool> one = {{"get_time", ""}};
        CHECK(compiled(forced_call_source(detect_tool_family(tmpl), tmpl, one, nullptr, false)).accepts(turn));
    }
}

TEST_CASE("forced calls after reasoning: the grammar applies from </think> on") {
    const std::string get_time = "get_time";
    const std::string tmpl = template_text("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
    // R1 with thinking on: the prompt ends inside <think>, so the output starts as reasoning.
    const std::string prompt =
        render("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", R"([{"role": "user", "content": "Hi"}])", "", true,
               "<｜begin▁of▁sentence｜>", "", R"({"enable_thinking": true})");
    OutputConstraint c{OutputConstraint::Kind::TaggedJson,
                       forced_call_source(ToolFamily::DeepSeek, tmpl, kTools, &get_time, true), "tool_choice"};
    reason_before_constraint(c, ReasoningFamily::Think, prompt);
    CHECK(c.reasoning_open.empty());
    CHECK(c.reasoning_close == "</think>");
    grammar::Constraint gc = grammar::Constraint::from_source("tagged_json", c.value);
    gc.reasoning = {c.reasoning_open, c.reasoning_close};
    const grammar::Grammar g = grammar::compile(gc);
    const std::string call =
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    const std::string thought = "The user greets me. <tool_call> {\"json\": [is free here]}\n</think>\n\n";
    CHECK(g.accepts(thought + call));
    CHECK(g.accepts("</think>" + call));
    CHECK_FALSE(g.accepts(call));                             // the reasoning must be closed first
    CHECK_FALSE(g.accepts("Hmm.</think>\n\n\n" + call));      // at most two whitespace bytes after it
    CHECK_FALSE(g.accepts("Hmm.</think>\n\nSure. " + call));  // then only the calls
    CHECK(g.accepts_prefix("Any text at all, even \xff invalid UTF-8 or </thin"));
    // The reasoning parser, told the output starts inside reasoning, gives the reasoning
    // its part and the rest to the family's parser.
    OutputOptions o = tools_of(ToolFamily::DeepSeek);
    o.reasoning = ReasoningFamily::Think;
    o.inside_reasoning = true;
    const Parsed p = parse_all_ways(maker(o), thought + call);
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].name == "get_time");
    CHECK(p.calls[0].arguments == "{}");
    CHECK(p.reasoning == "The user greets me. <tool_call> {\"json\": [is free here]}");
    CHECK(p.content.empty());
}

TEST_CASE("reason_before_constraint: where the reasoning block is, by template and thinking switch") {
    const std::string hi = R"([{"role": "user", "content": "Hi"}])";
    auto block = [&](const std::string& file, const std::string& kwargs, ReasoningFamily f = ReasoningFamily::Think) {
        OutputConstraint c{OutputConstraint::Kind::JsonSchema, "{}", "response_format"};
        reason_before_constraint(c, f, render(file, hi, "", true, "<s>", "", kwargs));
        return std::pair{c.reasoning_open, c.reasoning_close};
    };
    using P = std::pair<std::string, std::string>;
    // DeepSeek R1 and V3.1 with thinking on end inside <think>: the block starts at once.
    CHECK(block("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", R"({"enable_thinking": true})") == P{"", "</think>"});
    CHECK(block("deepseek-ai-DeepSeek-V3.1.jinja", R"({"thinking": true})") == P{"", "</think>"});
    // Thinking off: the prompt closed the block; the grammar applies from the first token.
    CHECK(block("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "") == P{"", ""});
    CHECK(block("deepseek-ai-DeepSeek-V3.1.jinja", "") == P{"", ""});
    CHECK(block("Qwen-Qwen3-0.6B.jinja", R"({"enable_thinking": false})") == P{"", ""});
    CHECK(block("HuggingFaceTB-SmolLM3-3B.jinja", R"({"enable_thinking": false})") == P{"", ""});
    // Qwen3 and SmolLM3 with thinking on: the model may open the block itself.
    CHECK(block("Qwen-Qwen3-0.6B.jinja", "") == P{"<think>", "</think>"});
    CHECK(block("HuggingFaceTB-SmolLM3-3B.jinja", "") == P{"<think>", "</think>"});
    // Other reasoning syntaxes keep the grammar from the first token.
    CHECK(block("ibm-granite-granite-3.3-2B-Instruct.jinja", "", ReasoningFamily::Granite) == P{"", ""});
    CHECK(block("Qwen-Qwen2.5-7B-Instruct.jinja", "", ReasoningFamily::None) == P{"", ""});

    // The optional block: straight to the JSON, or whitespace, <think>, reasoning, </think>.
    grammar::Constraint gc = grammar::Constraint::from_source("json_object", "");
    gc.reasoning = {"<think>", "</think>"};
    const grammar::Grammar g = grammar::compile(gc);
    CHECK(g.accepts("{\"a\": 1}"));
    CHECK(g.accepts("<think>\nShort.\n</think>\n\n{\"a\": 1}"));
    CHECK(g.accepts("\n<think></think>{}"));
    CHECK_FALSE(g.accepts("Short.</think>{}"));  // only after the open marker
    CHECK_FALSE(g.accepts("<think>Short.{}"));   // the block must close
}
