// Turns one choice's stream of tokens (with their logprobs) into released text and
// logprob entries that spell exactly that text: an incremental detokenizer, a
// stop-string matcher and a logprob aligner in one.
//
// Invariant: the bytes of the released entries, joined, equal the released text.
// Text is released only at token boundaries, only as complete UTF-8, and never while
// it could still be the start of a stop string; a held-back token holds back its
// entry too (as vLLM's incremental detokenizer holds back partial characters).
// When a stop string appears, the text ends before it; a token that straddles its
// start keeps its logprob but only the bytes before the stop.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

/// One token of output as the client sees it.
struct LogprobEntry {
    int32_t token = 0;
    std::string bytes;                     ///< exact bytes it contributes (trimmed at a stop)
    bool special = false;                  ///< control token: bytes are null in JSON
    float logprob = 0;
    bool has_logprob = true;               ///< false for the first prompt token under echo
    std::vector<protocol::TokenLogprob> top;
};

/// What may be sent to the client now.
struct Released {
    std::string text;
    std::vector<LogprobEntry> entries;
    bool empty() const { return text.empty() && entries.empty(); }
};

class TextAssembler {
public:
    /// `stops`: up to 4 non-empty stop strings.
    TextAssembler(const model::Tokenizer& tok, std::vector<std::string> stops);

    /// Adds one generated token (with its LP data when logprobs were asked for) and
    /// returns what became releasable. After a stop string matched, returns nothing.
    Released push(int32_t token, const protocol::Logprobs* lp);

    /// The generation ended (DONE): releases what is held back for a possible stop
    /// string. Bytes that never formed a complete UTF-8 character stay unreleased,
    /// with their entries, so the invariant holds.
    Released finish();

    /// True once a stop string matched: the caller cancels the engine request and
    /// reports finish_reason "stop".
    bool stopped() const { return stopped_; }

private:
    Released release(size_t n_tokens, size_t n_bytes);

    const model::Tokenizer& tok_;
    std::vector<std::string> stops_;
    std::string pending_;                 // bytes not yet released
    std::vector<LogprobEntry> entries_;   // entries not yet released, in order
    std::vector<size_t> ends_;            // end offset in pending_ of each held entry
    bool stopped_ = false;
};

/// Length of the longest prefix of `s` that is complete, valid UTF-8, treating an
/// invalid byte sequence as complete (it can never become valid).
size_t complete_utf8_prefix(std::string_view s);

/// `s` with each invalid UTF-8 sequence replaced by U+FFFD (JSON strings must be UTF-8).
std::string sanitize_utf8(std::string_view s);

/// True when `s` is valid UTF-8.
bool valid_utf8(std::string_view s);

}  // namespace loom::gateway
