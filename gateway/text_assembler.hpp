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
//
// Source: the OpenAI API reference (`stop`: "the returned text will not contain the
// stop sequence"; `echo`: the prompt is returned before the completion; logprob
// `bytes`: the UTF-8 bytes of the token, which may split a character).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

/// One token of output as the client sees it.
struct LogprobEntry {
    int32_t token = 0;
    std::string bytes;     ///< exact bytes it contributes (trimmed at a stop)
    bool special = false;  ///< control token (chat: bytes are null in JSON)
    float logprob = 0;
    bool has_logprob = true;  ///< false for the first prompt token under echo
    bool echoed = false;      ///< a prompt token (echo), not a generated one
    std::vector<protocol::TokenLogprob> top;
};

/// What may be sent to the client now.
struct Released {
    std::string text;
    std::vector<LogprobEntry> entries;
    bool empty() const { return text.empty() && entries.empty(); }
};

/// One choice's assembler: feed it the echoed prompt tokens (push_prompt), then the
/// generated tokens (push), then finish(); send what each call releases. Not
/// thread-safe; one per choice.
class TextAssembler {
public:
    /// `stops`: up to 4 non-empty stop strings. `specials_as_text`: a special token
    /// contributes its vocabulary text (completions, like a decode that keeps special
    /// tokens); otherwise it contributes no bytes (chat, where its `bytes` are null).
    TextAssembler(const model::Tokenizer& tok, std::vector<std::string> stops, bool specials_as_text = false);

    /// Adds one prompt token for `echo`, before any generated token. Stop strings are
    /// never matched in the prompt. `plp`: its prompt logprobs (PLP line), or null
    /// when there are none (the entry then has no logprob, as for prompt index 0).
    /// `text`: what the token adds to the released text (the echoed prompt as sent, see
    /// align_prompt_text(): nothing for an added BOS, no dummy-prefix space), which its
    /// entry's bytes then are, so that the entries still join to the text; null: its
    /// own bytes.
    Released push_prompt(int32_t token, const protocol::PromptLogprobs* plp, const std::string* text = nullptr);

    /// Adds one generated token (with its LP data when logprobs were asked for) and
    /// returns what became releasable. After a stop string matched, returns nothing.
    Released push(int32_t token, const protocol::Logprobs* lp);

    /// The generation ended (DONE): releases everything held back, including bytes
    /// that never formed a complete UTF-8 character (JSON writes those as U+FFFD).
    /// Returns nothing after a stop string matched.
    Released finish();

    /// True once a stop string matched: the caller cancels the engine request and
    /// reports finish_reason "stop".
    bool stopped() const { return stopped_; }

    /// Generated tokens pushed so far (up to and including the one that completed a
    /// stop string); prompt tokens are not counted.
    int64_t generated() const { return generated_; }

private:
    LogprobEntry make_entry(int32_t token) const;
    Released release(size_t n_tokens, size_t n_bytes);
    Released cut_at_stop(size_t cut);
    size_t releasable_tokens(size_t limit) const;

    const model::Tokenizer& tok_;
    std::vector<std::string> stops_;
    bool specials_as_text_ = false;
    std::string pending_;                // bytes not yet released
    std::vector<LogprobEntry> entries_;  // entries not yet released, in order
    std::vector<size_t> ends_;           // end offset in pending_ of each held entry
    size_t prompt_pending_ = 0;          // leading bytes of pending_ that are echoed prompt
    int64_t generated_ = 0;
    bool stopped_ = false;
};

/// Length of the longest prefix of `s` that is complete UTF-8: it ends neither inside
/// a character nor inside a sequence that could still become one. An invalid sequence
/// counts as complete (it can never become valid). Follows RFC 3629.
size_t complete_utf8_prefix(std::string_view s);

/// `s` with each maximal invalid UTF-8 subpart replaced by one U+FFFD, the Unicode
/// Standard's recommended practice (chapter 3, "U+FFFD Substitution of Maximal
/// Subparts"), which Python's and WHATWG's UTF-8 decoders follow. JSON strings must be
/// UTF-8, so text that is not valid is written this way.
std::string sanitize_utf8(std::string_view s);

/// True when `s` is valid UTF-8 (RFC 3629: no overlongs, surrogates or values past
/// U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace loom::gateway
