// JSON of the OpenAI Responses API: the response object and the server-sent events of
// a streamed response, built from one choice's text and logprob entries.
//
// Source: the OpenAI API reference, "Responses" (the response object: id, object
// "response", created_at, status, incomplete_details, output[] of one message item
// with output_text content, usage with input/output tokens) and "Streaming events"
// (response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta, response.output_text.done,
// response.content_part.done, response.output_item.done, then response.completed or
// response.incomplete; error and response.failed; each with a sequence_number).
// Logprobs: output_text.logprobs[] = {token, logprob, bytes, top_logprobs[]}, as in
// chat; -inf is written -9999.0.
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

/// The response object. `out`: the assistant message so far (null: no output item
/// yet); its finish_reason decides status "completed" ("stop") or "incomplete"
/// ("length": incomplete_details.reason "max_output_tokens") unless `status` is given
/// ("in_progress", "failed"). `error`: the error of a failed response.
std::string response_object(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                            const ChoiceOut* out, const Usage* usage, std::optional<std::string> status = {},
                            const ApiError* error = nullptr);

/// The events of one streamed response, numbered from 0 in the order made. Not
/// thread-safe.
class ResponsesStream {
public:
    /// Keeps references to `req`, `meta` and `tok`, which must outlive it.
    ResponsesStream(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok);
    /// response.created, response.in_progress, response.output_item.added (the message,
    /// in progress) and response.content_part.added (empty output_text).
    std::vector<ResponsesEvent> begin();
    /// response.output_text.delta for released text and its logprob entries.
    ResponsesEvent delta(const ChoiceOut& part);
    /// The closing events for the whole message `whole`: output_text.done,
    /// content_part.done, output_item.done, then response.completed or
    /// response.incomplete; after an engine failure, error and response.failed instead.
    std::vector<ResponsesEvent> end(const ChoiceOut& whole, const Usage& usage, const std::optional<ApiError>& failure);

private:
    ResponsesEvent event(const std::string& type, const std::string& fields_json);

    const GenerationRequest& req_;
    const ResponseMeta& meta_;
    const model::Tokenizer& tok_;
    int64_t seq_ = 0;
};

}  // namespace loom::gateway
