// JSON bodies of OpenAI responses, stream chunks and errors.
//
// Source: the OpenAI API reference: the chat completion object and chunk
// (choices[].message / delta, logprobs.content[] = {token, logprob, bytes,
// top_logprobs}), the legacy completion object (logprobs = {tokens, token_logprobs,
// top_logprobs, text_offset}), and the error object. Logprobs are written as the
// shortest decimal that reads back to the same float32; -inf is written as -9999.0.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gateway/api_types.hpp"
#include "gateway/output_split.hpp"
#include "gateway/text_assembler.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// Token counts for `usage` (total_tokens is their sum). cached_tokens, the prompt tokens
/// served from the engine's prefix cache, is written as prompt_tokens_details.cached_tokens
/// (OpenAI's field) when > 0.
struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
};

/// One choice's content for a response or a chunk.
struct ChoiceOut {
    int index = 0;
    std::string text;                   ///< released text (any bytes; written as valid UTF-8)
    std::vector<LogprobEntry> entries;  ///< logprob entries that spell `text`
    std::optional<std::string> finish_reason;
    int64_t text_offset = 0;   ///< completions: characters before `text` in this choice
    bool first_chunk = false;  ///< chat streams: the first chunk carries the role
    /// vLLM's prompt_logprobs (one per prompt token; the first has no value), when asked
    /// for; chat writes them at the top level. Not owned.
    const std::vector<std::optional<protocol::PromptLogprobs>>* prompt_logprobs = nullptr;
    /// The prompt's token ids (not owned): written as prompt_token_ids when
    /// `prompt_ids_out`; needed with prompt_logprobs.
    const std::vector<int32_t>* prompt = nullptr;
    bool prompt_ids_out = false;
    /// vLLM's return_token_ids: the ids generated in this choice or chunk.
    std::optional<std::vector<int32_t>> token_ids;
    /// Chat, when the output was split (gateway/output_split.hpp): `text` and
    /// `entries` are the content; reasoning_content and its entries; the tool calls
    /// (a full response: one complete ToolCallDelta per call, header set; a chunk: its
    /// deltas). Their logprobs go in logprobs.reasoning_content and logprobs.tool_calls.
    std::string reasoning;
    std::vector<LogprobEntry> reasoning_entries;
    std::vector<ToolCallDelta> tool_calls;
    /// A chunk under vLLM's stream_options.continuous_usage_stats: the choice's usage so
    /// far (its prompt, the tokens it generated up to this chunk).
    std::optional<Usage> usage;
};

/// Identity of one response: id ("cmpl-..." / "chatcmpl-..."), creation time (Unix
/// seconds) and the model id.
struct ResponseMeta {
    std::string id;
    int64_t created = 0;
    std::string model;
};

/// `token` string of an entry: the vocabulary text for special tokens, the bytes when
/// they are valid UTF-8, else "bytes:\xNN..." spelled with literal backslashes.
std::string token_display(const model::Tokenizer& tok, int32_t id, const std::string& bytes, bool special);

/// The complete (non-streamed) response body.
std::string full_response(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                          const std::vector<ChoiceOut>& choices, const Usage& usage);

/// One `data:` payload of a stream (without the "data: " prefix). usage: the final
/// usage chunk (empty choices) when set, else a choice chunk (with the choice's usage so
/// far when it has one, continuous_usage_stats).
std::string stream_chunk(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                         const ChoiceOut* choice, const Usage* usage);

/// {"error": {"message", "type", "param", "code"}}. Whatever a message or param quotes of the
/// request, the body stays small: the message is cut to kErrorMessageMax bytes and the
/// param to kQuoteMax (quote.hpp's cut(): the first bytes, "...", the full length).
inline constexpr size_t kErrorMessageMax = 2048;
std::string error_body(const ApiError& e);

/// Number of Unicode characters in UTF-8 `s` (invalid bytes count one each).
int64_t utf8_chars(std::string_view s);

}  // namespace loom::gateway
