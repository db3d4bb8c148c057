// The gateway's view of one OpenAI request after validation, and its error type.
//
// Source: the OpenAI API reference (POST /v1/completions, POST /v1/chat/completions,
// "Error codes"), with vLLM's extensions (top_k, min_p, repetition_penalty,
// allowed_token_ids, logprobs_mode).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gateway/output_options.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

/// An error returned to the client as HTTP `status` with OpenAI's error JSON
/// {"error": {"message", "type", "param", "code"}}. param/code may be empty (null).
struct ApiError : std::runtime_error {
    ApiError(int http_status, std::string msg, std::string error_param = {}, std::string error_code = {},
             std::string error_type = "invalid_request_error")
        : std::runtime_error(msg),
          status(http_status),
          message(std::move(msg)),
          type(std::move(error_type)),
          param(std::move(error_param)),
          code(std::move(error_code)) {}
    int status;
    std::string message, type, param, code;
};

/// Which OpenAI endpoint a request came to: POST /v1/completions, /v1/chat/completions
/// or /v1/responses (generated as a chat; see serving_responses.hpp).
enum class Endpoint { Completions, ChatCompletions, Responses };

/// A validated generation request. Each prompt yields `n` choices; choice index =
/// prompt_index * n + i, as the OpenAI API numbers them.
struct GenerationRequest {
    Endpoint endpoint = Endpoint::Completions;
    std::string model;
    std::vector<std::vector<int32_t>> prompts;  ///< token ids per prompt
    /// completions: each prompt's text as sent (nullopt for a prompt sent as token ids);
    /// `echo` returns this text exactly, before the completion
    std::vector<std::optional<std::string>> prompt_texts;
    int n = 1;
    std::optional<int64_t> max_tokens;  ///< absent: until the context is full
    protocol::Gen sampling;             ///< sampling keys; gen_for_choice() adds the rest
    std::vector<std::string> stop;      ///< up to 4 stop strings
    bool logprobs = false;              ///< return logprobs at all
    int top_logprobs = 0;               ///< alternatives per position, 0..20
    bool echo = false;                  ///< completions: prompt text and its logprobs first
    bool stream = false;
    bool include_usage = false;               ///< stream_options.include_usage
    bool continuous_usage = false;            ///< vLLM's stream_options.continuous_usage_stats: usage on every chunk
    bool tokens_as_ids = false;               ///< return_tokens_as_token_ids (vLLM): token = "token_id:<id>"
    std::optional<int> prompt_logprobs;       ///< vLLM's prompt_logprobs: K alternatives per prompt position
    bool return_token_ids = false;            ///< vLLM's return_token_ids: prompt_token_ids and token_ids
    std::optional<std::string> instructions;  ///< responses: `instructions`, echoed in the response object
    std::string metadata_json = "{}";         ///< responses: `metadata`, echoed (JSON text)
    /// responses: request members echoed in the response object, as JSON text.
    struct ResponsesEcho {
        std::string tools = "[]";                         ///< `tools` as sent
        std::string tool_choice = "\"auto\"";             ///< `tool_choice` as sent
        std::string text_format = "{\"type\":\"text\"}";  ///< `text.format` as sent
    } responses_echo;
    OutputOptions output;                        ///< chat: how to split the output (tool calls, reasoning)
    std::optional<OutputConstraint> constraint;  ///< grammar the engine must enforce (needs its `grammar` capability)
};

}  // namespace loom::gateway
