// Mistral tool calls, in the two forms its templates render:
//   [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abcDEF123"}, ...]   (Nemo, v3 tokenizer)
//   [TOOL_CALLS]f[CALL_ID]abcDEF123[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}       (Small 3.2, v11)
// ([CALL_ID] is optional in what the model writes). The ids the model writes are
// envelope: every call gets a fresh 9-character id, as vLLM's mistral parser does.
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway::tools {
namespace {

const std::string kCalls = "[TOOL_CALLS]", kArgs = "[ARGS]", kCallId = "[CALL_ID]";

class MistralParser : public JsonSectionParser {
public:
    explicit MistralParser(const ToolParserOptions& o) : JsonSectionParser(syntax(), o) {}

    std::vector<std::string> markers() const override { return {kCalls, kArgs, kCallId}; }

private:
    static JsonSyntax syntax() {
        JsonSyntax s;
        s.starts = {kCalls};
        s.array = true;
        s.keys = {{"name"}, {"arguments"}};
        return s;
    }

    enum class M { Off, Name, Args, Tail };

    bool fail() {
        emit(Part::Content, held_);
        st_ = St::Content;
        m_ = M::Off;
        return true;
    }

    // Cut after the name form's name and the start of [ARGS] or [CALL_ID].
    void cut_call() override {
        if (m_ != M::Name) return JsonSectionParser::cut_call();
        const size_t bracket = buf_.find('[', name_at_);
        if (bracket == std::string::npos ||
            (match(kArgs, bracket) == Match::No && match(kCallId, bracket) == Match::No))
            return;
        if (plausible_name(std::string_view(buf_).substr(name_at_, bracket - name_at_)))
            start_named_call(name_at_, bracket, bracket);
    }

    bool step() override {
        switch (m_) {
            case M::Off: {
                // After [TOOL_CALLS], anything but '[' starts the name form.
                if (st_ == St::ArrayOpen) {
                    const size_t w = ws_at(skip_);
                    if (skip_ + w < buf_.size() && buf_[skip_ + w] != '[') {
                        held_ = skip_;
                        name_at_ = skip_ + w;
                        m_ = M::Name;
                        return true;
                    }
                }
                return JsonSectionParser::step();
            }
            case M::Name: {
                const size_t bracket = buf_.find('[', name_at_);
                if (bracket == std::string::npos) {
                    if (final_ || buf_.size() - name_at_ > kMaxName) return fail();
                    return false;
                }
                if (!plausible_name(std::string_view(buf_).substr(name_at_, bracket - name_at_))) return fail();
                size_t args = bracket;
                const Match id = match(kCallId, bracket);
                if (id == Match::Partial) return false;
                if (id == Match::Full) {
                    args = buf_.find(kArgs, bracket + kCallId.size());
                    if (args == std::string::npos) {
                        if (final_ || buf_.size() - bracket > 128) return fail();
                        return false;
                    }
                }
                const Match a = match(kArgs, args);
                if (a == Match::Partial) return false;
                if (a == Match::No) return fail();
                const size_t w = ws_at(args + kArgs.size());
                const size_t brace = args + kArgs.size() + w;
                if (brace == buf_.size()) return final_ ? fail() : false;
                if (buf_[brace] != '{') return fail();
                begin_args(start_named_call(name_at_, bracket, brace));
                m_ = M::Args;
                return true;
            }
            case M::Args:
                switch (read_args()) {
                    case Read::More: return false;
                    case Read::Closed:
                        call_finished();
                        m_ = M::Off;
                        st_ = St::AfterEnd;  // whitespace, then content (or the next [TOOL_CALLS])
                        return true;
                    case Read::Broken:
                    case Read::Failed: m_ = M::Tail; return true;
                }
                return false;
            case M::Tail: emit(Part::Arguments, buf_.size(), broken_call()); return false;
        }
        return false;
    }

    M m_ = M::Off;
    size_t held_ = 0, name_at_ = 0;
};

}  // namespace

std::unique_ptr<SpanParser> make_mistral(const ToolParserOptions& o) { return std::make_unique<MistralParser>(o); }

}  // namespace loom::gateway::tools
