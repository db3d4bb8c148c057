// One choice of a generation request, that is one engine request: its text assembler,
// the progress of its echo, the text kept for a whole (non-streamed) response, its
// finish reason and token count. It turns the engine's events into what may be sent.
//
// Source: the OpenAI API reference (choices[].index = prompt_index * n + i; `echo`: the
// prompt comes before the completion; finish_reason "stop" or "length"; usage counts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/api_types.hpp"
#include "gateway/output_split.hpp"
#include "gateway/response_json.hpp"
#include "gateway/text_assembler.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

/// What each prompt token adds to an echoed prompt `text` (the prompt as the client sent
/// it, which `ids` tokenize): its own bytes where the text has them next; without the
/// leading space where the text lacks it (SentencePiece's dummy prefix); nothing for a
/// special token the text does not spell (an added BOS). A token the walk cannot match
/// gets the rest of the text (and later ones nothing), so the pieces always join to
/// exactly `text`.
std::vector<std::string> align_prompt_text(const model::Tokenizer& tok, const std::vector<int32_t>& ids,
                                           const std::string& text);

/// The state of one choice from its GEN to its DONE or ERR. Not thread-safe.
class Choice {
public:
    /// Choice `index` of `req`, generating after req.prompts[prompt_index]. Keeps
    /// references to `tok` and `req`, which must outlive it. Completions spell special
    /// tokens with their text; chat gives them no bytes (TextAssembler).
    Choice(const model::Tokenizer& tok, const GenerationRequest& req, int index, size_t prompt_index);

    /// The engine request id (EngineClient::submit); used to cancel it.
    std::string engine_id;

    /// The OpenAI choice index (prompt_index * n + i).
    int index() const { return index_; }
    /// Which of the request's prompts this choice continues.
    size_t prompt_index() const { return prompt_index_; }

    /// A generated token, with its LP values when logprobs were asked for. Releases the
    /// echoed prompt tokens still held back (all of them when no PLP lines came), then
    /// what the token made releasable. Returns nothing once a stop string matched.
    Released on_token(int32_t token, const protocol::Logprobs* lp);

    /// A PLP line: releases the next echoed prompt token with its logprobs. Returns
    /// nothing when the choice does not echo or the line is not for the next token.
    Released on_prompt_logprobs(const protocol::PromptLogprobs& plp);

    /// The engine's DONE: the choice ends with finish reason "length" when the engine
    /// says so and no stop string matched, else "stop". Releases the rest of the echo
    /// and everything held back.
    Released on_done(const protocol::Done& d);

    /// The engine's ERR ended the choice (no finish reason).
    void on_error() { done_ = true; }

    /// True after DONE or ERR.
    bool done() const { return done_; }
    /// True once a stop string matched (the engine request is then cancelled).
    bool stopped() const { return text_asm_.stopped(); }
    /// "stop", "length" or (a chat that made tool calls) "tool_calls" after DONE;
    /// nullopt before, or after ERR.
    std::optional<std::string> finish_reason() const;
    /// True once, when the output parser wants the generation to end (the first call
    /// is complete and parallel_tool_calls is false): the caller cancels the engine
    /// request.
    bool take_output_end();
    /// Tokens this choice generated, for `usage`: those up to and including the one
    /// that completed a stop string, else DONE's completion_tokens.
    int64_t completion_tokens() const;
    /// DONE's cached_tokens: prompt tokens the engine took from its prefix cache.
    int64_t cached_tokens() const { return cached_tokens_; }

    /// Non-streamed: appends `rel` to the text and entries kept for the response.
    void keep(Released rel);
    /// Streamed: the chunks of `rel` with `finish` on the last (none when there is
    /// nothing to send); a text_offset is the number of characters this choice sent
    /// before it. A chat whose output is split (tool calls, reasoning) sends content and
    /// reasoning in one chunk, then one chunk per tool-call delta. With
    /// continuous_usage_stats each chunk carries the choice's usage so far.
    std::vector<ChoiceOut> chunks(Released rel, std::optional<std::string> finish);
    /// Non-streamed: the whole choice (kept text and entries, finish reason); moves the
    /// kept text and entries out.
    ChoiceOut take_whole();

private:
    Released echo_rest();
    Released echo_token(const protocol::PromptLogprobs* plp);
    SplitDelta split(Released rel);  // through split_, finishing it after DONE

    const GenerationRequest& req_;
    int index_ = 0;
    size_t prompt_index_ = 0;
    TextAssembler text_asm_;
    bool echo_ = false;                   // prompt tokens are still to be echoed
    size_t echo_next_ = 0;                // next prompt token to echo
    std::vector<std::string> echo_text_;  // per prompt token: what it adds to the text (a text prompt)
    std::vector<std::optional<protocol::PromptLogprobs>> plps_;  // prompt_logprobs: the PLP lines by index
    std::vector<int32_t> token_ids_;  // return_token_ids: generated ids not yet sent (streamed) or all
    bool prompt_sent_ = false;        // streamed: the prompt's extras went out with a chunk
    void attach_extras(ChoiceOut& out, bool first);
    std::string text_;                   // non-streamed: all released text
    std::vector<LogprobEntry> entries_;  // non-streamed: all released entries
    std::optional<std::string> finish_;
    int64_t engine_tokens_ = 0;  // completion_tokens from DONE
    int64_t cached_tokens_ = 0;  // cached_tokens from DONE
    int64_t char_offset_ = 0;    // characters already sent (text_offset)
    bool done_ = false;
    std::unique_ptr<OutputSplitter> split_;  // chat with tool calls or reasoning to split off
    std::string reasoning_;                  // non-streamed, split: all reasoning
    std::vector<LogprobEntry> reasoning_entries_;
    std::vector<ToolCallDelta> calls_;  // non-streamed, split: each call whole
    bool output_end_taken_ = false;
};

}  // namespace loom::gateway
