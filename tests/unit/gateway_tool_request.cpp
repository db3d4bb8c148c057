// The request side of issue 14: unknown members refused as OpenAI refuses them, no-op
// members accepted by name, tools/tool_choice/parallel_tool_calls validated, forced
// calls and response formats turned into a grammar constraint, chat_template_kwargs
// and reasoning_effort passed only to a template that reads them, and tool-call
// arguments made objects for the template; plus the JSON of split outputs.
#include <catch2/catch.hpp>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "gateway/api_types.hpp"
#include "gateway/known_params.hpp"
#include "gateway/response_json.hpp"
#include "gateway/tool_request.hpp"
#include "gateway_vocab.hpp"
#include "tool_fixtures.hpp"

using namespace loom;
using namespace loom::gateway;

namespace {

rapidjson::Document json(const std::string& s) {
    rapidjson::Document d;
    d.Parse(s.data(), s.size());
    REQUIRE_FALSE(d.HasParseError());
    return d;
}

std::string to_json(const rapidjson::Value& v) {
    rapidjson::StringBuffer b;
    rapidjson::Writer<rapidjson::StringBuffer> w(b);
    v.Accept(w);
    return b.GetString();
}

// The ApiError message that `f` throws ("" when it throws none).
template <class F>
std::string error_of(F f) {
    try {
        f();
    } catch (const ApiError& e) {
        CHECK(e.status == 400);
        return e.message;
    }
    return "";
}

std::string known_error(const std::string& body, ParamSet set) {
    const auto d = json(body);
    return error_of([&] { check_known_params(d, set); });
}

const std::string kTools = R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "get_time"}}])";

OutputRequest output_of(const std::string& body, ChatFormat fmt = {ToolFamily::Hermes, ReasoningFamily::None},
                        const std::string& tmpl = "{{ messages }}") {
    const auto d = json(body);
    return parse_output_request(d, true, fmt, tmpl);
}

std::string output_error(const std::string& body, ChatFormat fmt = {ToolFamily::Hermes, ReasoningFamily::None},
                         const std::string& tmpl = "{{ messages }}") {
    return error_of([&] { output_of(body, fmt, tmpl); });
}

}  // namespace

TEST_CASE("unknown members get OpenAI's 400; no-op members are accepted by name") {
    CHECK(known_error(R"({"model": "m", "messages": [], "foo": 1})", ParamSet::Chat) ==
          "Unrecognized request argument supplied: foo");
    CHECK(known_error(R"({"foo": 1, "bar": 2, "model": "m"})", ParamSet::Completions) ==
          "Unrecognized request arguments supplied: foo, bar");
    CHECK(known_error(R"({"model": "m", "prompt": "x", "user": "u1", "metadata": {"k": "v"}, "service_tier": "auto",
                         "store": false, "safety_identifier": "s", "prompt_cache_key": "p", "seed": null})",
                      ParamSet::Completions)
              .empty());
    CHECK(known_error(R"({"user": 3})", ParamSet::Chat) == "'user' must be a string");
    CHECK(known_error(R"({"metadata": {"k": 1}})", ParamSet::Chat) == "'metadata' must be an object of strings");
    CHECK(known_error(R"({"store": true})", ParamSet::Chat)
              .starts_with("'store' is only supported at its default (false)"));
    CHECK(known_error(R"({"store": true})", ParamSet::Responses).empty());  // the Responses endpoint decides
    CHECK(
        known_error(R"({"skip_special_tokens": false})", ParamSet::Chat).starts_with("'skip_special_tokens' is only"));
    CHECK(known_error(R"({"skip_special_tokens": true, "length_penalty": 1.0, "stop_token_ids": []})", ParamSet::Chat)
              .empty());
    CHECK(known_error(R"({"functions": []})", ParamSet::Chat) ==
          "'functions' is not supported: it is deprecated; use 'tools'");
    CHECK(known_error(R"({"suffix": "x"})", ParamSet::Completions).starts_with("'suffix' is not supported"));
    // The engine's prefix cache is shared: a salt that asks for isolation cannot be honoured.
    CHECK(known_error(R"({"cache_salt": "tenant-a"})", ParamSet::Chat).starts_with("'cache_salt' is not supported"));
    CHECK(known_error(R"({"messages": []})", ParamSet::Completions) ==
          "Unrecognized request argument supplied: messages");
    CHECK(known_error(R"({"prompt": "x"})", ParamSet::Chat) == "Unrecognized request argument supplied: prompt");
    // The names are the client's: each is cut, and only the first 10 are listed.
    const std::string long_name(5000, 'k');
    CHECK(known_error("{\"" + long_name + "\": 1}", ParamSet::Chat) ==
          "Unrecognized request argument supplied: " + long_name.substr(0, 200) + "... (5000 bytes)");
    std::string many = "{";
    for (int i = 0; i < 25; ++i) many += (i ? ", \"p" : "\"p") + std::to_string(i) + "\": 1";
    CHECK(known_error(many + ", \"" + long_name + "\": 1}", ParamSet::Completions) ==
          "Unrecognized request arguments supplied: p0, p1, p2, p3, p4, p5, p6, p7, p8, p9 and 16 more");
    CHECK(known_error(R"({"top_k": 2, "seed": 1, "background": false})", ParamSet::Responses).empty());
    CHECK(known_error(R"({"background": true})", ParamSet::Responses).starts_with("'background' is only supported"));
    CHECK(known_error(R"({"input": "x", "instructions": "y", "max_output_tokens": 5, "include": []})",
                      ParamSet::Responses)
              .empty());
}

TEST_CASE("every member the request path honours is known for its endpoint") {
    const char* both[] = {"model",
                          "max_tokens",
                          "temperature",
                          "top_p",
                          "n",
                          "stream",
                          "stream_options",
                          "logprobs",
                          "stop",
                          "presence_penalty",
                          "frequency_penalty",
                          "logit_bias",
                          "seed",
                          "top_k",
                          "min_p",
                          "repetition_penalty",
                          "allowed_token_ids",
                          "logprobs_mode",
                          "ignore_eos",
                          "return_tokens_as_token_ids",
                          "prompt_logprobs",
                          "return_token_ids",
                          "response_format",
                          "guided_json",
                          "guided_regex",
                          "guided_choice",
                          "guided_grammar",
                          "structured_outputs",
                          "user"};
    const char* chat_only[] = {
        "messages",        "max_completion_tokens", "top_logprobs",         "tools",
        "tool_choice",     "parallel_tool_calls",   "chat_template_kwargs", "add_generation_prompt",
        "reasoning_effort"};
    const char* completions_only[] = {"prompt", "echo", "best_of"};
    for (const char* n : both) {
        INFO(n);
        CHECK(known_error("{\"" + std::string(n) + "\": null}", ParamSet::Chat).empty());
        CHECK(known_error("{\"" + std::string(n) + "\": null}", ParamSet::Completions).empty());
    }
    for (const char* n : chat_only) CHECK(known_error("{\"" + std::string(n) + "\": null}", ParamSet::Chat).empty());
    for (const char* n : completions_only)
        CHECK(known_error("{\"" + std::string(n) + "\": null}", ParamSet::Completions).empty());
}

TEST_CASE("tools and tool_choice: validation and what the output parser is told") {
    OutputRequest r = output_of(R"({"tools": )" + kTools + "}");
    REQUIRE(r.tools.size() == 2);
    CHECK(r.tools[0].name == "get_weather");
    CHECK(r.tools[1].parameters.empty());
    CHECK(r.output.calls);  // tool_choice defaults to "auto" with tools
    CHECK(r.output.parallel);
    CHECK_FALSE(r.constraint);
    r = output_of(R"({"tools": )" + kTools + R"(, "tool_choice": "none", "parallel_tool_calls": false})");
    CHECK_FALSE(r.output.calls);
    CHECK_FALSE(r.output.parallel);
    CHECK_FALSE(output_of("{}").output.calls);

    CHECK(output_error(R"({"tools": {}})") == "'tools' must be an array");
    CHECK(output_error(R"({"tools": [{"type": "code_interpreter"}]})")
              .starts_with("tools[0] must be an object with \"type\": \"function\""));
    CHECK(output_error(R"({"tools": [{"type": "function", "function": {"name": "bad name"}}]})")
              .starts_with("tools[0].function.name must be 1 to 64"));
    CHECK(
        output_error(
            R"({"tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})") ==
        "two tools are named 'a'");
    CHECK(output_error(R"({"tool_choice": "required"})") == "'tool_choice' \"required\" needs 'tools'");
    CHECK(output_error(R"({"tools": )" + kTools +
                       R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}}})") ==
          "'tool_choice' names 'nope', which is not in 'tools'");
    CHECK(output_error(R"({"tools": )" + kTools + R"(, "tool_choice": "sometimes"})")
              .starts_with("'tool_choice' must be"));
    CHECK(output_error(R"({"tools": )" + kTools + R"(, "parallel_tool_calls": 1})") ==
          "'parallel_tool_calls' must be a boolean");
    // A model whose template shows no tool-call syntax cannot return calls.
    // The error names only the parsers that find calls (not "none", which would 400 too),
    // and the tool_choice values that work without one.
    CHECK(output_error(R"({"tools": )" + kTools + "}", ChatFormat{}) ==
          "this model's chat template shows no tool-call syntax loom can parse, so calls under tool_choice \"auto\" "
          "could not be returned; start loom-gateway with --tool-parser NAME (hermes, llama3, mistral, deepseek, "
          "granite, command_r, gpt_oss, kimi_k2) naming the syntax the model writes, or send tool_choice "
          "\"required\" or a named function (a JSON array of calls under a grammar)");
    CHECK(output_error(R"({"tools": )" + kTools + R"(, "tool_choice": "required"})", ChatFormat{}).empty());
    CHECK(output_error(R"({"tools": )" + kTools + R"(, "tool_choice": "none"})", ChatFormat{}).empty());
}

TEST_CASE("forced calls and response formats become one grammar constraint") {
    // A template with no tool-call syntax (ToolFamily::None): a JSON Schema of the call(s),
    // read by the constrained parser.
    const ChatFormat none{ToolFamily::None, ReasoningFamily::None};
    OutputRequest r = output_of(
        R"({"tools": )" + kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})",
        none);
    REQUIRE(r.constraint);
    CHECK(r.constraint->param == "tool_choice");
    CHECK(r.constraint->value == R"({"type":"object","properties":{"city":{"type":"string"}}})");
    CHECK(r.output.constrained);
    CHECK(r.output.function == "get_weather");
    r = output_of(R"({"tools": )" + kTools + R"(, "tool_choice": "required", "parallel_tool_calls": false})", none);
    REQUIRE(r.constraint);
    CHECK(
        r.constraint->value ==
        R"({"type":"array","minItems":1,"maxItems":1,"items":{"anyOf":[{"type":"object","properties":{"name":{"const":"get_weather"},)"
        R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}},"required":["name","parameters"]},)"
        R"({"type":"object","properties":{"name":{"const":"get_time"},"parameters":{"type":"object"}},"required":["name","parameters"]}]}})");
    CHECK_FALSE(r.output.function);
    CHECK(json(r.constraint->value).IsObject());  // it is JSON
    // Every family with a syntax (here llama3): the calls in it (tagged_json), read by its own
    // parser (each family's source: gateway_forced_calls.cpp).
    r = output_of(R"({"tools": )" + kTools + R"(, "tool_choice": "required"})",
                  ChatFormat{ToolFamily::Llama3, ReasoningFamily::None});
    REQUIRE(r.constraint);
    CHECK(r.constraint->kind == OutputConstraint::Kind::TaggedJson);
    CHECK(r.constraint->value.find(R"("separator":"; ","repeat":true)") != std::string::npos);
    CHECK_FALSE(r.output.constrained);
    // Hermes: the calls in its own syntax (tagged_json), read by the Hermes parser.
    r = output_of(R"({"tools": )" + kTools +
                  R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}}})");
    REQUIRE(r.constraint);
    CHECK(r.constraint->kind == OutputConstraint::Kind::TaggedJson);
    CHECK(r.constraint->value ==
          R"({"separator":"\n","repeat":false,"alternatives":[)"
          R"(["<tool_call>\n{\"name\": \"get_time\", \"arguments\": ",{"type":"object"},"}\n</tool_call>"]]})");
    CHECK_FALSE(r.output.constrained);
    CHECK(r.output.calls);
    r = output_of(R"({"tools": )" + kTools + R"(, "tool_choice": "required"})");
    REQUIRE(r.constraint);
    CHECK(r.constraint->value.find(R"("repeat":true)") != std::string::npos);
    CHECK(r.constraint->value.find(R"({\"name\": \"get_weather\", )") != std::string::npos);
    CHECK(json(r.constraint->value).IsObject());
    r = output_of(
        R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}}})");
    REQUIRE(r.constraint);
    CHECK(r.constraint->kind == OutputConstraint::Kind::JsonSchema);
    CHECK(r.constraint->value == R"({"type":"integer"})");
    CHECK_FALSE(output_of(R"({"response_format": {"type": "text"}})").constraint);
    CHECK(output_of(R"({"guided_choice": ["yes", "no"]})").constraint->value == R"(["yes","no"])");
    CHECK(output_of(R"({"tools": )" + kTools.substr(0, kTools.size() - 1) +
                    R"(, {"type": "function", "function": {"name": "s", "strict": true}}]})")
              .constraint->kind == OutputConstraint::Kind::ToolArguments);
    CHECK(output_error(R"({"response_format": {"type": "json_object"}, "guided_regex": "a+"})") ==
          "'guided_regex' and 'response_format' both constrain the output; give one of them");
    CHECK(output_error(R"({"response_format": {"type": "yaml"}})").starts_with("'response_format.type' must be"));
    // Keys OpenAI does not define, nested in response_format, are named as unknown top-level ones are.
    CHECK(output_error(R"({"response_format": {"type": "json_object", "schema": {}}})") ==
          "Unrecognized request argument supplied: response_format.schema");
    CHECK(output_error(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {},
          "strict": true, "description": "d", "shema": {}}}})") ==
          "Unrecognized request argument supplied: response_format.json_schema.shema");
    CHECK(output_error(R"({"guided_choice": []})") == "'guided_choice' must be a non-empty array of strings");
}

TEST_CASE("chat_template_kwargs and reasoning_effort reach only a template that reads them") {
    const std::string qwen3 = test::template_text("Qwen-Qwen3-0.6B.jinja");
    const std::string gpt_oss = test::template_text("openai-gpt-oss-120b.jinja");
    OutputRequest r = output_of(R"({"chat_template_kwargs": {"enable_thinking": false}})", {}, qwen3);
    CHECK(to_json(r.template_kwargs) == R"({"enable_thinking":false})");
    // A key the template never reads is dropped, as vLLM and transformers ignore it.
    CHECK(output_of(R"({"chat_template_kwargs": {"enable_thinking": false}})", {}, gpt_oss).template_kwargs.IsNull());
    r = output_of(R"({"chat_template_kwargs": {"enable_thinking": false, "no_such_key": 1}})", {}, qwen3);
    CHECK(to_json(r.template_kwargs) == R"({"enable_thinking":false})");
    r = output_of(R"({"reasoning_effort": "high", "chat_template_kwargs": {"model_identity": "I am loom."}})", {},
                  gpt_oss);
    CHECK(to_json(r.template_kwargs) == R"({"model_identity":"I am loom.","reasoning_effort":"high"})");
    CHECK(output_error(R"({"reasoning_effort": "high"})", {}, qwen3) ==
          "this model's chat template does not read reasoning_effort, so it would change nothing");
    CHECK(output_error(R"({"reasoning_effort": "max"})", {}, gpt_oss).starts_with("'reasoning_effort' must be"));
    CHECK(output_error(R"({"chat_template_kwargs": {"messages": []}})", {}, qwen3) ==
          "'chat_template_kwargs.messages' cannot replace the template's 'messages'");
    CHECK(output_of(R"({"chat_template_kwargs": {"x": 1}})", {}, "").template_kwargs.IsNull());
    CHECK(output_error(R"({"reasoning_effort": "low"})", {}, "") ==
          "this model has no chat template, so 'reasoning_effort' cannot be used");
    CHECK(output_of(R"({"chat_template_kwargs": {}})", {}, "").template_kwargs.IsNull());
    CHECK(template_reads("{% if enable_thinking %}", "enable_thinking"));
    CHECK_FALSE(template_reads("{{ my_enable_thinking_x }}", "enable_thinking"));
}

TEST_CASE("tool-call arguments become objects for the template; tool messages name their call") {
    const auto m = json(R"([{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
          {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
    const auto out = messages_for_template(m);
    CHECK(to_json(out[1]["tool_calls"][0]["function"]["arguments"]) == R"({"city":"Paris"})");
    CHECK(to_json(out[1]["tool_calls"][1]["function"]["arguments"]) == R"("not json")");
    const auto no_id = json(R"([{"role": "tool", "content": "x"}])");
    CHECK(error_of([&] { messages_for_template(no_id); }) ==
          "messages[0].tool_call_id must be a string (the call it answers)");
    const auto bad_args =
        json(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}])");
    CHECK(error_of([&] {
              messages_for_template(bad_args);
          }).starts_with("messages[0].tool_calls[0].function.arguments must be"));
}

TEST_CASE("response JSON of a split output: content null beside calls, extension logprob lists") {
    const auto tok = test::test_tokenizer();
    GenerationRequest req;
    req.endpoint = Endpoint::ChatCompletions;
    req.logprobs = true;
    auto entry = [&](int32_t id, float lp) {
        LogprobEntry e;
        e.token = id;
        e.bytes = tok->token_bytes(id);
        e.logprob = lp;
        return e;
    };
    ChoiceOut c;
    c.finish_reason = "tool_calls";
    c.reasoning = " Hello";
    c.reasoning_entries = {entry(test::kHello, -0.5f)};
    ToolCallDelta t;
    t.header = true;
    t.id = "call_x";
    t.name = "ld";
    t.name_entries = {entry(test::kLd, -1)};
    t.arguments = "!";
    t.arg_entries = {entry(test::kBang, -2)};
    c.tool_calls = {t};
    const auto d = json(full_response(req, {"chatcmpl-1", 1, "m"}, *tok, {c}, {}));
    const auto& ch = d["choices"][0];
    CHECK(ch["message"]["content"].IsNull());
    CHECK(std::string(ch["message"]["reasoning_content"].GetString()) == " Hello");
    CHECK(to_json(ch["message"]["tool_calls"]) ==
          R"([{"id":"call_x","type":"function","function":{"name":"ld","arguments":"!"}}])");
    CHECK(ch["logprobs"]["content"].Empty());
    CHECK(to_json(ch["logprobs"]["reasoning_content"][0]["bytes"]) == "[32,72,101,108,108,111]");
    CHECK(ch["logprobs"]["tool_calls"][0]["index"].GetInt() == 0);
    CHECK(std::string(ch["logprobs"]["tool_calls"][0]["name"][0]["token"].GetString()) == "ld");
    CHECK(ch["logprobs"]["tool_calls"][0]["arguments"][0]["logprob"].GetDouble() == -2.0);
    CHECK(std::string(ch["finish_reason"].GetString()) == "tool_calls");

    // A stream: the header delta carries index, id, type and name with empty arguments;
    // later deltas carry only index and an arguments fragment. No tool_calls: no key.
    ChoiceOut h;
    ToolCallDelta th = t;
    th.arguments.clear();
    th.arg_entries.clear();
    h.tool_calls = {th};
    auto chunk = json(stream_chunk(req, {"chatcmpl-1", 1, "m"}, *tok, &h, nullptr));
    CHECK(to_json(chunk["choices"][0]["delta"]) ==
          R"({"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"ld","arguments":""}}]})");
    ToolCallDelta ta;
    ta.index = 0;
    ta.arguments = "!";
    ta.arg_entries = {entry(test::kBang, -2)};
    h.tool_calls = {ta};
    chunk = json(stream_chunk(req, {"chatcmpl-1", 1, "m"}, *tok, &h, nullptr));
    CHECK(to_json(chunk["choices"][0]["delta"]) == R"({"tool_calls":[{"index":0,"function":{"arguments":"!"}}]})");
    ChoiceOut plain;
    plain.text = "x";
    const auto full = json(full_response(req, {"chatcmpl-1", 1, "m"}, *tok, {plain}, {}));
    CHECK_FALSE(full["choices"][0]["message"].HasMember("tool_calls"));
    CHECK_FALSE(full["choices"][0]["logprobs"].HasMember("tool_calls"));
}
