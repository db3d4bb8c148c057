// Cohere Command R tool calls: a JSON list of {"tool_name", "parameters"} objects,
//   <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}]<|END_ACTION|>
// in c4ai-command-r7b's template, or, in the older Command R format,
//   Action: ```json [{"tool_name": "f", "parameters": {...}}] ```
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway::tools {

std::unique_ptr<SpanParser> make_command_r(const ToolParserOptions& o) {
    JsonSyntax s;
    s.starts = {"<|START_ACTION|>", "Action:"};
    s.ends = {"<|END_ACTION|>", "```"};
    s.fences = {"", "```json"};
    s.array = true;
    s.keys = {{"tool_name", "name"}, {"parameters", "arguments"}};
    return std::make_unique<JsonSectionParser>(std::move(s), o);
}

}  // namespace loom::gateway::tools
