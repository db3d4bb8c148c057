// Reasoning ("thinking") output: the syntax a model writes its reasoning in, detected
// from its chat template or named by --reasoning-parser, and the parser that splits it
// off as message.reasoning_content before the rest goes to the tool-call parser.
//
// Sources: the templates of Qwen3, DeepSeek R1 and V3.1, SmolLM3 and Granite 3.3
// (<think>...</think>), c4ai-command-r7b (<|START_THINKING|>...<|END_THINKING|>) and
// gpt-oss (harmony channels, parsed by gateway/tool_parsers/gpt_oss.cpp); vLLM's
// reasoning parsers and DeepSeek's API (message.reasoning_content) for the output.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/span_parser.hpp"

namespace loom::gateway {

/// A reasoning syntax.
enum class ReasoningFamily {
    None,      ///< no reasoning is split off
    Think,     ///< <think> ... </think> (Qwen3, DeepSeek R1/V3.1, SmolLM3)
    Granite,   ///< <think> ... </think> then <response> ... </response> (Granite 3.3 thinking)
    CommandR,  ///< <|START_THINKING|> ... <|END_THINKING|>, <|START_RESPONSE|> ... <|END_RESPONSE|>
    GptOss,    ///< harmony: the analysis channel (the gpt_oss tool parser does the work)
};

/// --reasoning-parser names: none, think, granite, command_r, gpt_oss.
std::string_view reasoning_family_name(ReasoningFamily f);
std::optional<ReasoningFamily> reasoning_family_from_name(std::string_view name);
std::string reasoning_family_names();

/// The reasoning syntax a chat template shows (None when it shows none).
ReasoningFamily detect_reasoning_family(std::string_view chat_template);

/// The markers of a syntax: reasoning opens and closes with `open`/`close`; content
/// may be wrapped in `content_open`/`content_close` (dropped: content_open at the
/// start of the content, content_close at the end of the output).
struct ReasoningSyntax {
    std::string open, close, content_open, content_close;
};

/// The syntax of `f` (empty markers for None and GptOss).
ReasoningSyntax reasoning_syntax(ReasoningFamily f);

/// True when the rendered prompt leaves the model inside a reasoning block: it ends,
/// but for whitespace, with the open marker (DeepSeek-R1's and V3.1's thinking
/// generation prompts end with "<think>").
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningSyntax& s);

/// Splits reasoning off the front of the output: when `inside` (see
/// prompt_opens_reasoning) the output starts as reasoning, otherwise only if it starts
/// (after whitespace) with the open marker. Reasoning runs to the close marker or the
/// end of the output; the rest goes to `inner` (the tool-call parser; nullptr: it is
/// all content). Whitespace touching a marker belongs to no part.
std::unique_ptr<SpanParser> make_reasoning_parser(ReasoningSyntax s, bool inside, std::unique_ptr<SpanParser> inner);

}  // namespace loom::gateway
