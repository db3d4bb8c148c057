// The grammar of tool calls that tool_choice forces ("required" or a named function), in the
// syntax of the model's template family, so that the model writes what its template renders
// for a call and the family's own parser (gateway/tool_parsers) reads it back.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gateway/tool_parser.hpp"
#include "gateway/tool_request.hpp"

namespace loom::gateway {

/// The tagged_json source (docs/protocol.md, "Grammars") of forced calls to `tools` (only the
/// one named `*named` when `named` is set) in `family`'s syntax: one call, or with `parallel`
/// (and no `named`) one or more. Each tool is one alternative, its name literal and its
/// `parameters` schema (any object when absent) the arguments. The forms, as the templates in
/// shared/models/templates render an assistant call (N a name, A its arguments):
///   hermes      <tool_call>\n{"name": "N", "arguments": A}\n</tool_call>, joined by "\n"
///   llama3      {"name": "N", "parameters": A}, joined by "; "
///   mistral     [TOOL_CALLS]N[ARGS]A, back to back, when `chat_template` shows [ARGS]
///               (Small 3.x, v11 tokenizer); else [TOOL_CALLS][{"name": "N", "arguments": A,
///               "id": "<9 letters or digits>"}, ...] (Nemo)
///   deepseek    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\nA\n```<｜tool▁call▁end｜>
///               joined by "\n", then <｜tool▁calls▁end｜>, when `chat_template` shows the
///               ```json fence (V3, R1); else <｜tool▁call▁begin｜>N<｜tool▁sep｜>A<｜tool▁call▁end｜>
///               back to back (V3.1)
///   granite     <|tool_call|>[{"name": "N", "arguments": A}, ...]
///   command_r   <|START_ACTION|>[\n    {"tool_call_id": "<digits>", "tool_name": "N", "parameters": A},\n    ...\n]<|END_ACTION|>
///   gpt_oss      to=functions.N<|channel|>commentary json<|message|>A<|call|>, after the
///               generation prompt's <|start|>assistant; joined by "<|start|>assistant"
///   kimi_k2     <|tool_calls_section_begin|><|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>A<|tool_call_end|>
///               back to back, then <|tool_calls_section_end|> (I an integer 0..999)
/// Returns "" for ToolFamily::None (no syntax: the caller falls back to a JSON array read by
/// the constrained parser). Tool names are plain (a-z, A-Z, 0-9, _ and -: parse_tools
/// checked them), so they stand in the literals as they are.
std::string forced_call_source(ToolFamily family, std::string_view chat_template,
                               const std::vector<FunctionTool>& tools, const std::string* named, bool parallel);

}  // namespace loom::gateway
