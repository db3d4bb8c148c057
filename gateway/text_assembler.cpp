// Incremental detokenizer, stop matcher and logprob aligner; see text_assembler.hpp.
#include "gateway/text_assembler.hpp"

#include <algorithm>

namespace loom::gateway {
namespace {

// The UTF-8 sequence starting at s[i] (RFC 3629): its length when it is complete and
// valid; 0 when s[i..] ends while the sequence is still a valid prefix; otherwise
// -k, where k >= 1 is the length of its maximal subpart (the longest valid prefix of
// a sequence, or 1), which is replaced by one U+FFFD.
int utf8_seq(std::string_view s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;  // no overlongs
        if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;  // no overlongs
        if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
        return -1;
    }
    for (int k = 1; k < len; ++k) {
        if (i + static_cast<size_t>(k) >= s.size()) return 0;
        const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -k;
    }
    return len;
}

}  // namespace

size_t complete_utf8_prefix(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const int n = utf8_seq(s, i);
        if (n == 0) break;
        i += static_cast<size_t>(n < 0 ? -n : n);
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
            i = n == 0 ? s.size() : i + static_cast<size_t>(-n);  // 0: a truncated tail
        }
    }
    return out;
}

TextAssembler::TextAssembler(const model::Tokenizer& tok, std::vector<std::string> stops, bool specials_as_text)
    : tok_(tok), stops_(std::move(stops)), specials_as_text_(specials_as_text) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

LogprobEntry TextAssembler::make_entry(int32_t token) const {
    LogprobEntry e;
    e.token = token;
    e.special = tok_.vocab().is_special(token);
    if (e.special && specials_as_text_ && token >= 0 && token < tok_.n_vocab())
        e.bytes = tok_.vocab().tokens[static_cast<size_t>(token)];
    else e.bytes = tok_.token_bytes(token);
    return e;
}

Released TextAssembler::release(size_t n_tokens, size_t n_bytes) {
    Released r;
    r.text = pending_.substr(0, n_bytes);
    pending_.erase(0, n_bytes);
    prompt_pending_ -= std::min(prompt_pending_, n_bytes);
    const auto n = static_cast<std::ptrdiff_t>(n_tokens);
    r.entries.assign(std::make_move_iterator(entries_.begin()), std::make_move_iterator(entries_.begin() + n));
    entries_.erase(entries_.begin(), entries_.begin() + n);
    ends_.erase(ends_.begin(), ends_.begin() + n);
    for (size_t& e : ends_) e -= n_bytes;
    return r;
}

// How many held tokens may go out when at most `limit` bytes may: whole tokens only,
// ending where no UTF-8 character is split.
size_t TextAssembler::releasable_tokens(size_t limit) const {
    size_t n = 0;
    while (n < entries_.size() && ends_[n] <= limit) ++n;
    while (n > 0) {
        const size_t end = ends_[n - 1];
        if (complete_utf8_prefix(std::string_view(pending_).substr(0, end)) == end) break;
        --n;
    }
    return n;
}

Released TextAssembler::push_prompt(int32_t token, const protocol::PromptLogprobs* plp, const std::string* text) {
    if (stopped_ || generated_ > 0) return {};  // echo precedes the completion
    LogprobEntry e = make_entry(token);
    e.echoed = true;
    if (text) e.bytes = *text;
    e.has_logprob = plp && plp->logprob.has_value();
    if (e.has_logprob) {
        e.logprob = *plp->logprob;
        e.top = plp->top;
    }
    pending_ += e.bytes;
    prompt_pending_ = pending_.size();
    entries_.push_back(std::move(e));
    ends_.push_back(pending_.size());
    const size_t n = releasable_tokens(complete_utf8_prefix(pending_));
    return release(n, n ? ends_[n - 1] : 0);
}

Released TextAssembler::cut_at_stop(size_t cut) {
    stopped_ = true;
    // Keep the entries that start before the cut (and empty special tokens at it); a
    // token straddling the cut keeps only its bytes before it.
    size_t n = 0, start = 0;
    while (n < entries_.size() && (start < cut || (start == cut && entries_[n].bytes.empty()))) {
        if (ends_[n] > cut) entries_[n].bytes.resize(cut - start);
        start = ends_[n];
        ends_[n] = std::min(ends_[n], cut);
        ++n;
    }
    pending_.resize(cut);
    return release(n, cut);
}

Released TextAssembler::push(int32_t token, const protocol::Logprobs* lp) {
    if (stopped_) return {};
    ++generated_;
    LogprobEntry e = make_entry(token);
    if (lp) {
        e.logprob = lp->logprob;
        e.top = lp->top;
    }
    pending_ += e.bytes;
    entries_.push_back(std::move(e));
    ends_.push_back(pending_.size());

    // Stop strings start in the generated text, never in the echoed prompt. Held text
    // holds no complete stop string, so the first match is the earliest one.
    const size_t from = prompt_pending_;
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) cut = std::min(cut, pending_.find(s, from));
    if (cut != std::string::npos) return cut_at_stop(cut);

    // Hold back a generated suffix that could still grow into a stop string, and an
    // unfinished UTF-8 character.
    size_t limit = complete_utf8_prefix(pending_);
    for (const std::string& s : stops_) {
        const size_t room = pending_.size() - from;
        for (size_t len = std::min(s.size() - 1, room); len > 0; --len)
            if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
                limit = std::min(limit, pending_.size() - len);
                break;
            }
    }
    const size_t n = releasable_tokens(limit);
    return release(n, n ? ends_[n - 1] : 0);
}

Released TextAssembler::finish() {
    if (stopped_) return {};
    return release(entries_.size(), pending_.size());
}

}  // namespace loom::gateway
