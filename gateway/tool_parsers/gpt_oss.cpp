// gpt-oss (OpenAI harmony format): the output is a sequence of messages, each a
// header up to <|message|> and a body up to <|end|>, <|call|> or <|return|>:
//   <|channel|>analysis<|message|>...<|end|>
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
//   <|start|>assistant<|channel|>final<|message|>...<|return|>
// The recipient may also stand before <|channel|> (" to=functions.NAME<|channel|>
// commentary json", as openai-gpt-oss-120b.jinja renders a call). The analysis channel
// is reasoning, a message to functions.NAME is a call (its body, verbatim, the
// arguments), anything else is content. Source: the harmony format guide
// (openai-cookbook articles/openai-harmony.md) and the template.
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway::tools {
namespace {

const std::string kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>", kEnd = "<|end|>",
                  kCall = "<|call|>", kReturn = "<|return|>", kConstrain = "<|constrain|>";
constexpr size_t kMaxHeader = 4096;

// The word after `key` in header `h` (up to whitespace or '<'), with its offset.
std::string_view word_after(std::string_view h, std::string_view key, size_t& at) {
    const size_t k = h.find(key);
    if (k == std::string_view::npos) return {};
    at = k + key.size();
    size_t e = at;
    while (e < h.size() && !is_json_ws(h[e]) && h[e] != '<') ++e;
    return h.substr(at, e - at);
}

class HarmonyParser : public ToolParserBase {
public:
    explicit HarmonyParser(const ToolParserOptions& o) : ToolParserBase(o) {}
    std::vector<std::string> markers() const override {
        return {kStart, kChannel, kMessage, kEnd, kCall, kReturn, kConstrain};
    }

private:
    enum class St { MsgStart, Header, Body };

    bool step() override {
        switch (st_) {
            case St::MsgStart: {
                emit(Part::Marker, ws_at(0));
                if (buf_.empty()) return false;
                bool partial = false;
                for (const std::string& h : {kStart, kChannel, kConstrain, kMessage, std::string("to=")}) {
                    const Match m = match(h);
                    if (m == Match::Full) {
                        st_ = St::Header;
                        return true;
                    }
                    partial = partial || m == Match::Partial;
                }
                if (partial) return false;
                body(Part::Content, -1);  // a message without a header
                return true;
            }
            case St::Header: {
                const size_t m = buf_.find(kMessage);
                if (m == std::string::npos) {
                    if (buf_.size() > kMaxHeader || final_) {
                        body(Part::Content, -1);  // never a header: its text is content
                        return true;
                    }
                    return false;
                }
                const std::string_view h = std::string_view(buf_).substr(0, m);
                size_t at = 0, rat = 0;
                const std::string channel(word_after(h, kChannel, at));  // a copy: emit() moves buf_
                const std::string_view to = word_after(h, "to=", rat);
                const std::string_view fn = "functions.";
                if (opts_.calls && to.starts_with(fn) && plausible_name(to.substr(fn.size()))) {
                    const size_t nb = rat + fn.size(), ne = rat + to.size();
                    body(Part::Arguments, start_named_call(nb, ne, m + kMessage.size()));
                } else {
                    emit(Part::Marker, m + kMessage.size());
                    body(channel == "analysis" ? Part::Reasoning : Part::Content, -1);
                }
                return true;
            }
            case St::Body: {
                emit(Part::Marker, leading_ ? ws_at(0) : 0);
                if (buf_.empty()) return false;
                leading_ = false;
                size_t w = 0;
                const int m = scan_until({kEnd, kCall, kReturn, kStart, kChannel}, part_, w, body_call_);
                if (m < 0) return false;
                emit(Part::Marker, w);
                if (m <= 2) emit(Part::Marker, (m == 0 ? kEnd : m == 1 ? kCall : kReturn).size());
                if (body_call_ >= 0) call_finished();
                st_ = St::MsgStart;
                return true;
            }
        }
        return false;
    }

    void body(Part p, int call) {
        part_ = p;
        body_call_ = call;
        leading_ = true;
        st_ = St::Body;
    }

    St st_ = St::MsgStart;
    Part part_ = Part::Content;
    int body_call_ = -1;
    bool leading_ = true;  // whitespace at the body's start touches the header
};

}  // namespace

std::unique_ptr<SpanParser> make_gpt_oss(const ToolParserOptions& o) { return std::make_unique<HarmonyParser>(o); }

}  // namespace loom::gateway::tools
