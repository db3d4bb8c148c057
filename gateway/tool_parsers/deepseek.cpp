// DeepSeek tool calls, in the two forms of its templates:
//   V3 / R1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//   V3.1:     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// (deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja and deepseek-ai-DeepSeek-V3.1.jinja;
// vLLM's deepseek_v3 and deepseek_v31 parsers). Which form a call is in shows after
// the separator: '{' is V3.1. A call may also start without the outer begin marker.
// Kimi K2 writes the V3.1 form with its own markers and a header that is the call's id
// (Kimi-K2-Instruct.jinja; vLLM's kimi_k2 parser):
//   <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway::tools {
namespace {

// A family's markers. `r1`: the V3/R1 form (function, name, ```json fence) is read too.
// `kimi_ids`: the header is "functions.NAME:IDX" (the prefix optional), whose NAME is the name.
struct SectionMarkers {
    std::string calls_begin, calls_end, call_begin, call_end, sep;
    bool r1 = true, kimi_ids = false;
};

const SectionMarkers kDeepSeek{"<｜tool▁calls▁begin｜>",
                               "<｜tool▁calls▁end｜>",
                               "<｜tool▁call▁begin｜>",
                               "<｜tool▁call▁end｜>",
                               "<｜tool▁sep｜>",
                               true,
                               false};
const SectionMarkers kKimi{"<|tool_calls_section_begin|>",
                           "<|tool_calls_section_end|>",
                           "<|tool_call_begin|>",
                           "<|tool_call_end|>",
                           "<|tool_call_argument_begin|>",
                           false,
                           true};
const std::string kFence = "```json", kFenceEnd = "```";

class DeepSeekParser : public ToolParserBase {
public:
    DeepSeekParser(const ToolParserOptions& o, const SectionMarkers& m)
        : ToolParserBase(o),
          kCallsBegin(m.calls_begin),
          kCallsEnd(m.calls_end),
          kCallBegin(m.call_begin),
          kCallEnd(m.call_end),
          kSep(m.sep),
          m_(m) {}
    std::vector<std::string> markers() const override { return {kCallsBegin, kCallsEnd, kCallBegin, kCallEnd, kSep}; }

private:
    enum class St { Content, Begin, Header, AfterSep, R1Name, Args, AfterArgs, Next, AfterEnd, Tail };

    bool fail() {
        emit(Part::Content, held_);
        st_ = St::Content;
        return true;
    }
    // Commits the call named buf_[nb..ne) whose arguments begin at buf_[args].
    bool commit(size_t nb, size_t ne, size_t args) {
        begin_args(start_named_call(nb, ne, args));
        st_ = St::Args;
        return true;
    }
    // Waits for, or fails at, a '{' at buf_[at + whitespace]; returns that offset or npos.
    size_t brace_at(size_t at, bool& wait) const {
        const size_t b = at + ws_at(at);
        wait = b == buf_.size() && !final_;
        return b < buf_.size() && buf_[b] == '{' ? b : std::string::npos;
    }

    // Cut after a complete name: V3.1's header before the separator ("function" is R1's
    // type, its name still to come; Kimi's holds the name), or R1's name line.
    void cut_call() override {
        size_t nb = header_, ne = sep_;
        if (st_ == St::R1Name) {
            nb = sep_ + kSep.size();
            ne = buf_.find('\n', nb);
            if (ne == std::string::npos) return;
            if (ne > nb && buf_[ne - 1] == '\r') --ne;
        } else if (st_ != St::AfterSep || (m_.r1 && buf_.compare(header_, sep_ - header_, "function") == 0)) {
            return;
        } else if (m_.kimi_ids && !kimi_name(nb, ne)) {
            return;
        }
        if (!plausible_name(std::string_view(buf_).substr(nb, ne - nb))) return;
        start_named_call(nb, ne, ne);
    }

    bool step() override {
        switch (st_) {
            case St::Content: {
                size_t w = 0;
                const int m = scan_until({kCallsBegin, kCallBegin}, Part::Content, w);
                if (m < 0) return false;
                held_ = w + (m == 0 ? kCallsBegin : kCallBegin).size();
                header_ = held_;
                st_ = m == 0 ? St::Begin : St::Header;
                return true;
            }
            case St::Begin: {
                const size_t at = held_ + ws_at(held_);
                if (at == buf_.size()) return final_ ? fail() : false;
                const Match m = match(kCallBegin, at);
                if (m == Match::Partial) return false;
                if (m == Match::No) return fail();
                header_ = at + kCallBegin.size();
                st_ = St::Header;
                return true;
            }
            case St::Header: {
                sep_ = buf_.find(kSep, header_);
                if (sep_ == std::string::npos) {
                    if (final_ || buf_.size() - header_ > kMaxName + kSep.size()) return fail();
                    return false;
                }
                st_ = St::AfterSep;
                return true;
            }
            case St::AfterSep: {
                const size_t after = sep_ + kSep.size();
                bool wait = false;
                const size_t b = brace_at(after, wait);
                if (wait) return false;
                if (b != std::string::npos) {  // V3.1: the header is the name (Kimi: holds it)
                    size_t nb = header_, ne = sep_;
                    if (m_.kimi_ids && !kimi_name(nb, ne)) return fail();
                    if (!plausible_name(std::string_view(buf_).substr(nb, ne - nb))) return fail();
                    r1_ = false;
                    return commit(nb, ne, b);
                }
                if (!m_.r1 || after + ws_at(after) == buf_.size()) return fail();  // nothing after the separator
                r1_ = true;
                st_ = St::R1Name;
                return true;
            }
            case St::R1Name: {
                const size_t nb = sep_ + kSep.size();
                const size_t nl = buf_.find('\n', nb);
                if (nl == std::string::npos) {
                    if (final_ || buf_.size() - nb > kMaxName) return fail();
                    return false;
                }
                size_t ne = nl;
                if (ne > nb && buf_[ne - 1] == '\r') --ne;
                if (!plausible_name(std::string_view(buf_).substr(nb, ne - nb))) return fail();
                const size_t f = nl + 1 + ws_at(nl + 1);
                const Match m = match(kFence, f);
                if (m == Match::Partial || (f == buf_.size() && !final_)) return false;
                if (m == Match::No) return fail();
                bool wait = false;
                const size_t b = brace_at(f + kFence.size(), wait);
                if (wait) return false;
                if (b == std::string::npos) return fail();
                return commit(nb, ne, b);
            }
            case St::Args:
                switch (read_args()) {
                    case Read::More: return false;
                    case Read::Closed:
                        call_finished();
                        fence_seen_ = !r1_;
                        st_ = St::AfterArgs;
                        return true;
                    default: st_ = St::Tail; return true;
                }
            case St::AfterArgs: {
                emit(Part::Marker, ws_at(0));
                if (buf_.empty()) return false;
                if (!fence_seen_) {
                    const Match m = match(kFenceEnd);
                    if (m == Match::Partial) return false;
                    if (m == Match::Full) emit(Part::Marker, kFenceEnd.size());
                    fence_seen_ = true;
                    return true;
                }
                const Match m = match(kCallEnd);
                if (m == Match::Partial) return false;
                if (m == Match::Full) emit(Part::Marker, kCallEnd.size());
                st_ = St::Next;
                return true;
            }
            case St::Next: {
                emit(Part::Marker, ws_at(0));
                if (buf_.empty()) return false;
                const Match a = match(kCallBegin), b = match(kCallsEnd);
                if (a == Match::Partial || b == Match::Partial) return false;
                if (a == Match::Full) {
                    held_ = header_ = kCallBegin.size();
                    st_ = St::Header;
                } else if (b == Match::Full) {
                    emit(Part::Marker, kCallsEnd.size());
                    st_ = St::AfterEnd;
                } else {
                    st_ = St::Content;
                }
                return true;
            }
            case St::AfterEnd:
                emit(Part::Marker, ws_at(0));
                if (buf_.empty()) return false;
                st_ = St::Content;
                return true;
            case St::Tail: {
                size_t w = 0;
                if (scan_until({kCallEnd}, Part::Arguments, w, broken_call()) < 0) return false;
                emit(Part::Marker, w + kCallEnd.size());
                st_ = St::Next;
                return true;
            }
        }
        return false;
    }

    // Kimi's header buf_[nb..ne) is "functions.NAME:IDX" (whitespace around it, the prefix
    // optional, as vLLM's kimi_k2 parser reads it): narrows it to NAME; false when IDX is missing.
    bool kimi_name(size_t& nb, size_t& ne) const {
        while (nb < ne && is_json_ws(buf_[nb])) ++nb;
        while (ne > nb && is_json_ws(buf_[ne - 1])) --ne;
        size_t colon = ne;
        while (colon > nb && buf_[colon - 1] >= '0' && buf_[colon - 1] <= '9') --colon;
        if (colon == ne || colon == nb || buf_[colon - 1] != ':') return false;
        ne = colon - 1;
        const std::string_view prefix = "functions.";
        if (std::string_view(buf_).substr(nb, ne - nb).starts_with(prefix)) nb += prefix.size();
        return true;
    }

    const std::string &kCallsBegin, &kCallsEnd, &kCallBegin, &kCallEnd, &kSep;
    const SectionMarkers& m_;
    St st_ = St::Content;
    size_t held_ = 0, header_ = 0, sep_ = 0;
    bool r1_ = false, fence_seen_ = true;
};

}  // namespace

std::unique_ptr<SpanParser> make_deepseek(const ToolParserOptions& o) {
    return std::make_unique<DeepSeekParser>(o, kDeepSeek);
}

std::unique_ptr<SpanParser> make_kimi_k2(const ToolParserOptions& o) {
    return std::make_unique<DeepSeekParser>(o, kKimi);
}

}  // namespace loom::gateway::tools
