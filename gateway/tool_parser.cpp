// Tool-call families: names, detection from the chat template, the parser factory,
// and the parser for grammar-constrained calls; see tool_parser.hpp.
#include "gateway/tool_parser.hpp"

#include "gateway/family_names.hpp"
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway {
namespace {

constexpr FamilyName<ToolFamily> kFamilies[] = {
    {ToolFamily::None, "none"},          {ToolFamily::Hermes, "hermes"},     {ToolFamily::Llama3, "llama3"},
    {ToolFamily::Mistral, "mistral"},    {ToolFamily::DeepSeek, "deepseek"}, {ToolFamily::Granite, "granite"},
    {ToolFamily::CommandR, "command_r"}, {ToolFamily::GptOss, "gpt_oss"},    {ToolFamily::KimiK2, "kimi_k2"},
};

bool has(std::string_view t, std::string_view s) { return t.find(s) != std::string_view::npos; }

}  // namespace

std::string_view tool_family_name(ToolFamily f) { return family_name(kFamilies, f); }

std::optional<ToolFamily> tool_family_from_name(std::string_view name) { return family_from_name(kFamilies, name); }

std::string tool_family_names(bool with_none) {
    return family_names(kFamilies, with_none ? std::nullopt : std::optional(ToolFamily::None));
}

ToolFamily detect_tool_family(std::string_view t) {
    // Most specific markers first: harmony and DeepSeek templates mention none of the
    // others; Granite's <|tool_call|> contains no "<tool_call>".
    if (has(t, "<|channel|>") && has(t, "<|message|>")) return ToolFamily::GptOss;
    if (has(t, "<｜tool▁calls▁begin｜>") || has(t, "<｜tool▁call▁begin｜>")) return ToolFamily::DeepSeek;
    if (has(t, "<|tool_calls_section_begin|>")) return ToolFamily::KimiK2;
    if (has(t, "[TOOL_CALLS]")) return ToolFamily::Mistral;
    if (has(t, "<|START_ACTION|>")) return ToolFamily::CommandR;
    if (has(t, "<|tool_call|>")) return ToolFamily::Granite;
    // SmolLM3 is trained on hermes calls (its template's xml_tools instruction, which the
    // Unsloth edit drops; vLLM serves it with the hermes parser).
    if (has(t, "<tool_call>") || has(t, "named SmolLM")) return ToolFamily::Hermes;
    if (has(t, "<|python_tag|>") || (has(t, "<|start_header_id|>") && has(t, "\"parameters\"")))
        return ToolFamily::Llama3;
    return ToolFamily::None;
}

std::unique_ptr<SpanParser> make_tool_parser(ToolFamily family, const ToolParserOptions& opts) {
    switch (family) {
        case ToolFamily::None: return nullptr;
        case ToolFamily::Hermes: return tools::make_hermes(opts);
        case ToolFamily::Llama3: return tools::make_llama3(opts);
        case ToolFamily::Mistral: return tools::make_mistral(opts);
        case ToolFamily::DeepSeek: return tools::make_deepseek(opts);
        case ToolFamily::Granite: return tools::make_granite(opts);
        case ToolFamily::CommandR: return tools::make_command_r(opts);
        case ToolFamily::GptOss: return tools::make_gpt_oss(opts);
        case ToolFamily::KimiK2: return tools::make_kimi_k2(opts);
    }
    return nullptr;
}

std::unique_ptr<SpanParser> make_constrained_parser(std::optional<std::string> function,
                                                    const ToolParserOptions& opts) {
    return tools::make_constrained(std::move(function), opts);
}

namespace tools {
namespace {

// The output is the arguments object of one call to a known function: the call
// starts with the output (its name was not generated, so it has no Name bytes).
class NamedArgsParser : public ToolParserBase {
public:
    NamedArgsParser(std::string function, const ToolParserOptions& o) : ToolParserBase(o), fn_(std::move(function)) {}
    std::vector<std::string> markers() const override { return {}; }

private:
    enum class St { Start, Args, After, Tail };
    bool step() override {
        switch (st_) {
            case St::Start: {
                emit(Part::Marker, ws_at(0));
                if (buf_.empty()) return false;
                const int call = start_call(fn_);
                begin_args(call);
                st_ = buf_[0] == '{' ? St::Args : St::Tail;
                return true;
            }
            case St::Args:
                switch (read_args()) {
                    case Read::More: return false;
                    case Read::Closed:
                        call_finished();
                        st_ = St::After;
                        return true;
                    default: st_ = St::Tail; return true;
                }
            case St::After:  // a grammar lets nothing follow; should text come, it is content
                emit(Part::Marker, ws_at(0));
                emit(Part::Content, buf_.size());
                return false;
            case St::Tail: emit(Part::Arguments, buf_.size(), broken_call()); return false;
        }
        return false;
    }
    std::string fn_;
    St st_ = St::Start;
};

}  // namespace

std::unique_ptr<SpanParser> make_constrained(std::optional<std::string> function, const ToolParserOptions& o) {
    if (function) return std::make_unique<NamedArgsParser>(std::move(*function), o);
    JsonSyntax s;
    s.at_start = true;
    s.array = true;
    s.keys = {{"name"}, {"parameters"}};
    return std::make_unique<JsonSectionParser>(std::move(s), o);
}

}  // namespace tools
}  // namespace loom::gateway
