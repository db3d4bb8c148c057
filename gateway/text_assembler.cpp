// Incremental detokenizer, stop matcher and logprob aligner; see text_assembler.hpp.
#include "gateway/text_assembler.hpp"

#include <algorithm>

namespace loom::gateway {
namespace {

// Length of the UTF-8 sequence starting at s[i], 0 when s[i..] is an incomplete
// but so far valid sequence, or -1 when the bytes at i are invalid (RFC 3629).
int utf8_seq(std::string_view s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int k = 1; k < len; ++k) {
        if (i + static_cast<size_t>(k) >= s.size()) return 0;
        const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -1;
    }
    return len;
}

}  // namespace

size_t complete_utf8_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const int n = utf8_seq(s, i);
        if (n == 0) break;
        i += n < 0 ? 1 : static_cast<size_t>(n);
    }
    return i;
}

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const int n = utf8_seq(s, i);
        if (n <= 0) return false;
        i += static_cast<size_t>(n);
    }
    return true;
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const int n = utf8_seq(s, i);
        if (n > 0) {
            out.append(s.substr(i, static_cast<size_t>(n)));
            i += static_cast<size_t>(n);
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

TextAssembler::TextAssembler(const model::Tokenizer& tok, std::vector<std::string> stops)
    : tok_(tok), stops_(std::move(stops)) {}

Released TextAssembler::release(size_t n_tokens, size_t n_bytes) {
    Released r;
    r.text = pending_.substr(0, n_bytes);
    pending_.erase(0, n_bytes);
    r.entries.assign(std::make_move_iterator(entries_.begin()),
                     std::make_move_iterator(entries_.begin() + static_cast<std::ptrdiff_t>(n_tokens)));
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(n_tokens));
    ends_.erase(ends_.begin(), ends_.begin() + static_cast<std::ptrdiff_t>(n_tokens));
    for (size_t& e : ends_) e -= n_bytes;
    return r;
}

Released TextAssembler::push(int32_t token, const protocol::Logprobs* lp) {
    if (stopped_) return {};
    LogprobEntry e;
    e.token = token;
    e.special = tok_.vocab().is_special(token);
    e.bytes = tok_.token_bytes(token);
    if (lp) {
        e.logprob = lp->logprob;
        e.top = lp->top;
    }
    pending_ += e.bytes;
    entries_.push_back(std::move(e));
    ends_.push_back(pending_.size());

    // A stop string: end the text just before its first occurrence.
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) cut = std::min(cut, pending_.find(s));
    if (cut != std::string::npos) {
        stopped_ = true;
        // Keep the entries that start before the cut (and empty special tokens at it).
        size_t n = 0, start = 0;
        while (n < entries_.size() && (start < cut || (start == cut && entries_[n].bytes.empty()))) {
            if (ends_[n] > cut) entries_[n].bytes.resize(cut - start);
            start = ends_[n];
            ++n;
        }
        pending_.resize(cut);
        for (size_t k = 0; k < n; ++k) ends_[k] = std::min(ends_[k], cut);
        return release(n, cut);
    }

    // Hold back a suffix that could still grow into a stop string.
    size_t safe = complete_utf8_prefix(pending_);
    for (const std::string& s : stops_)
        for (size_t len = std::min(s.size() - 1, safe); len > 0; --len)
            if (pending_.compare(safe - len, len, s, 0, len) == 0) {
                safe -= len;
                break;
            }
    // Release whole tokens only.
    size_t n = 0;
    while (n < entries_.size() && ends_[n] <= safe) ++n;
    const size_t bytes = n ? ends_[n - 1] : 0;
    if (n == 0 || complete_utf8_prefix(std::string_view(pending_).substr(0, bytes)) != bytes) return {};
    return release(n, bytes);
}

Released TextAssembler::finish() {
    if (stopped_) return {};
    // Everything that is complete UTF-8 goes out; an unfinished character stays.
    const size_t safe = complete_utf8_prefix(pending_);
    size_t n = 0;
    while (n < entries_.size() && ends_[n] <= safe) ++n;
    return release(n, n ? ends_[n - 1] : 0);
}

}  // namespace loom::gateway
