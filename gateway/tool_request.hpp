// The request side of tool calls, reasoning and structured output: validates `tools`,
// `tool_choice`, `parallel_tool_calls`, `response_format`, vLLM's `guided_*` and
// `structured_outputs`, `reasoning_effort` and `chat_template_kwargs`, and decides how
// the output will be read (OutputOptions) and what grammar the engine must enforce
// (OutputConstraint: the seam for the grammar engine; until an engine announces the
// `grammar` capability such requests are refused).
//
// Source: the OpenAI API reference (chat completions: tools, tool_choice,
// parallel_tool_calls, response_format, reasoning_effort; messages[].tool_calls and
// role "tool"), vLLM's guided decoding parameters and its conversion of tool-call
// arguments to objects before a template sees them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

#include "gateway/output_options.hpp"

namespace loom::gateway {

/// A function tool as the request declares it.
struct FunctionTool {
    std::string name;
    std::string parameters;  ///< its JSON Schema as JSON text ("" when absent)
};

/// What parse_output_request() found.
struct OutputRequest {
    std::vector<FunctionTool> tools;
    OutputOptions output;                        ///< how to read the output
    std::optional<OutputConstraint> constraint;  ///< grammar the engine must enforce
    /// chat_template_kwargs the template reads, with reasoning_effort added, for the
    /// template; Null when there are none.
    rapidjson::Document template_kwargs;
};

/// Parses the members above of a chat (`chat`) or completions body. `fmt` is the
/// served model's syntax, `chat_template` its template ("" for none). Throws
/// ApiError(400): malformed values; tool_choice naming a function not in `tools`;
/// tools with tool_choice "auto" when no tool-call syntax is known for the model;
/// two constraints at once; a chat_template_kwargs key that would replace one of the
/// template's own variables (messages, tools, ...); reasoning_effort that the template
/// does not read (or a model without a template). chat_template_kwargs keys the
/// template never reads are dropped (as vLLM and transformers ignore them), and so is
/// the whole object for a model without a template.
OutputRequest parse_output_request(const rapidjson::Value& body, bool chat, const ChatFormat& fmt,
                                   std::string_view chat_template);

/// Lets a reasoning model reason before its constrained output: for the `<think>` syntax
/// (ReasoningFamily::Think: Qwen3, DeepSeek R1 and V3.1, SmolLM3) `c` gets a reasoning block
/// (OutputConstraint::reasoning_open/close), so that the engine applies the grammar only
/// after `</think>`: from the start of the output when the rendered `prompt` ends inside
/// `<think>` (DeepSeek with thinking on), or after a block the model may open itself when
/// the prompt neither opened nor closed one (Qwen3 and SmolLM3 with thinking on). A prompt
/// that closed the block (thinking off) and the other syntaxes (Granite's and Command R7B's
/// response wrappers, gpt-oss's channels) keep the grammar from the first token.
void reason_before_constraint(OutputConstraint& c, ReasoningFamily family, std::string_view prompt);

/// True when `tmpl` mentions `name` as an identifier (not inside a longer one): the
/// only way a Jinja template can read a variable.
bool template_reads(std::string_view tmpl, std::string_view name);

/// Checks the tool-call members of chat `messages` (assistant tool_calls: objects with
/// a function name and string or object arguments; tool messages: a tool_call_id) and
/// returns a copy in which each tool call's arguments string that holds a JSON object
/// is that object, as chat templates expect (they print it with tojson). Throws
/// ApiError(400) naming the bad member.
rapidjson::Document messages_for_template(const rapidjson::Value& messages);

}  // namespace loom::gateway
