// Output splitting into content, reasoning and tool calls; see output_split.hpp.
#include "gateway/output_split.hpp"

#include <algorithm>
#include <random>

namespace loom::gateway {

std::unique_ptr<SpanParser> make_output_parser(const OutputOptions& o) {
    const ToolParserOptions topts{o.parallel, o.calls};
    if (!o.constrained && (o.reasoning == ReasoningFamily::GptOss || o.tools == ToolFamily::GptOss))
        return make_tool_parser(ToolFamily::GptOss, {o.parallel, o.calls && o.tools == ToolFamily::GptOss});
    std::unique_ptr<SpanParser> inner = o.constrained ? make_constrained_parser(o.function, topts)
                                        : o.calls     ? make_tool_parser(o.tools, topts)
                                                      : nullptr;
    if (o.constrained && o.reasoning == ReasoningFamily::GptOss) return inner;
    if (o.reasoning != ReasoningFamily::None)
        return make_reasoning_parser(reasoning_syntax(o.reasoning), o.inside_reasoning, std::move(inner));
    return inner;
}

std::string new_call_id(ToolFamily f) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof alnum - 2);
    const bool mistral = f == ToolFamily::Mistral;
    std::string id = mistral ? "" : "call_";
    for (int i = 0; i < (mistral ? 9 : 24); ++i) id += alnum[pick(rng)];
    return id;
}

OutputSplitter::OutputSplitter(const model::Tokenizer& tok, std::unique_ptr<SpanParser> parser,
                               std::function<std::string()> new_id)
    : tok_(tok), parser_(std::move(parser)), new_id_(std::move(new_id)) {
    if (parser_) markers_ = parser_->markers();
}

std::string OutputSplitter::finish_reason(const std::string& engine_reason) const {
    return calls_ > 0 && engine_reason != "length" ? "tool_calls" : engine_reason;
}

void OutputSplitter::flush_headers(int upto, SplitDelta& d) {
    while (!headers_.empty() && headers_.front().index <= upto) {
        d.calls.push_back(std::move(headers_.front()));
        headers_.erase(headers_.begin());
    }
}

void OutputSplitter::give(Part part, int call, LogprobEntry e, SplitDelta& d) {
    switch (part) {
        case Part::Content:
            d.content += e.bytes;
            d.content_entries.push_back(std::move(e));
            return;
        case Part::Reasoning:
            d.reasoning += e.bytes;
            d.reasoning_entries.push_back(std::move(e));
            return;
        case Part::Name:
        case Part::Arguments: {
            flush_headers(call, d);  // a call's header goes before anything of it
            const bool name = part == Part::Name;
            // The name goes with its call's header; arguments into the call's latest
            // argument delta of this piece, or a new one.
            ToolCallDelta* t = nullptr;
            for (auto it = d.calls.rbegin(); it != d.calls.rend(); ++it)
                if (it->index == call) {
                    if (name ? it->header : !it->header) t = &*it;
                    break;
                }
            if (!t) {
                d.calls.push_back(ToolCallDelta{});
                t = &d.calls.back();
                t->index = call;
            }
            if (name) {
                t->name_entries.push_back(std::move(e));
            } else {
                t->arguments += e.bytes;
                t->arg_entries.push_back(std::move(e));
            }
            return;
        }
        case Part::Marker:
        case Part::CallStart: return;
    }
}

void OutputSplitter::Held::add(Part part, int call, std::string_view bytes) {
    if (!pieces.empty() && pieces.back().part == part && pieces.back().call == call) {
        pieces.back().bytes.append(bytes);
        return;
    }
    pieces.push_back(Piece{part, call, std::string(bytes)});
}

void OutputSplitter::apply(const std::vector<Span>& spans, SplitDelta& d) {
    size_t i = 0;  // held entries before i are wholly decided
    for (const Span& s : spans) {
        if (s.part == Part::CallStart) {
            ToolCallDelta h;
            h.index = s.call;
            h.header = true;
            h.id = new_id_();
            h.name = s.name;
            headers_.push_back(std::move(h));
            calls_ = std::max(calls_, s.call + 1);
            continue;
        }
        const size_t a = decided_, b = decided_ + s.len;
        last_part_ = s.part;
        last_call_ = s.call;
        for (; i < held_.size(); ++i) {
            Held& h = held_[i];
            if (h.begin >= b) break;
            if (h.begin == h.end) {  // no parse text: it goes where it stands
                h.add(s.part, s.call, {});
                continue;
            }
            if (h.spelled) {
                if (h.begin >= a) h.add(s.part, s.call, {});  // where its text begins
            } else {
                const size_t o1 = std::max(a, h.begin), o2 = std::min(b, h.end);
                h.add(s.part, s.call, std::string_view(parse_).substr(o1 - base_, o2 - o1));
            }
            if (h.end > b) break;  // it goes on into the next span
        }
        decided_ = b;
    }
    // Entries wholly decided go out, one per part they fell in (the token split where
    // its bytes cross a part boundary; nothing for markers).
    for (size_t k = 0; k < i; ++k)
        for (Held::Piece& p : held_[k].pieces) {
            LogprobEntry e = held_[k].e;
            e.bytes = std::move(p.bytes);
            give(p.part, p.call, std::move(e), d);
        }
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(i));
    const size_t keep_from = held_.empty() ? decided_ : std::min(decided_, held_.front().begin);
    parse_.erase(0, keep_from - base_);
    base_ = keep_from;
}

SplitDelta OutputSplitter::push(const Released& r) {
    SplitDelta d;
    if (!parser_) {
        d.content = r.text;
        d.content_entries = r.entries;
        return d;
    }
    std::string text;
    for (const LogprobEntry& e : r.entries) {
        bool spelled = false;
        std::string_view pt = e.bytes;
        if (e.special && e.token >= 0 && e.token < tok_.n_vocab()) {
            const std::string& v = tok_.vocab().tokens[static_cast<size_t>(e.token)];
            if (std::find(markers_.begin(), markers_.end(), v) != markers_.end()) {
                pt = v;
                spelled = true;
            }
        }
        held_.push_back(Held{e, next_, next_ + pt.size(), spelled, {}});
        text.append(pt);
        next_ += pt.size();
    }
    parse_ += text;
    std::vector<Span> spans;
    parser_->feed(text, false, spans);
    apply(spans, d);
    return d;
}

SplitDelta OutputSplitter::finish(bool cut) {
    SplitDelta d;
    if (!parser_) return d;
    std::vector<Span> spans;
    parser_->feed({}, true, spans, cut);
    apply(spans, d);
    // What is left has no parse text (special tokens at the very end): it joins the
    // last part.
    for (Held& h : held_) {
        for (Held::Piece& p : h.pieces) {
            LogprobEntry e = h.e;
            e.bytes = std::move(p.bytes);
            give(p.part, p.call, std::move(e), d);
        }
        if (h.pieces.empty()) give(last_part_, last_call_, std::move(h.e), d);
    }
    held_.clear();
    flush_headers(calls_, d);
    return d;
}

}  // namespace loom::gateway
