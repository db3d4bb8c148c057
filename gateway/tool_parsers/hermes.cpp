// Hermes / Qwen2.5 / Qwen3 tool calls: each call is
//   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
// as NousResearch-Hermes-3 and Qwen's templates render an assistant turn (and vLLM's
// hermes parser reads it); calls may follow content and each other.
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway::tools {

std::unique_ptr<SpanParser> make_hermes(const ToolParserOptions& o) {
    JsonSyntax s;
    s.starts = {"<tool_call>"};
    s.ends = {"</tool_call>"};
    s.keys = {{"name"}, {"arguments", "parameters"}};
    return std::make_unique<JsonSectionParser>(std::move(s), o);
}

}  // namespace loom::gateway::tools
