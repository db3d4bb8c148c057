// Reasoning families and the reasoning splitter; see reasoning_parser.hpp.
#include "gateway/reasoning_parser.hpp"

#include "gateway/family_names.hpp"

namespace loom::gateway {
namespace {

constexpr FamilyName<ReasoningFamily> kFamilies[] = {
    {ReasoningFamily::None, "none"},       {ReasoningFamily::Think, "think"},
    {ReasoningFamily::Granite, "granite"}, {ReasoningFamily::CommandR, "command_r"},
    {ReasoningFamily::GptOss, "gpt_oss"},
};

bool has(std::string_view t, std::string_view s) { return t.find(s) != std::string_view::npos; }

class ReasoningParser : public SpanParser {
public:
    ReasoningParser(ReasoningSyntax s, bool inside, std::unique_ptr<SpanParser> inner)
        : syn_(std::move(s)), inner_(std::move(inner)), st_(inside ? St::Inside : St::Start) {}

    std::vector<std::string> markers() const override {
        std::vector<std::string> m = inner_ ? inner_->markers() : std::vector<std::string>{};
        for (const std::string* s : {&syn_.open, &syn_.close, &syn_.content_open, &syn_.content_close})
            if (!s->empty()) m.push_back(*s);
        return m;
    }
    bool done() const override { return done_ || (inner_ && inner_->done()); }

private:
    // Cut: the inner parser decides what it holds (text before this parser's own held
    // suffix, which then becomes Marker).
    void cut_call() override {
        if (st_ == St::Pass && inner_) inner_->feed("", true, *out_, true);
    }

    enum class St { Start, Inside, Pass };

    // Hands buf_[0..n) to the inner parser (or decides it as content).
    void forward(size_t n, bool final) {
        if (!inner_) {
            emit(Part::Content, n);
            return;
        }
        const std::string text = buf_.substr(0, n);
        buf_.erase(0, n);
        inner_->feed(text, final, *out_);
    }

    // Length of the suffix of buf_ that is, or may still become, the content's
    // closing wrapper at the end of the output (with the whitespace around it). Before
    // the end that is whitespace, then a prefix of the wrapper or all of it and
    // whitespace; at the end only a complete wrapper.
    size_t close_suffix() const {
        const std::string& c = syn_.content_close;
        if (c.empty()) return 0;
        size_t e = buf_.size();
        while (e > 0 && is_json_ws(buf_[e - 1])) --e;
        size_t s = e;
        if (e >= c.size() && buf_.compare(e - c.size(), c.size(), c) == 0) {
            s = e - c.size();
        } else if (final_) {
            return 0;
        } else if (e == buf_.size()) {
            for (size_t k = std::min(c.size() - 1, e); k > 0; --k)
                if (buf_.compare(e - k, k, c, 0, k) == 0) {
                    s = e - k;
                    break;
                }
        }
        while (s > 0 && is_json_ws(buf_[s - 1])) --s;
        return buf_.size() - s;
    }

    bool step() override {
        switch (st_) {
            case St::Start: {
                const size_t w = ws_at(0);
                if (w == buf_.size() && !final_) return false;
                const Match m = match(syn_.open, w);
                if (m == Match::Partial) return false;
                if (m == Match::Full) {
                    emit(Part::Marker, w + syn_.open.size());
                    st_ = St::Inside;
                } else {
                    st_ = St::Pass;
                    after_close_ = false;  // nothing was closed: leading whitespace is content
                }
                return true;
            }
            case St::Inside: {
                if (leading_) {
                    emit(Part::Marker, ws_at(0));
                    if (buf_.empty()) return false;
                    leading_ = false;
                }
                size_t w = 0;
                if (scan_until({syn_.close}, Part::Reasoning, w) < 0) return false;
                emit(Part::Marker, w + syn_.close.size());
                st_ = St::Pass;
                return true;
            }
            case St::Pass: {
                if (pass_start_) {
                    // Whitespace after the close marker touches it; so does whitespace
                    // before and after a content wrapper at the start.
                    const size_t w = ws_at(0);
                    if (after_close_) emit(Part::Marker, w);
                    const size_t at = after_close_ ? 0 : w;
                    if (at == buf_.size() && !final_) return false;
                    if (!syn_.content_open.empty() && at < buf_.size()) {
                        const Match m = match(syn_.content_open, at);
                        if (m == Match::Partial) return false;
                        if (m == Match::Full) {
                            emit(Part::Marker, at + syn_.content_open.size());
                            after_close_ = true;
                            syn_.content_open.clear();
                            return true;
                        }
                    }
                    pass_start_ = false;
                }
                const size_t keep = close_suffix();
                forward(buf_.size() - keep, final_);
                if (final_) emit(Part::Marker, buf_.size());  // the closing wrapper and its whitespace
                return false;
            }
        }
        return false;
    }

    ReasoningSyntax syn_;
    std::unique_ptr<SpanParser> inner_;
    St st_;
    bool leading_ = true;      // whitespace after the open marker touches it
    bool pass_start_ = true;   // at the start of what follows the reasoning
    bool after_close_ = true;  // ... and that follows a marker
};

}  // namespace

std::string_view reasoning_family_name(ReasoningFamily f) { return family_name(kFamilies, f); }

std::optional<ReasoningFamily> reasoning_family_from_name(std::string_view name) {
    return family_from_name(kFamilies, name);
}

std::string reasoning_family_names() { return family_names(kFamilies); }

ReasoningFamily detect_reasoning_family(std::string_view t) {
    if (has(t, "<|channel|>") && has(t, "<|message|>")) return ReasoningFamily::GptOss;
    if (has(t, "<|START_THINKING|>")) return ReasoningFamily::CommandR;
    if (has(t, "<think>") || has(t, "</think>"))
        return has(t, "<response>") ? ReasoningFamily::Granite : ReasoningFamily::Think;
    return ReasoningFamily::None;
}

ReasoningSyntax reasoning_syntax(ReasoningFamily f) {
    switch (f) {
        case ReasoningFamily::Think: return {"<think>", "</think>", "", ""};
        case ReasoningFamily::Granite: return {"<think>", "</think>", "<response>", "</response>"};
        case ReasoningFamily::CommandR:
            return {"<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"};
        case ReasoningFamily::None:
        case ReasoningFamily::GptOss: break;
    }
    return {};
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningSyntax& s) {
    if (s.open.empty()) return false;
    while (!prompt.empty() && is_json_ws(prompt.back())) prompt.remove_suffix(1);
    return prompt.ends_with(s.open);
}

std::unique_ptr<SpanParser> make_reasoning_parser(ReasoningSyntax s, bool inside, std::unique_ptr<SpanParser> inner) {
    return std::make_unique<ReasoningParser>(std::move(s), inside, std::move(inner));
}

}  // namespace loom::gateway
