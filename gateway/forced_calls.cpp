// Forced tool calls in each family's syntax; see forced_calls.hpp.
#include "gateway/forced_calls.hpp"

#include "grammar/compile.hpp"

namespace loom::gateway {
namespace {

// The pieces of a tagged_json alternative (grammar::TaggedPiece): literal text, or a JSON
// Schema (JSON text).
using Piece = grammar::TaggedPiece;

Piece lit(std::string s) { return {false, std::move(s)}; }
Piece value(std::string schema_json) { return {true, std::move(schema_json)}; }

// A family's form: around the calls, between them, and one call of name N with arguments A.
struct Form {
    std::string prefix, suffix, separator;
    std::vector<Piece> (*call)(const std::string& name, const std::string& args);
};

const char kDsCallsBegin[] = "<｜tool▁calls▁begin｜>", kDsCallsEnd[] = "<｜tool▁calls▁end｜>",
           kDsCallBegin[] = "<｜tool▁call▁begin｜>", kDsCallEnd[] = "<｜tool▁call▁end｜>", kDsSep[] = "<｜tool▁sep｜>";

// {"<name key>": "N", "<args key>": A}
std::vector<Piece> json_call(const char* name_key, const char* args_key, const std::string& n, const std::string& a) {
    return {lit(std::string("{\"") + name_key + "\": \"" + n + "\", \"" + args_key + "\": "), value(a), lit("}")};
}

Form form_of(ToolFamily family, std::string_view tmpl) {
    switch (family) {
        case ToolFamily::Hermes:
            return {"", "", "\n", [](const std::string& n, const std::string& a) {
                        return std::vector<Piece>{lit("<tool_call>\n{\"name\": \"" + n + "\", \"arguments\": "),
                                                  value(a), lit("}\n</tool_call>")};
                    }};
        case ToolFamily::Llama3:
            return {"", "", "; ",
                    [](const std::string& n, const std::string& a) { return json_call("name", "parameters", n, a); }};
        case ToolFamily::Mistral:
            if (tmpl.find("[ARGS]") != std::string_view::npos)
                return {"", "", "", [](const std::string& n, const std::string& a) {
                            return std::vector<Piece>{lit("[TOOL_CALLS]" + n + "[ARGS]"), value(a)};
                        }};
            return {"[TOOL_CALLS][", "]", ", ", [](const std::string& n, const std::string& a) {
                        return std::vector<Piece>{lit("{\"name\": \"" + n + "\", \"arguments\": "), value(a),
                                                  lit(", \"id\": "),
                                                  value(R"({"type":"string","pattern":"^[A-Za-z0-9]{9}$"})"), lit("}")};
                    }};
        case ToolFamily::DeepSeek:
            if (tmpl.find("```json") != std::string_view::npos)
                return {kDsCallsBegin, kDsCallsEnd, "\n", [](const std::string& n, const std::string& a) {
                            return std::vector<Piece>{
                                lit(std::string(kDsCallBegin) + "function" + kDsSep + n + "\n```json\n"), value(a),
                                lit(std::string("\n```") + kDsCallEnd)};
                        }};
            return {
                kDsCallsBegin, kDsCallsEnd, "", [](const std::string& n, const std::string& a) {
                    return std::vector<Piece>{lit(std::string(kDsCallBegin) + n + kDsSep), value(a), lit(kDsCallEnd)};
                }};
        case ToolFamily::Granite:
            return {"<|tool_call|>[", "]", ", ",
                    [](const std::string& n, const std::string& a) { return json_call("name", "arguments", n, a); }};
        case ToolFamily::CommandR:
            return {"<|START_ACTION|>[\n    ", "\n]<|END_ACTION|>", ",\n    ",
                    [](const std::string& n, const std::string& a) {
                        return std::vector<Piece>{
                            lit("{\"tool_call_id\": "), value(R"({"type":"string","pattern":"^[0-9]{1,3}$"})"),
                            lit(", \"tool_name\": \"" + n + "\", \"parameters\": "), value(a), lit("}")};
                    }};
        case ToolFamily::GptOss:
            return {"", "", "<|start|>assistant", [](const std::string& n, const std::string& a) {
                        return std::vector<Piece>{lit(" to=functions." + n + "<|channel|>commentary json<|message|>"),
                                                  value(a), lit("<|call|>")};
                    }};
        case ToolFamily::KimiK2:  // the header's IDX counts calls in the conversation: any index
            return {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "",
                    [](const std::string& n, const std::string& a) {
                        return std::vector<Piece>{lit("<|tool_call_begin|>functions." + n + ":"),
                                                  value(R"({"type":"integer","minimum":0,"maximum":999})"),
                                                  lit("<|tool_call_argument_begin|>"), value(a),
                                                  lit("<|tool_call_end|>")};
                    }};
        case ToolFamily::None: break;
    }
    return {"", "", "", nullptr};
}

}  // namespace

std::string forced_call_source(ToolFamily family, std::string_view chat_template,
                               const std::vector<FunctionTool>& tools, const std::string* named, bool parallel) {
    const Form f = form_of(family, chat_template);
    if (!f.call) return "";
    grammar::TaggedJson t{f.prefix, f.suffix, f.separator, parallel && !named, {}};
    for (const auto& tool : tools)
        if (!named || tool.name == *named)
            t.alternatives.push_back(
                f.call(tool.name, tool.parameters.empty() ? std::string(R"({"type":"object"})") : tool.parameters));
    return grammar::tagged_json_source(t);
}

}  // namespace loom::gateway
