// POST /v1/responses request building; see serving_responses.hpp.
#include "gateway/serving_responses.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "gateway/json_fields.hpp"
#include "gateway/known_params.hpp"
#include "gateway/serving_chat.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

std::string str(const Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

void refuse_stateful(const Value& body) {
    if (find_field(body, "previous_response_id"))
        bad_request("previous_response_id",
                    "loom does not store responses, so 'previous_response_id' cannot be used; "
                    "send the earlier turns in 'input' instead",
                    "unsupported_parameter");
    if (find_field(body, "conversation"))
        bad_request("conversation", "loom does not store conversations; send the earlier turns in 'input'",
                    "unsupported_parameter");
    if (boolean_field(body, "store", false))
        bad_request("store", "loom does not store responses: 'store' must be false or left out",
                    "unsupported_parameter");
    if (boolean_field(body, "background", false))
        bad_request("background", "background responses are not supported ('background' must be false)",
                    "unsupported_parameter");
    if (find_field(body, "reasoning"))
        bad_request("reasoning", "'reasoning' is not supported", "unsupported_parameter");
}

using Alloc = rapidjson::Document::AllocatorType;

std::string to_json(const Value& v) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    v.Accept(w);
    return {buf.GetString(), buf.GetSize()};
}

// `tools` ({"type": "function", "name", "description", "parameters", "strict"}) as chat
// tools ({"type": "function", "function": {...}}).
Value chat_tools(const Value& tools, Alloc& a) {
    if (!tools.IsArray()) bad_request("tools", "'tools' must be an array");
    Value out(rapidjson::kArrayType);
    size_t i = 0;
    for (const Value& t : tools.GetArray()) {
        const std::string where = "tools[" + std::to_string(i++) + "]";
        const Value* type = t.IsObject() ? find_field(t, "type") : nullptr;
        if (!type || !type->IsString() || str(*type) != "function")
            bad_request(where + ".type",
                        where +
                            " must be a function tool ({\"type\": \"function\", \"name\": ...}): loom has no "
                            "built-in tools");
        check_nested_keys(t, where, {"type", "name", "description", "parameters", "strict"});
        Value fn(rapidjson::kObjectType);
        for (const char* k : {"name", "description", "parameters", "strict"})
            if (const Value* v = find_field(t, k)) fn.AddMember(rapidjson::StringRef(k), Value(*v, a), a);
        Value tool(rapidjson::kObjectType);
        tool.AddMember("type", "function", a);
        tool.AddMember("function", fn, a);
        out.PushBack(tool, a);
    }
    return out;
}

// `tool_choice`: "none", "auto", "required" or {"type": "function", "name"} (chat's
// object form names the function under "function").
Value chat_tool_choice(const Value& choice, Alloc& a) {
    if (choice.IsString()) return Value(choice, a);
    const Value* type = choice.IsObject() ? find_field(choice, "type") : nullptr;
    const Value* name = choice.IsObject() ? find_field(choice, "name") : nullptr;
    if (!type || !type->IsString() || str(*type) != "function" || !name || !name->IsString())
        bad_request("tool_choice",
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                    "\"name\": ...}");
    check_nested_keys(choice, "tool_choice", {"type", "name"});
    Value fn(rapidjson::kObjectType);
    fn.AddMember("name", Value(*name, a), a);
    Value out(rapidjson::kObjectType);
    out.AddMember("type", "function", a);
    out.AddMember("function", fn, a);
    return out;
}

// `text.format` as chat's response_format (null for plain text): json_object, or
// json_schema with its name, schema, description and strict.
Value chat_response_format(const Value& text, Alloc& a) {
    if (!text.IsObject()) bad_request("text", "'text' must be an object");
    check_nested_keys(text, "text", {"format"});
    const Value* format = find_field(text, "format");
    if (!format) return Value();
    const Value* type = format->IsObject() ? find_field(*format, "type") : nullptr;
    const std::string t = type && type->IsString() ? str(*type) : "";
    Value rf(rapidjson::kObjectType);
    if (t == "text" || t == "json_object") {
        check_nested_keys(*format, "text.format", {"type"});
        if (t == "text") return Value();
        rf.AddMember("type", "json_object", a);
        return rf;
    }
    if (t != "json_schema")
        bad_request("text.format", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    check_nested_keys(*format, "text.format", {"type", "name", "schema", "description", "strict"});
    Value js(rapidjson::kObjectType);
    for (const char* k : {"name", "schema", "description", "strict"})
        if (const Value* v = find_field(*format, k)) js.AddMember(rapidjson::StringRef(k), Value(*v, a), a);
    rf.AddMember("type", "json_schema", a);
    rf.AddMember("json_schema", js, a);
    return rf;
}

// One input content part as a chat text part (input_text, or output_text in an earlier
// assistant turn).
void add_part(const Value& part, const std::string& where, Value& parts, rapidjson::Document::AllocatorType& a) {
    const Value* type = part.IsObject() ? find_field(part, "type") : nullptr;
    const Value* text = part.IsObject() ? find_field(part, "text") : nullptr;
    const std::string t = type && type->IsString() ? str(*type) : "";
    if ((t != "input_text" && t != "output_text" && t != "text") || !text || !text->IsString())
        bad_request(where, "only text content parts ({\"type\": \"input_text\", \"text\": ...}) are supported");
    Value p(rapidjson::kObjectType);
    p.AddMember("type", "text", a);
    p.AddMember("text", Value(text->GetString(), text->GetStringLength(), a), a);
    parts.PushBack(p, a);
}

// A string member of an input item, or 400 naming it.
const Value& string_member(const Value& item, const char* key, const std::string& where) {
    const Value* v = find_field(item, key);
    if (!v || !v->IsString()) bad_request(where + "." + key, where + "." + key + " must be a string");
    return *v;
}

// A function_call input item (a call the model made earlier) as a tool call of the
// assistant message before it, or of a new one.
void add_function_call(const Value& item, const std::string& where, Value& msgs, Alloc& a) {
    Value fn(rapidjson::kObjectType);
    fn.AddMember("name", Value(string_member(item, "name", where), a), a);
    fn.AddMember("arguments", Value(string_member(item, "arguments", where), a), a);
    Value call(rapidjson::kObjectType);
    call.AddMember("id", Value(string_member(item, "call_id", where), a), a);
    call.AddMember("type", "function", a);
    call.AddMember("function", fn, a);
    const bool after_assistant = !msgs.Empty() && msgs[msgs.Size() - 1]["role"] == "assistant";
    if (!after_assistant) {
        Value m(rapidjson::kObjectType);
        m.AddMember("role", "assistant", a);
        msgs.PushBack(m, a);
    }
    Value& m = msgs[msgs.Size() - 1];
    if (!m.HasMember("tool_calls")) m.AddMember("tool_calls", Value(rapidjson::kArrayType), a);
    m["tool_calls"].PushBack(call, a);
}

// A function_call_output input item (a call's result) as a tool message.
Value function_call_output(const Value& item, const std::string& where, Alloc& a) {
    Value m(rapidjson::kObjectType);
    m.AddMember("role", "tool", a);
    m.AddMember("tool_call_id", Value(string_member(item, "call_id", where), a), a);
    const Value* output = find_field(item, "output");
    if (output && output->IsString()) {
        m.AddMember("content", Value(*output, a), a);
    } else if (output && output->IsArray()) {
        Value parts(rapidjson::kArrayType);
        size_t k = 0;
        for (const Value& part : output->GetArray())
            add_part(part, where + ".output[" + std::to_string(k++) + "]", parts, a);
        m.AddMember("content", parts, a);
    } else {
        bad_request(where + ".output", where + ".output must be a string or an array of input_text parts");
    }
    return m;
}

// `input` (and `instructions`) as chat messages.
Value messages_of(const Value& body, rapidjson::Document::AllocatorType& a) {
    Value msgs(rapidjson::kArrayType);
    if (const Value* ins = find_field(body, "instructions")) {
        if (!ins->IsString()) bad_request("instructions", "'instructions' must be a string");
        Value m(rapidjson::kObjectType);
        m.AddMember("role", "system", a);
        m.AddMember("content", Value(ins->GetString(), ins->GetStringLength(), a), a);
        msgs.PushBack(m, a);
    }
    const Value* input = find_field(body, "input");
    if (!input) bad_request("input", "'input' is required");
    if (input->IsString()) {
        Value m(rapidjson::kObjectType);
        m.AddMember("role", "user", a);
        m.AddMember("content", Value(input->GetString(), input->GetStringLength(), a), a);
        msgs.PushBack(m, a);
        return msgs;
    }
    if (!input->IsArray() || input->Empty()) bad_request("input", "'input' must be a string or a non-empty array");
    size_t i = 0;
    for (const Value& item : input->GetArray()) {
        const std::string where = "input[" + std::to_string(i++) + "]";
        if (!item.IsObject()) bad_request(where, where + " must be an object");
        const Value* type = find_field(item, "type");
        const std::string t = !type ? "message" : type->IsString() ? str(*type) : "?";
        if (t == "function_call") {
            add_function_call(item, where, msgs, a);
            continue;
        }
        if (t == "function_call_output") {
            msgs.PushBack(function_call_output(item, where, a), a);
            continue;
        }
        if (t != "message")
            bad_request(where + ".type",
                        "only message, function_call and function_call_output input items are supported, got '" +
                            t.substr(0, 64) + "'");
        const Value* role = find_field(item, "role");
        const Value* content = find_field(item, "content");
        if (!role || !role->IsString()) bad_request(where + ".role", where + ".role must be a string");
        if (!content || (!content->IsString() && !content->IsArray()))
            bad_request(where + ".content", where + ".content must be a string or an array of content parts");
        Value m(rapidjson::kObjectType);
        m.AddMember("role", Value(role->GetString(), role->GetStringLength(), a), a);
        if (content->IsString()) {
            m.AddMember("content", Value(content->GetString(), content->GetStringLength(), a), a);
        } else {
            Value parts(rapidjson::kArrayType);
            size_t k = 0;
            for (const Value& part : content->GetArray())
                add_part(part, where + ".content[" + std::to_string(k++) + "]", parts, a);
            m.AddMember("content", parts, a);
        }
        msgs.PushBack(m, a);
    }
    return msgs;
}

bool wants_logprobs(const Value& body) {
    const Value* inc = find_field(body, "include");
    if (!inc) return false;
    if (!inc->IsArray()) bad_request("include", "'include' must be an array of strings");
    bool lp = false;
    for (const Value& v : inc->GetArray()) {
        if (!v.IsString() || str(v) != kIncludeLogprobs)
            bad_request("include", "the only 'include' value supported is \"" + std::string(kIncludeLogprobs) + "\"",
                        "unsupported_parameter");
        lp = true;
    }
    return lp;
}

// `s` (a chat field's name, or an error message naming fields) with the fields named as
// the Responses API names them: response_format[.json_schema] is text.format,
// tools[i].function.x is tools[i].x.
std::string responses_names(std::string s) {
    auto replace_all = [&](std::string_view from, std::string_view to) {
        for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
            s.replace(at, from.size(), to);
    };
    replace_all("response_format.json_schema", "text.format");
    replace_all("response_format", "text.format");
    replace_all("].function.", "].");
    return s;
}

// A chat field's name as the Responses API calls it, for error messages.
std::string responses_param(const std::string& p) {
    if (p == "max_tokens" || p == "max_completion_tokens") return "max_output_tokens";
    if (p.rfind("messages", 0) == 0) return "input";
    return responses_names(p);
}

}  // namespace

GenerationRequest build_responses_request(std::string_view body_text, const ModelContext& ctx) {
    const rapidjson::Document body = parse_json_object(body_text);
    refuse_stateful(body);  // first: its messages say why for the stateful members
    check_known_params(body, ParamSet::Responses);
    rapidjson::Document chat(rapidjson::kObjectType);
    auto& a = chat.GetAllocator();
    // Sampling fields carry over unchanged (the Responses API's temperature and top_p, and
    // vLLM's extensions); `model` and `stream` too.
    for (const char* k : {"model", "stream", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                          "frequency_penalty", "repetition_penalty", "logit_bias", "allowed_token_ids", "logprobs_mode",
                          "ignore_eos", "return_tokens_as_token_ids"})
        if (const Value* v = find_field(body, k)) chat.AddMember(rapidjson::StringRef(k), Value(*v, a), a);
    if (const Value* v = find_field(body, "max_output_tokens")) {
        if (!v->IsInt64() || v->GetInt64() < 1)
            bad_request("max_output_tokens", "'max_output_tokens' must be an integer >= 1");
        chat.AddMember("max_tokens", Value(*v, a), a);
    }
    const bool lp = wants_logprobs(body);
    if (const Value* v = find_field(body, "top_logprobs")) {
        if (!lp)
            bad_request("top_logprobs", "'top_logprobs' needs include: [\"" + std::string(kIncludeLogprobs) + "\"]");
        chat.AddMember("top_logprobs", Value(*v, a), a);
    }
    if (lp) chat.AddMember("logprobs", true, a);
    if (const Value* so = find_field(body, "stream_options")) {
        // The Responses API's stream_options has one member, include_obfuscation: accepted with
        // stream, as on chat (loom pads no events either way; usage is always in
        // response.completed). Anything else is refused by name.
        if (!boolean_field(body, "stream", false))
            bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (!so->IsObject()) bad_request("stream_options", "'stream_options' must be an object");
        check_nested_keys(*so, "stream_options", {"include_obfuscation"});
        boolean_field(*so, "include_obfuscation", false);
    }
    chat.AddMember("messages", messages_of(body, a), a);
    // Tools and structured output in chat's shape; chat's parser then checks them.
    if (const Value* v = find_field(body, "tools")) chat.AddMember("tools", chat_tools(*v, a), a);
    if (const Value* v = find_field(body, "tool_choice")) chat.AddMember("tool_choice", chat_tool_choice(*v, a), a);
    if (const Value* v = find_field(body, "parallel_tool_calls"))
        chat.AddMember("parallel_tool_calls", Value(*v, a), a);
    if (const Value* v = find_field(body, "text"))
        if (Value rf = chat_response_format(*v, a); !rf.IsNull()) chat.AddMember("response_format", rf, a);

    GenerationRequest r;
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    chat.Accept(w);
    try {
        r = build_chat_request(std::string_view(buf.GetString(), buf.GetSize()), ctx);
    } catch (const ApiError& e) {
        ApiError renamed = e;
        renamed.param = responses_param(e.param);
        renamed.message = responses_names(e.message);
        throw renamed;
    }
    r.endpoint = Endpoint::Responses;
    if (const Value* v = find_field(body, "tools")) r.responses_echo.tools = to_json(*v);
    if (const Value* v = find_field(body, "tool_choice")) r.responses_echo.tool_choice = to_json(*v);
    if (const Value* v = find_field(body, "text"); v && find_field(*v, "format"))
        r.responses_echo.text_format = to_json(*find_field(*v, "format"));
    if (const Value* ins = find_field(body, "instructions")) r.instructions = str(*ins);
    if (const Value* md = find_field(body, "metadata")) {
        if (!md->IsObject()) bad_request("metadata", "'metadata' must be an object");
        rapidjson::StringBuffer mb;
        rapidjson::Writer<rapidjson::StringBuffer> mw(mb);
        md->Accept(mw);
        r.metadata_json = mb.GetString();
    }
    return r;
}

}  // namespace loom::gateway
