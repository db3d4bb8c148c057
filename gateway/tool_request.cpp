// Tools, tool_choice, structured output and template kwargs of a request; see
// tool_request.hpp.
#include "gateway/tool_request.hpp"

#include <cctype>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "gateway/api_types.hpp"
#include "gateway/forced_calls.hpp"
#include "gateway/known_params.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }

const Value* field(const Value& obj, const char* name) {
    auto it = obj.FindMember(name);
    if (it == obj.MemberEnd() || it->value.IsNull()) return nullptr;
    return &it->value;
}

std::string to_json(const Value& v) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    v.Accept(w);
    return {buf.GetString(), buf.GetSize()};
}

// OpenAI: function names are a-z, A-Z, 0-9, underscores and dashes, at most 64.
bool valid_function_name(std::string_view n) {
    if (n.empty() || n.size() > 64) return false;
    for (unsigned char c : n)
        if (!(std::isalnum(c) || c == '_' || c == '-')) return false;
    return true;
}

std::vector<FunctionTool> parse_tools(const Value& tools, bool& strict) {
    if (!tools.IsArray()) bad("tools", "'tools' must be an array");
    std::vector<FunctionTool> out;
    for (rapidjson::SizeType i = 0; i < tools.Size(); ++i) {
        const std::string where = "tools[" + std::to_string(i) + "]";
        const Value& t = tools[i];
        const Value* type = t.IsObject() ? field(t, "type") : nullptr;
        if (!type || !type->IsString() || std::string_view(type->GetString()) != "function")
            bad(where + ".type",
                where + " must be an object with \"type\": \"function\" (only function tools are supported)");
        const Value* fn = field(t, "function");
        if (!fn || !fn->IsObject()) bad(where + ".function", where + ".function must be an object");
        const Value* name = field(*fn, "name");
        if (!name || !name->IsString() || !valid_function_name(name->GetString()))
            bad(where + ".function.name",
                where + ".function.name must be 1 to 64 letters, digits, underscores or dashes");
        FunctionTool f{name->GetString(), ""};
        for (const auto& prev : out)
            if (prev.name == f.name) bad(where + ".function.name", "two tools are named '" + f.name + "'");
        if (const Value* d = field(*fn, "description"); d && !d->IsString())
            bad(where + ".function.description", where + ".function.description must be a string");
        if (const Value* p = field(*fn, "parameters")) {
            if (!p->IsObject())
                bad(where + ".function.parameters", where + ".function.parameters must be a JSON Schema object");
            f.parameters = to_json(*p);
        }
        if (const Value* s = field(*fn, "strict")) {
            if (!s->IsBool()) bad(where + ".function.strict", where + ".function.strict must be a boolean");
            strict = strict || s->GetBool();
        }
        out.push_back(std::move(f));
    }
    return out;
}

// The grammar of a tool_choice that forces calls when the template shows no tool-call
// syntax (ToolFamily::None; the families' own syntax is forced_calls.hpp): a named
// function's arguments object, or (required) a list of {"name", "parameters"} calls.
std::string forced_schema(const std::vector<FunctionTool>& tools, const std::string* named, bool parallel) {
    auto params = [](const FunctionTool& t) {
        return t.parameters.empty() ? std::string("{\"type\":\"object\"}") : t.parameters;
    };
    if (named) {
        for (const auto& t : tools)
            if (t.name == *named) return params(t);
    }
    std::string items;
    for (const auto& t : tools) {
        if (!items.empty()) items += ",";
        items += "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"" + t.name +
                 "\"},\"parameters\":" + params(t) + "},\"required\":[\"name\",\"parameters\"]}";
    }
    return "{\"type\":\"array\",\"minItems\":1," + std::string(parallel ? "" : "\"maxItems\":1,") +
           "\"items\":{\"anyOf\":[" + items + "]}}";
}

void set_constraint(std::optional<OutputConstraint>& c, OutputConstraint next) {
    if (c) bad(next.param, "'" + next.param + "' and '" + c->param + "' both constrain the output; give one of them");
    c = std::move(next);
}

// response_format (OpenAI), guided_* and structured_outputs (vLLM).
void parse_constraints(const Value& body, std::optional<OutputConstraint>& c) {
    using K = OutputConstraint::Kind;
    if (const Value* rf = field(body, "response_format")) {
        check_nested_keys(*rf, "response_format", {"type", "json_schema"});
        const Value* type = rf->IsObject() ? field(*rf, "type") : nullptr;
        const std::string t = type && type->IsString() ? type->GetString() : "";
        if (t == "json_object") {
            set_constraint(c, {K::JsonSchema, "{\"type\":\"object\"}", "response_format"});
        } else if (t == "json_schema") {
            const Value* js = field(*rf, "json_schema");
            if (!js || !js->IsObject()) bad("response_format", "'response_format.json_schema' must be an object");
            check_nested_keys(*js, "response_format.json_schema", {"name", "description", "schema", "strict"});
            const Value* name = field(*js, "name");
            if (!name || !name->IsString())
                bad("response_format", "'response_format.json_schema.name' must be a string");
            const Value* schema = field(*js, "schema");
            if (schema && !schema->IsObject())
                bad("response_format", "'response_format.json_schema.schema' must be an object");
            set_constraint(c, {K::JsonSchema, schema ? to_json(*schema) : "{}", "response_format"});
        } else if (t != "text") {
            bad("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        }
    }
    if (const Value* g = field(body, "guided_json")) {
        if (!g->IsObject() && !g->IsString())
            bad("guided_json", "'guided_json' must be a JSON Schema (object or string)");
        set_constraint(c, {K::JsonSchema, g->IsString() ? g->GetString() : to_json(*g), "guided_json"});
    }
    if (const Value* g = field(body, "guided_regex")) {
        if (!g->IsString()) bad("guided_regex", "'guided_regex' must be a string");
        set_constraint(c, {K::Regex, g->GetString(), "guided_regex"});
    }
    if (const Value* g = field(body, "guided_choice")) {
        bool ok = g->IsArray() && !g->Empty();
        if (ok)
            for (const Value& e : g->GetArray()) ok = ok && e.IsString();
        if (!ok) bad("guided_choice", "'guided_choice' must be a non-empty array of strings");
        set_constraint(c, {K::Choice, to_json(*g), "guided_choice"});
    }
    if (const Value* g = field(body, "guided_grammar")) {
        if (!g->IsString()) bad("guided_grammar", "'guided_grammar' must be a string");
        set_constraint(c, {K::Grammar, g->GetString(), "guided_grammar"});
    }
    if (const Value* so = field(body, "structured_outputs")) {
        if (!so->IsObject()) bad("structured_outputs", "'structured_outputs' must be an object");
        for (auto m = so->MemberBegin(); m != so->MemberEnd(); ++m) {
            const std::string k = m->name.GetString();
            if (m->value.IsNull()) continue;
            if (k == "json")
                set_constraint(c, {K::JsonSchema, m->value.IsString() ? m->value.GetString() : to_json(m->value),
                                   "structured_outputs"});
            else if (k == "json_object" && m->value.IsBool() && m->value.GetBool())
                set_constraint(c, {K::JsonSchema, "{\"type\":\"object\"}", "structured_outputs"});
            else if (k == "regex" && m->value.IsString())
                set_constraint(c, {K::Regex, m->value.GetString(), "structured_outputs"});
            else if (k == "choice" && m->value.IsArray())
                set_constraint(c, {K::Choice, to_json(m->value), "structured_outputs"});
            else if (k == "grammar" && m->value.IsString())
                set_constraint(c, {K::Grammar, m->value.GetString(), "structured_outputs"});
            else
                bad("structured_outputs",
                    "'structured_outputs." + k +
                        "' is not a constraint loom knows (json, json_object, regex, choice, grammar)");
        }
    }
}

}  // namespace

void reason_before_constraint(OutputConstraint& c, ReasoningFamily family, std::string_view prompt) {
    if (family != ReasoningFamily::Think) return;
    const ReasoningSyntax s = reasoning_syntax(family);
    while (!prompt.empty() && is_json_ws(prompt.back())) prompt.remove_suffix(1);
    if (prompt.ends_with(s.close)) return;  // thinking off: the block is closed already
    c.reasoning_open = prompt.ends_with(s.open) ? "" : s.open;
    c.reasoning_close = s.close;
}

bool template_reads(std::string_view tmpl, std::string_view name) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t at = tmpl.find(name); at != std::string_view::npos; at = tmpl.find(name, at + 1)) {
        const bool before = at > 0 && ident(tmpl[at - 1]);
        const bool after = at + name.size() < tmpl.size() && ident(tmpl[at + name.size()]);
        if (!before && !after) return true;
    }
    return false;
}

OutputRequest parse_output_request(const Value& body, bool chat, const ChatFormat& fmt,
                                   std::string_view chat_template) {
    OutputRequest r;
    parse_constraints(body, r.constraint);
    if (!chat) return r;

    bool strict = false;
    const Value* tools = field(body, "tools");
    if (tools) r.tools = parse_tools(*tools, strict);
    const Value* choice = field(body, "tool_choice");
    std::string mode = r.tools.empty() ? "none" : "auto";
    std::string named;
    if (choice) {
        if (choice->IsString()) {
            mode = choice->GetString();
            if (mode != "none" && mode != "auto" && mode != "required")
                bad("tool_choice",
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                    "\"function\": {\"name\": ...}}");
        } else if (choice->IsObject()) {
            const Value* type = field(*choice, "type");
            const Value* fn = field(*choice, "function");
            const Value* name = fn && fn->IsObject() ? field(*fn, "name") : field(*choice, "name");
            if (!type || !type->IsString() || std::string_view(type->GetString()) != "function" || !name ||
                !name->IsString())
                bad("tool_choice",
                    "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
            mode = "named";
            named = name->GetString();
        } else {
            bad("tool_choice", "'tool_choice' must be a string or an object");
        }
    }
    if (mode != "none" && r.tools.empty())
        bad("tool_choice", "'tool_choice' \"" + (mode == "named" ? named : mode) + "\" needs 'tools'");
    if (mode == "named") {
        bool found = false;
        for (const auto& t : r.tools) found = found || t.name == named;
        if (!found) bad("tool_choice", "'tool_choice' names '" + named + "', which is not in 'tools'");
    }
    bool parallel = true;
    if (const Value* p = field(body, "parallel_tool_calls")) {
        if (!p->IsBool()) bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        parallel = p->GetBool();
    }

    OutputOptions& o = r.output;
    o.tools = fmt.tools;
    o.reasoning = fmt.reasoning;
    o.parallel = parallel;
    if (mode == "auto") {
        if (fmt.tools == ToolFamily::None)
            bad("tools",
                "this model's chat template shows no tool-call syntax loom can parse, so calls under tool_choice "
                "\"auto\" could not be returned; start loom-gateway with --tool-parser NAME (" +
                    tool_family_names(false) +
                    ") naming the syntax the model writes, or send tool_choice \"required\" or a named function "
                    "(a JSON array of calls under a grammar)");
        o.calls = true;
        if (strict) {
            rapidjson::StringBuffer buf;
            rapidjson::Writer<rapidjson::StringBuffer> w(buf);
            tools->Accept(w);
            set_constraint(r.constraint, {OutputConstraint::Kind::ToolArguments, buf.GetString(), "tools"});
        }
    } else if (mode == "required" || mode == "named") {
        o.calls = true;
        const std::string* fn = mode == "named" ? &named : nullptr;
        if (std::string src = forced_call_source(fmt.tools, chat_template, r.tools, fn, parallel); !src.empty()) {
            // The model writes the calls in its family's syntax; the family's parser reads them.
            set_constraint(r.constraint, {OutputConstraint::Kind::TaggedJson, std::move(src), "tool_choice"});
        } else {
            o.constrained = true;
            if (fn) o.function = named;
            set_constraint(r.constraint,
                           {OutputConstraint::Kind::JsonSchema, forced_schema(r.tools, fn, parallel), "tool_choice"});
        }
    }

    // chat_template_kwargs and reasoning_effort. A kwarg the template never reads is
    // ignored, as vLLM and transformers ignore it (clients send enable_thinking to every
    // model); reasoning_effort, a field of its own, must be one the template reads.
    const Value* kwargs = field(body, "chat_template_kwargs");
    const Value* effort = field(body, "reasoning_effort");
    if (kwargs && !kwargs->IsObject()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (effort && chat_template.empty())
        bad("reasoning_effort", "this model has no chat template, so 'reasoning_effort' cannot be used");
    if (!chat_template.empty() && ((kwargs && !kwargs->ObjectEmpty()) || effort)) {
        r.template_kwargs.SetObject();
        auto& a = r.template_kwargs.GetAllocator();
        if (kwargs)
            for (auto m = kwargs->MemberBegin(); m != kwargs->MemberEnd(); ++m) {
                const std::string k = m->name.GetString();
                for (const char* fixed : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
                    if (k == fixed)
                        bad("chat_template_kwargs",
                            "'chat_template_kwargs." + k + "' cannot replace the template's '" + k + "'");
                if (template_reads(chat_template, k))
                    r.template_kwargs.AddMember(Value(k.c_str(), a), Value(m->value, a), a);
            }
        if (effort) {
            const std::string e = effort->IsString() ? effort->GetString() : "";
            if (e != "none" && e != "minimal" && e != "low" && e != "medium" && e != "high")
                bad("reasoning_effort",
                    "'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\"");
            if (!template_reads(chat_template, "reasoning_effort"))
                bad("reasoning_effort",
                    "this model's chat template does not read reasoning_effort, so it would change nothing");
            auto it = r.template_kwargs.FindMember("reasoning_effort");
            if (it != r.template_kwargs.MemberEnd() && !(it->value == *effort))
                bad("reasoning_effort", "'reasoning_effort' and 'chat_template_kwargs.reasoning_effort' differ");
            if (it == r.template_kwargs.MemberEnd())
                r.template_kwargs.AddMember("reasoning_effort", Value(e.c_str(), a), a);
        }
        if (r.template_kwargs.ObjectEmpty()) r.template_kwargs.SetNull();
    }
    return r;
}

rapidjson::Document messages_for_template(const Value& messages) {
    rapidjson::Document out;
    out.CopyFrom(messages, out.GetAllocator());
    auto& a = out.GetAllocator();
    for (rapidjson::SizeType i = 0; i < out.Size(); ++i) {
        Value& m = out[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        const Value* role = field(m, "role");
        const std::string r = role && role->IsString() ? role->GetString() : "";
        if (r == "tool") {
            const Value* id = field(m, "tool_call_id");
            if (!id || !id->IsString())
                bad(where + ".tool_call_id", where + ".tool_call_id must be a string (the call it answers)");
        }
        auto tc = m.FindMember("tool_calls");
        if (tc == m.MemberEnd() || tc->value.IsNull()) continue;
        if (r != "assistant") bad(where + ".tool_calls", "only assistant messages have tool_calls");
        if (!tc->value.IsArray()) bad(where + ".tool_calls", where + ".tool_calls must be an array");
        for (rapidjson::SizeType j = 0; j < tc->value.Size(); ++j) {
            Value& call = tc->value[j];
            const std::string cw = where + ".tool_calls[" + std::to_string(j) + "]";
            if (!call.IsObject()) bad(cw, cw + " must be an object");
            if (const Value* type = field(call, "type");
                type && (!type->IsString() || std::string_view(type->GetString()) != "function"))
                bad(cw + ".type", cw + ".type must be \"function\"");
            if (const Value* id = field(call, "id"); id && !id->IsString())
                bad(cw + ".id", cw + ".id must be a string");
            auto fn = call.FindMember("function");
            if (fn == call.MemberEnd() || !fn->value.IsObject())
                bad(cw + ".function", cw + ".function must be an object");
            const Value* name = field(fn->value, "name");
            if (!name || !name->IsString()) bad(cw + ".function.name", cw + ".function.name must be a string");
            auto args = fn->value.FindMember("arguments");
            if (args == fn->value.MemberEnd() || !(args->value.IsString() || args->value.IsObject()))
                bad(cw + ".function.arguments", cw + ".function.arguments must be a string of JSON (or an object)");
            if (args->value.IsString()) {
                rapidjson::Document parsed(&a);
                parsed.Parse(args->value.GetString(), args->value.GetStringLength());
                if (!parsed.HasParseError() && parsed.IsObject()) args->value.CopyFrom(parsed, a);
            }
        }
    }
    return out;
}

}  // namespace loom::gateway
