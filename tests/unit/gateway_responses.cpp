// The Responses API on stories260K's tokenizer with Qwen2.5's chat template (hermes tool
// calls): a body's tools, tool_choice, text.format and function_call /
// function_call_output input items become the chat request they stand for (the same
// prompt tokens as that chat request, the same constraint); errors name the Responses
// fields; and the output items and events of ResponsesStream for content, a call and a
// cut output.
#include <catch2/catch.hpp>

#include <rapidjson/document.h>

#include "gateway/chat_prompt.hpp"
#include "gateway/responses_json.hpp"
#include "gateway/serving_chat.hpp"
#include "gateway/serving_responses.hpp"
#include "model/gguf/gguf.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "test_paths.hpp"
#include "tool_fixtures.hpp"

using namespace loom;
using namespace loom::gateway;

namespace {

struct Qwen {
    std::unique_ptr<model::Tokenizer> tok;
    std::unique_ptr<ChatRenderer> chat;
    std::string tmpl;
    Qwen() {
        const auto f = model::GgufFile::open(test::shared_path("models/stories260K.gguf"));
        tok = model::Tokenizer::from_gguf(f);
        tmpl = test::template_text("Qwen-Qwen2.5-7B-Instruct.jinja");
        model::Vocab v = tok->vocab();
        v.chat_template = tmpl;
        chat = std::make_unique<ChatRenderer>(v);
    }
};

const Qwen& qwen() {
    static const Qwen q;
    return q;
}

ModelContext context() {
    ModelContext ctx;
    ctx.model_id = std::string("m");  // (a plain literal trips GCC 12's -Wrestrict)
    ctx.tokenizer = qwen().tok.get();
    ctx.n_ctx = 4096;
    const ChatRenderer* c = qwen().chat.get();
    ctx.template_adds_bos = true;
    ctx.render_chat = [c](const rapidjson::Value& m, const rapidjson::Value* t, bool g, const rapidjson::Value* k) {
        return c->render(m, t, g, k);
    };
    ctx.chat_format.tools = ToolFamily::Hermes;
    ctx.chat_template = qwen().tmpl;
    return ctx;
}

ApiError error_of(const std::string& body) {
    try {
        build_responses_request(body, context());
    } catch (const ApiError& e) { return e; }
    return ApiError(0, "no error");
}

const char* kGetTime =
    R"({"type": "function", "name": "get_time", "description": "the time", "parameters": {"type": "object", )"
    R"("properties": {"tz": {"type": "string"}}, "required": ["tz"]}})";

}  // namespace

TEST_CASE("responses: tools, tool_choice and input items are chat's, prompt and constraint alike") {
    const std::string tools = std::string("[") + kGetTime + "]";
    const std::string chat_tools =
        R"([{"type": "function", "function": {"name": "get_time", "description": "the time", "parameters": )"
        R"({"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}])";
    const GenerationRequest r = build_responses_request(
        R"({"input": [{"role": "user", "content": "Time?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": "{\"tz\": \"UTC\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "12:00"}],
            "tools": )" +
            tools + R"(, "tool_choice": {"type": "function", "name": "get_time"}, "parallel_tool_calls": false})",
        context());
    const GenerationRequest c = build_chat_request(
        R"({"messages": [{"role": "user", "content": "Time?"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
              "function": {"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}],
            "tools": )" +
            chat_tools +
            R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}}, "parallel_tool_calls": false})",
        context());
    CHECK(r.endpoint == Endpoint::Responses);
    CHECK(r.prompts == c.prompts);
    const std::string text = qwen().tok->decode(r.prompts.at(0));
    CHECK(text.find("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>") !=
          std::string::npos);
    CHECK(text.find("<tool_response>\n12:00\n</tool_response>") != std::string::npos);
    REQUIRE(r.constraint);
    CHECK(r.constraint->kind == OutputConstraint::Kind::TaggedJson);
    CHECK(r.constraint->value == c.constraint->value);
    CHECK(r.output.calls);
    CHECK_FALSE(r.output.parallel);
    // The members the response object echoes, as sent.
    rapidjson::Document echoed;
    echoed.Parse(r.responses_echo.tools.c_str());
    rapidjson::Document sent;
    sent.Parse(tools.c_str());
    CHECK(echoed == sent);
    CHECK(r.responses_echo.tool_choice == R"({"type":"function","name":"get_time"})");
    CHECK(r.responses_echo.text_format == R"({"type":"text"})");
}

TEST_CASE("responses: text.format json_schema and json_object are chat's response_format") {
    GenerationRequest r = build_responses_request(
        R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "p", "strict": true,
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})",
        context());
    REQUIRE(r.constraint);
    CHECK(r.constraint->kind == OutputConstraint::Kind::JsonSchema);
    CHECK(r.constraint->value == R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
    CHECK(r.responses_echo.text_format.starts_with(R"({"type":"json_schema","name":"p")"));
    r = build_responses_request(R"({"input": "x", "text": {"format": {"type": "json_object"}}})", context());
    REQUIRE(r.constraint);
    CHECK(r.constraint->value == R"({"type":"object"})");
    r = build_responses_request(R"({"input": "x", "text": {"format": {"type": "text"}}})", context());
    CHECK_FALSE(r.constraint);
}

TEST_CASE("responses: errors name the Responses fields") {
    ApiError e = error_of(R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}, "nme": "p"}}})");
    CHECK(e.status == 400);
    CHECK(e.param == "text.format.nme");
    CHECK(e.message == "Unrecognized request argument supplied: text.format.nme");
    e = error_of(R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}})");
    CHECK(e.param == "text.format");
    CHECK(e.message == "'text.format.name' must be a string");
    e = error_of(R"({"input": "x", "text": {"format": {"type": "yaml"}}})");
    CHECK(e.param == "text.format");
    e = error_of(R"({"input": "x", "tools": [{"type": "function", "name": "a b"}]})");
    CHECK(e.param == "tools[0].name");
    CHECK(e.message == "tools[0].name must be 1 to 64 letters, digits, underscores or dashes");
    e = error_of(R"({"input": "x", "tools": [{"type": "web_search"}]})");
    CHECK(e.param == "tools[0].type");
    e = error_of(R"({"input": "x", "tools": [{"type": "function", "name": "f", "function": {}}]})");
    CHECK(e.param == "tools[0].function");
    e = error_of(std::string(R"({"input": "x", "tools": [)") + kGetTime + R"(], "tool_choice": {"type": "mcp"}})");
    CHECK(e.param == "tool_choice");
    e = error_of(std::string(R"({"input": "x", "tools": [)") + kGetTime +
                 R"(], "tool_choice": {"type": "function", "name": "nope"}})");
    CHECK(e.message == "'tool_choice' names 'nope', which is not in 'tools'");
    e = error_of(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})");
    CHECK(e.param == "input[0].call_id");
    e = error_of(R"({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]})");
    CHECK(e.param == "input[0].output");
    e = error_of(R"({"input": [{"type": "item_reference", "id": "x"}]})");
    CHECK(e.param == "input[0].type");
    // stream_options: the Responses API's one member, with stream only; chat's others are refused.
    e = error_of(R"({"input": "x", "stream": true, "stream_options": {"include_usage": true}})");
    CHECK(e.param == "stream_options.include_usage");
    CHECK(e.message == "Unrecognized request argument supplied: stream_options.include_usage");
    e = error_of(R"({"input": "x", "stream_options": {"include_obfuscation": false}})");
    CHECK(e.message == "'stream_options' is only allowed when 'stream' is true");
    e = error_of(R"({"input": "x", "stream": true, "stream_options": {"include_obfuscation": 1}})");
    CHECK(e.param == "include_obfuscation");  // as on chat (json_fields.hpp names the member)
    CHECK_NOTHROW(build_responses_request(
        R"({"input": "x", "stream": true, "stream_options": {"include_obfuscation": true}})", context()));
}

TEST_CASE("responses stream: a message, then a call; items and events in order, the object agrees") {
    GenerationRequest req;
    req.endpoint = Endpoint::Responses;
    const ResponseMeta meta{"resp_00ab", 1700000000, "m"};
    ResponsesStream s(req, meta, *qwen().tok);
    std::vector<std::string> types;
    auto take = [&](const std::vector<ResponsesEvent>& evs) {
        for (const auto& [type, data] : evs) {
            rapidjson::Document d;
            d.Parse(data.c_str());
            REQUIRE_FALSE(d.HasParseError());
            CHECK(d["sequence_number"].GetInt64() == static_cast<int64_t>(types.size()));
            CHECK(std::string(d["type"].GetString()) == type);
            types.push_back(type);
        }
    };
    take(s.begin());
    ChoiceOut text;
    text.text = "Let me";
    take(s.add(text));
    text.text = " check.";
    take(s.add(text));
    ChoiceOut header;
    ToolCallDelta h;
    h.index = 0;
    h.header = true;
    h.id = "call_x";
    h.name = "get_time";
    header.tool_calls.push_back(h);
    take(s.add(header));
    for (const char* piece : {"{\"tz\": ", "\"UTC\"}"}) {
        ChoiceOut args;
        ToolCallDelta d;
        d.index = 0;
        d.arguments = piece;
        args.tool_calls.push_back(d);
        take(s.add(args));
    }
    Usage u;
    u.prompt_tokens = 10;
    u.completion_tokens = 7;
    take(s.end(std::string("tool_calls"), u, std::nullopt));
    CHECK(types == std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.delta", "response.function_call_arguments.done",
                       "response.output_item.done", "response.completed"});
    rapidjson::Document o;
    o.Parse(s.object(u).c_str());
    REQUIRE_FALSE(o.HasParseError());
    CHECK(std::string(o["status"].GetString()) == "completed");
    const auto& out = o["output"];
    REQUIRE(out.Size() == 2);
    CHECK(std::string(out[0]["id"].GetString()) == "msg_00ab");
    CHECK(std::string(out[0]["content"][0]["text"].GetString()) == "Let me check.");
    CHECK(std::string(out[1]["type"].GetString()) == "function_call");
    CHECK(std::string(out[1]["id"].GetString()) == "fc_00ab_1");
    CHECK(std::string(out[1]["call_id"].GetString()) == "call_x");
    CHECK(std::string(out[1]["name"].GetString()) == "get_time");
    CHECK(std::string(out[1]["arguments"].GetString()) == "{\"tz\": \"UTC\"}");
    CHECK(std::string(out[1]["status"].GetString()) == "completed");
    CHECK(o["usage"]["total_tokens"].GetInt64() == 17);
}

TEST_CASE("responses stream: reasoning first; a cut output is incomplete; no output is one empty message") {
    GenerationRequest req;
    req.endpoint = Endpoint::Responses;
    const ResponseMeta meta{"resp_01", 1700000000, "m"};
    ResponsesStream s(req, meta, *qwen().tok);
    ChoiceOut part;
    part.reasoning = "Think.";
    part.text = "Answer";
    std::vector<std::string> types;
    for (const auto& e : s.add(part)) types.push_back(e.first);
    CHECK(types == std::vector<std::string>{
                       "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
                       "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.content_part.added", "response.output_text.delta"});
    const auto end = s.end(std::string("length"), Usage{}, std::nullopt);
    CHECK(end.back().first == "response.incomplete");
    rapidjson::Document o;
    o.Parse(s.object(Usage{}).c_str());
    CHECK(std::string(o["status"].GetString()) == "incomplete");
    CHECK(std::string(o["incomplete_details"]["reason"].GetString()) == "max_output_tokens");
    REQUIRE(o["output"].Size() == 2);
    CHECK(std::string(o["output"][0]["type"].GetString()) == "reasoning");
    CHECK(std::string(o["output"][0]["content"][0]["type"].GetString()) == "reasoning_text");
    CHECK(std::string(o["output"][0]["content"][0]["text"].GetString()) == "Think.");
    CHECK(std::string(o["output"][0]["status"].GetString()) == "completed");
    CHECK(std::string(o["output"][1]["status"].GetString()) == "incomplete");

    ResponsesStream empty(req, meta, *qwen().tok);
    empty.end(std::string("stop"), Usage{}, std::nullopt);
    o.Parse(empty.object(Usage{}).c_str());
    REQUIRE(o["output"].Size() == 1);
    CHECK(std::string(o["output"][0]["type"].GetString()) == "message");
    CHECK(std::string(o["output"][0]["content"][0]["text"].GetString()).empty());
}
