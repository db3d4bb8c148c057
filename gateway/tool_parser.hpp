// Tool-call parsing for chat completions: which syntax a model writes its calls in
// (the "family", detected from its chat template or named by --tool-parser), and the
// incremental parsers that find those calls in the generated text.
//
// Sources: the chat templates in shared/models/templates (how each family renders an
// assistant turn with tool calls); the OpenAI API reference (chat completion
// message.tool_calls, the streamed tool-call deltas); vLLM's tool parsers
// (vllm/entrypoints/openai/tool_parsers) for what models write in practice.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/span_parser.hpp"

namespace loom::gateway {

/// A tool-call syntax.
enum class ToolFamily {
    None,      ///< no tool calls are parsed
    Hermes,    ///< Hermes, Qwen2.5, Qwen3: <tool_call>{"name", "arguments"}</tool_call>
    Llama3,    ///< Llama 3.1/3.2: the output is {"name", "parameters"} (or after <|python_tag|>)
    Mistral,   ///< [TOOL_CALLS][{"name", "arguments"}...] or [TOOL_CALLS]name[ARGS]{...}
    DeepSeek,  ///< <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>... (V3/R1 and V3.1 forms)
    Granite,   ///< <|tool_call|>[{"name", "arguments"}...]
    CommandR,  ///< <|START_ACTION|>[{"tool_name", "parameters"}...]<|END_ACTION|>, or Action: ```json [...] ```
    GptOss,    ///< harmony: <|channel|>commentary to=functions.NAME ... <|message|>{...}<|call|>
    KimiK2,  ///< <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}...
};

/// The --tool-parser name of a family: none, hermes, llama3, mistral, deepseek,
/// granite, command_r, gpt_oss, kimi_k2.
std::string_view tool_family_name(ToolFamily f);

/// The family a --tool-parser name means, or nullopt for an unknown name ("auto" is
/// not a family: the caller detects it).
std::optional<ToolFamily> tool_family_from_name(std::string_view name);

/// The comma-separated list of --tool-parser names (for --help and errors); without
/// "none" when `with_none` is false (the names of the syntaxes that find calls).
std::string tool_family_names(bool with_none = true);

/// The family whose syntax a chat template renders tool calls in (by the markers it
/// prints: <|channel|>/<|message|> gpt_oss, <｜tool▁calls▁begin｜> deepseek,
/// <|tool_calls_section_begin|> kimi_k2, [TOOL_CALLS] mistral, <|START_ACTION|>
/// command_r, <|tool_call|> granite, <tool_call> hermes, <|start_header_id|> with
/// "parameters" llama3), or by the model it names: SmolLM3 (whose own template asks for
/// hermes calls; the test set's Unsloth edit of it renders no tools) is hermes. None when
/// the template shows none of them (or is empty).
ToolFamily detect_tool_family(std::string_view chat_template);

/// What a request allows the parser to find.
struct ToolParserOptions {
    bool parallel = true;  ///< parallel_tool_calls: false ends the output after the first call
    bool calls = true;     ///< false (tool_choice "none"): gpt_oss still splits channels, finds no calls
};

/// A parser for `family`'s syntax (nullptr for None). Calls are recognized once their
/// opening marker and function name are complete and their arguments have begun
/// (docs/api.md, "Tool calls and reasoning"); text that never gets there stays content.
std::unique_ptr<SpanParser> make_tool_parser(ToolFamily family, const ToolParserOptions& opts);

/// A parser for output produced under a grammar constraint (tool_choice "required"
/// or a named function; see tool_request.hpp): with `function` set, the whole output
/// is the arguments object of one call to it; otherwise it is a JSON array of
/// {"name": ..., "parameters": {...}} objects.
std::unique_ptr<SpanParser> make_constrained_parser(std::optional<std::string> function, const ToolParserOptions& opts);

}  // namespace loom::gateway
