// IBM Granite 3.x tool calls: <|tool_call|> followed by a JSON list of calls,
//   <|tool_call|>[{"name": "f", "arguments": {...}}, ...]
// (granite-3.3's template: "respond only with <|tool_call|> followed by a JSON list of
// tools used"; vLLM's granite parser reads the same).
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway::tools {

std::unique_ptr<SpanParser> make_granite(const ToolParserOptions& o) {
    JsonSyntax s;
    s.starts = {"<|tool_call|>"};
    s.array = true;
    s.keys = {{"name"}, {"arguments"}};
    return std::make_unique<JsonSectionParser>(std::move(s), o);
}

}  // namespace loom::gateway::tools
