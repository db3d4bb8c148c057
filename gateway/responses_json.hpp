// JSON of the OpenAI Responses API: the response object and the server-sent events of
// a streamed response, built from the chunks of one chat choice (its content, reasoning
// and tool-call deltas, gateway/output_split.hpp).
//
// Source: the OpenAI API reference, "Responses" (the response object: id, object
// "response", created_at, status, incomplete_details, output[] of items, usage with
// input/output tokens; the output items: message with output_text content,
// function_call {id, call_id, name, arguments, status}, reasoning with reasoning_text
// content, as OpenAI's open-weight models and vLLM return it) and "Streaming events"
// (response.created, response.in_progress; per item response.output_item.added, for a
// message response.content_part.added, response.output_text.delta, response.output_text.done,
// response.content_part.done, for a call response.function_call_arguments.delta and
// .done, for reasoning response.reasoning_text.delta and .done, then
// response.output_item.done; then response.completed or response.incomplete; error and
// response.failed; each with a sequence_number). Logprobs: output_text.logprobs[] =
// {token, logprob, bytes, top_logprobs[]}, as in chat; -inf is written -9999.0.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gateway/api_types.hpp"
#include "gateway/response_json.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// One event of a streamed response: its type (the SSE `event:` name) and JSON data.
using ResponsesEvent = std::pair<std::string, std::string>;

/// One output item of a response.
struct ResponsesItem {
    enum class Kind { Message, Reasoning, FunctionCall };
    Kind kind = Kind::Message;
    std::string id;                      ///< msg_..., rs_... or fc_... (the response id's tail, then the item's index)
    std::string text;                    ///< the message's output_text, the reasoning text, or the call's arguments
    std::vector<LogprobEntry> entries;   ///< message: the logprob entries that spell `text`
    std::string call_id, name;           ///< function call: the call's id (call_...) and function name
    bool done = false;                   ///< closed (output_item.done sent)
    std::string status = "in_progress";  ///< then "completed", or "incomplete" when max_output_tokens cut it
};

/// The output items of one response, in the order the model wrote them, and the events
/// that build them. A streamed response sends the events; a whole one keeps only the
/// items. A message, reasoning or call item opens where its first text (or the call's
/// header) comes and closes when another item opens or the output ends. Not thread-safe.
class ResponsesStream {
public:
    /// Keeps references to `req`, `meta` and `tok`, which must outlive it.
    ResponsesStream(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok);
    /// response.created and response.in_progress.
    std::vector<ResponsesEvent> begin();
    /// The events of one chunk of the choice (Choice::chunks()): its reasoning, then its
    /// content, then its tool-call delta (a header opens a function_call item).
    std::vector<ResponsesEvent> add(const ChoiceOut& part);
    /// The closing events: each open item's, then response.completed or, when
    /// `finish_reason` is "length", response.incomplete (the open items "incomplete");
    /// after an engine failure, error and response.failed instead.
    std::vector<ResponsesEvent> end(const std::optional<std::string>& finish_reason, const Usage& usage,
                                    const std::optional<ApiError>& failure);
    /// The response object after end(): status "completed" or "incomplete" as end() decided.
    std::string object(const Usage& usage) const;

    const std::vector<ResponsesItem>& items() const { return items_; }

private:
    ResponsesEvent event(const std::string& type, const std::string& fields_json);
    // Closes the open item, opens one of `kind` (output_item.added, content_part.added).
    ResponsesItem& start(ResponsesItem::Kind kind, std::vector<ResponsesEvent>& out);
    void close(ResponsesItem& item, std::vector<ResponsesEvent>& out);
    int index_of(const ResponsesItem& item) const { return static_cast<int>(&item - items_.data()); }

    const GenerationRequest& req_;
    const ResponseMeta& meta_;
    const model::Tokenizer& tok_;
    std::vector<ResponsesItem> items_;
    std::vector<int> call_items_;  // item index of each tool call (by its index in the choice)
    std::string status_ = "in_progress";
    int64_t seq_ = 0;
};

/// The response object with `items` as its output. `status`: "in_progress", "completed",
/// "incomplete" (incomplete_details.reason "max_output_tokens") or "failed" (with
/// `error`).
std::string response_object(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                            const std::vector<ResponsesItem>& items, const Usage* usage, const std::string& status,
                            const ApiError* error = nullptr);

}  // namespace loom::gateway
