// The output parsers' shared buffer and span machinery; see span_parser.hpp.
#include "gateway/span_parser.hpp"

#include <algorithm>

namespace loom::gateway {

void SpanParser::feed(std::string_view text, bool final, std::vector<Span>& out, bool cut) {
    out_ = &out;
    buf_.append(text);
    // A cut output is first read as if more could come, so that only the text held back
    // for what might follow remains.
    final_ = final && !cut;
    while (true) {
        if (done_) {
            emit(Part::Marker, buf_.size());
            break;
        }
        if (!step()) break;
    }
    if (final && cut) {
        if (!done_) cut_call();
        emit(Part::Marker, buf_.size());
        final_ = true;
    }
    // Every state decides all of its text at the end; should one not, the text is
    // content rather than lost.
    if (final_ && !buf_.empty()) emit(Part::Content, buf_.size());
    out_ = nullptr;
}

void SpanParser::emit(Part part, size_t n, int call) {
    n = std::min(n, buf_.size());
    if (n == 0) return;
    if (!out_->empty() && out_->back().part == part && out_->back().call == call && part != Part::CallStart)
        out_->back().len += n;
    else out_->push_back(Span{part, n, call, {}});
    buf_.erase(0, n);
}

int SpanParser::start_call(std::string name) {
    const int index = calls_++;
    out_->push_back(Span{Part::CallStart, 0, index, std::move(name)});
    return index;
}

int SpanParser::start_named_call(size_t name_at, size_t name_end, size_t body_at) {
    const int call = start_call(buf_.substr(name_at, name_end - name_at));
    emit(Part::Marker, name_at);
    emit(Part::Name, name_end - name_at, call);
    emit(Part::Marker, body_at - name_end);
    return call;
}

SpanParser::Match SpanParser::match(std::string_view lit, size_t at) const {
    if (at > buf_.size()) return Match::No;
    const std::string_view rest = std::string_view(buf_).substr(at);
    if (rest.size() >= lit.size()) return rest.compare(0, lit.size(), lit) == 0 ? Match::Full : Match::No;
    if (final_) return Match::No;
    return lit.compare(0, rest.size(), rest) == 0 ? Match::Partial : Match::No;
}

size_t SpanParser::ws_at(size_t at) const {
    size_t n = 0;
    while (at + n < buf_.size() && is_json_ws(buf_[at + n])) ++n;
    return n;
}

int SpanParser::scan_until(const std::vector<std::string>& ends, Part part, size_t& ws, int call) {
    ws = 0;
    size_t best = std::string::npos;
    int which = -1;
    for (size_t i = 0; i < ends.size(); ++i) {
        const size_t p = buf_.find(ends[i]);
        if (p == std::string::npos) continue;
        if (p < best || (p == best && ends[i].size() > ends[static_cast<size_t>(which)].size())) {
            best = p;
            which = static_cast<int>(i);
        }
    }
    if (which >= 0) {
        size_t w = 0;
        while (w < best && is_json_ws(buf_[best - w - 1])) ++w;
        emit(part, best - w, call);
        ws = w;
        return which;
    }
    size_t keep = 0;
    if (!final_ && !ends.empty()) {
        // The longest suffix that is a proper prefix of an end marker...
        for (const std::string& e : ends)
            for (size_t len = std::min(e.size() - 1, buf_.size()); len > keep; --len)
                if (buf_.compare(buf_.size() - len, len, e, 0, len) == 0) {
                    keep = len;
                    break;
                }
        // ...and the whitespace before it, which would touch the marker.
        size_t h = buf_.size() - keep;
        while (h > 0 && is_json_ws(buf_[h - 1])) --h;
        keep = buf_.size() - h;
    }
    emit(part, buf_.size() - keep, call);
    return -1;
}

}  // namespace loom::gateway
