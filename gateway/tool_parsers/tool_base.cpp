// Call readers and the generic JSON-section parser; see tool_base.hpp.
#include "gateway/tool_parsers/tool_base.hpp"

#include <algorithm>

namespace loom::gateway::tools {
namespace {

bool listed(const std::vector<std::string>& keys, const std::string& k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
}

}  // namespace

bool plausible_name(std::string_view name) {
    if (name.empty() || name.size() > kMaxName) return false;
    for (unsigned char c : name)
        if (c <= 0x20 || c == '"' || c == '\\' || c == '<' || c == '[' || c == 0x7f) return false;
    return true;
}

// ---- call objects ---------------------------------------------------------------

void ToolParserBase::begin_object(size_t at, const CallKeys& keys) {
    scan_ = JsonScanner();
    keys_ = &keys;
    origin_ = -static_cast<long long>(at);
    call_ = -1;
    args_begin_ = 0;
    args_end_ = std::string::npos;
}

void ToolParserBase::commit() {
    const auto& ms = scan_.members();
    const JsonScanner::Member* nm = nullptr;
    const JsonScanner::Member* am = nullptr;
    for (const auto& m : ms) {
        if (!nm && listed(keys_->names, m.key)) nm = &m;
        if (!am && listed(keys_->args, m.key)) am = &m;
    }
    auto idx = [&](size_t scan_offset) { return static_cast<size_t>(static_cast<long long>(scan_offset) - origin_); };
    const size_t nb = idx(nm->value_begin + 1), ne = idx(nm->value_end - 1);
    call_ = start_call(buf_.substr(nb, ne - nb));
    args_begin_ = am->value_begin;
    args_end_ = am->value_end;
    const size_t scanned = idx(scan_.pos());
    const size_t ab = idx(am->value_begin), ae = am->value_end == std::string::npos ? scanned : idx(am->value_end);
    // The held text in order: envelope, name and arguments (in either order), envelope.
    struct Run {
        size_t b, e;
        Part p;
    };
    Run runs[2] = {{nb, ne, Part::Name}, {ab, ae, Part::Arguments}};
    if (runs[1].b < runs[0].b) std::swap(runs[0], runs[1]);
    size_t at = 0;
    for (const Run& r : runs) {
        emit(Part::Marker, r.b - at);
        emit(r.p, r.e - r.b, call_);
        at = r.e;
    }
    emit(Part::Marker, scanned - at);
    origin_ = static_cast<long long>(scan_.pos());
}

void ToolParserBase::emit_scanned(size_t n) {
    size_t p = static_cast<size_t>(origin_);
    const size_t end = p + n;
    while (p < end) {
        const bool in = p >= args_begin_ && (args_end_ == std::string::npos || p < args_end_);
        size_t q = end;
        if (in && args_end_ != std::string::npos) q = std::min(end, args_end_);
        if (!in && p < args_begin_) q = std::min(end, args_begin_);
        emit(in ? Part::Arguments : Part::Marker, q - p, in ? call_ : -1);
        p = q;
    }
    origin_ = static_cast<long long>(end);
}

ToolParserBase::Read ToolParserBase::read_object() {
    auto index = [&](size_t scan_offset) { return static_cast<size_t>(static_cast<long long>(scan_offset) - origin_); };
    if (call_ < 0) {
        // Byte by byte until the commit, so that it happens at the same byte however
        // the text arrives.
        while (true) {
            const size_t next = index(scan_.pos());
            if (next > kMaxHeld) return Read::Failed;
            if (next >= buf_.size()) return final_ ? Read::Failed : Read::More;
            scan_.feed(std::string_view(buf_).substr(next, 1));
            if (scan_.error() || (scan_.kind() != 0 && scan_.kind() != '{')) return Read::Failed;
            const JsonScanner::Member* nm = nullptr;
            const JsonScanner::Member* am = nullptr;
            for (const auto& m : scan_.members()) {
                if (!nm && listed(keys_->names, m.key)) nm = &m;
                if (!am && listed(keys_->args, m.key)) am = &m;
            }
            if ((nm && nm->kind && nm->kind != '"') || (am && am->kind && am->kind != '{')) return Read::Failed;
            if (nm && nm->value_end != std::string::npos && am && am->value_begin != std::string::npos) {
                const size_t nb = index(nm->value_begin + 1);
                if (!plausible_name(std::string_view(buf_).substr(nb, nm->value_end - nm->value_begin - 2)))
                    return Read::Failed;
                commit();
                break;
            }
            if (scan_.done()) return Read::Failed;
        }
    }
    const size_t used = scan_.feed(std::string_view(buf_).substr(index(scan_.pos())));
    for (const auto& m : scan_.members())
        if (m.value_begin == args_begin_) args_end_ = m.value_end;
    emit_scanned(used);
    if (scan_.error()) {
        const size_t bad = scan_.pos() - 1;
        const bool in = bad >= args_begin_ && (args_end_ == std::string::npos || bad < args_end_);
        broken_part_ = in ? Part::Arguments : Part::Marker;
        return Read::Broken;
    }
    if (scan_.done() || final_) return Read::Closed;
    return Read::More;
}

bool ToolParserBase::cut_object() {
    if (call_ >= 0 || !keys_) return false;
    for (const auto& m : scan_.members()) {
        if (!listed(keys_->names, m.key) || m.value_end == std::string::npos || m.kind != '"') continue;
        const auto nb = static_cast<size_t>(static_cast<long long>(m.value_begin + 1) - origin_);
        const size_t len = m.value_end - m.value_begin - 2;
        if (nb + len > buf_.size() || !plausible_name(std::string_view(buf_).substr(nb, len))) return false;
        call_ = start_call(buf_.substr(nb, len));
        emit(Part::Marker, nb);
        emit(Part::Name, len, call_);
        return true;
    }
    return false;
}

void ToolParserBase::begin_args(int call) {
    scan_ = JsonScanner();
    call_ = call;
}

ToolParserBase::Read ToolParserBase::read_args() {
    const size_t used = scan_.feed(buf_);
    emit(Part::Arguments, used, call_);
    if (scan_.error()) {
        broken_part_ = Part::Arguments;
        return Read::Broken;
    }
    if (scan_.done() || final_) return Read::Closed;
    return Read::More;
}

// ---- the generic section parser ---------------------------------------------------

void JsonSectionParser::cut_call() {
    if (st_ == St::Object) cut_object();
}

JsonSectionParser::JsonSectionParser(JsonSyntax syntax, ToolParserOptions o)
    : ToolParserBase(o), syn_(std::move(syntax)), st_(syn_.at_start ? St::Start : St::Content) {
    syn_.ends.resize(syn_.starts.size());
    syn_.fences.resize(syn_.starts.size());
}

std::vector<std::string> JsonSectionParser::markers() const {
    std::vector<std::string> m;
    for (const auto* list : {&syn_.starts, &syn_.ends, &syn_.extra_markers})
        for (const auto& s : *list)
            if (!s.empty()) m.push_back(s);
    return m;
}

bool JsonSectionParser::step() {
    const St content = syn_.at_start ? St::Passthrough : St::Content;
    // Opens the section whose start marker (and whitespace) is buf_[0..skip_).
    auto open = [&] {
        first_item_ = true;
        if (start_ >= 0 && !syn_.fences[static_cast<size_t>(start_)].empty()) st_ = St::Fence;
        else if (syn_.array) st_ = St::ArrayOpen;
        else {
            begin_object(skip_, syn_.keys);
            st_ = St::Object;
        }
        return true;
    };
    // The section is not one: its held start becomes content.
    auto fail = [&] {
        emit(Part::Content, skip_);
        st_ = content;
        return true;
    };
    switch (st_) {
        case St::Start: {
            const size_t w = ws_at(0);
            if (w == buf_.size() && !final_) return false;
            for (size_t i = 0; i < syn_.starts.size(); ++i) {
                const Match m = match(syn_.starts[i], w);
                if (m == Match::Partial) return false;
                if (m == Match::Full) {
                    start_ = static_cast<int>(i);
                    skip_ = w + syn_.starts[i].size();
                    return open();
                }
            }
            if (w < buf_.size() && buf_[w] == (syn_.array ? '[' : '{')) {
                start_ = -1;
                skip_ = w;
                return open();
            }
            st_ = St::Passthrough;
            return true;
        }
        case St::Passthrough: emit(Part::Content, buf_.size()); return false;
        case St::Content: {
            size_t w = 0;
            const int m = scan_until(syn_.starts, Part::Content, w);
            if (m < 0) return false;
            start_ = m;
            skip_ = w + syn_.starts[static_cast<size_t>(m)].size();
            return open();
        }
        case St::Fence: {
            const std::string& fence = syn_.fences[static_cast<size_t>(start_)];
            const size_t w = ws_at(skip_);
            if (skip_ + w == buf_.size()) return final_ ? fail() : false;
            const Match m = match(fence, skip_ + w);
            if (m == Match::Partial) return false;
            if (m == Match::No) return fail();
            skip_ += w + fence.size();
            if (syn_.array) {
                st_ = St::ArrayOpen;
                return true;
            }
            begin_object(skip_, syn_.keys);
            st_ = St::Object;
            return true;
        }
        case St::ArrayOpen: {
            const size_t w = ws_at(skip_);
            if (skip_ + w == buf_.size()) return final_ ? fail() : false;
            if (buf_[skip_ + w] != '[') return fail();
            begin_object(skip_ + w + 1, syn_.keys);
            st_ = St::Object;
            return true;
        }
        case St::Object:
            switch (read_object()) {
                case Read::More: return false;
                case Read::Failed:
                    if (first_item_) return fail();
                    st_ = content;  // a later item is not a call: the rest is content
                    return true;
                case Read::Closed:
                    call_finished();
                    st_ = St::AfterObject;
                    return true;
                case Read::Broken: st_ = St::Tail; return true;
            }
            return false;
        case St::AfterObject: {
            emit(Part::Marker, ws_at(0));
            if (buf_.empty()) return false;
            if (syn_.array) {
                if (buf_[0] == ',' || buf_[0] == ']') {
                    st_ = buf_[0] == ',' ? St::NextItem : St::AfterSection;
                    emit(Part::Marker, 1);
                    return true;
                }
                st_ = content;  // the array ends early; what follows is content
                return true;
            }
            if (!syn_.separator.empty()) {
                const Match m = match(syn_.separator);
                if (m == Match::Partial) return false;
                if (m == Match::Full) {
                    emit(Part::Marker, syn_.separator.size());
                    st_ = St::NextItem;
                    return true;
                }
            }
            st_ = St::AfterSection;
            return true;
        }
        case St::NextItem:  // after a separator: its whitespace, then the next call
            emit(Part::Marker, ws_at(0));
            if (buf_.empty()) return false;
            first_item_ = false;
            begin_object(0, syn_.keys);
            st_ = St::Object;
            return true;
        case St::AfterSection: {
            emit(Part::Marker, ws_at(0));
            const std::string& end = start_ >= 0 ? syn_.ends[static_cast<size_t>(start_)] : std::string();
            if (!end.empty()) {
                if (buf_.empty()) return false;
                const Match m = match(end);
                if (m == Match::Partial) return false;
                if (m == Match::Full) emit(Part::Marker, end.size());
            }
            st_ = St::AfterEnd;
            return true;
        }
        case St::AfterEnd:
            emit(Part::Marker, ws_at(0));
            if (buf_.empty()) return false;
            st_ = content;
            return true;
        case St::Tail: {
            const std::string& end = start_ >= 0 ? syn_.ends[static_cast<size_t>(start_)] : std::string();
            const Part p = broken_part();
            const int call = p == Part::Marker ? -1 : broken_call();
            if (end.empty()) {
                emit(p, buf_.size(), call);
                return false;
            }
            size_t w = 0;
            if (scan_until({end}, p, w, call) < 0) return false;
            emit(Part::Marker, w + end.size());
            st_ = St::AfterEnd;
            return true;
        }
    }
    return false;
}

}  // namespace loom::gateway::tools
