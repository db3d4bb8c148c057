// Llama 3.1 / 3.2 JSON tool calls: the output itself is the call,
//   {"name": "f", "parameters": {...}}
// (Meta's templates render an assistant tool call so, with "Respond in the format
// {"name": function name, "parameters": ...}"), optionally after <|python_tag|>, and
// several calls are separated by ';' (as vLLM's llama3_json parser reads them). Only
// output that starts so (after whitespace) holds calls; text after them is content.
// Llama 3.1's built-in tool syntax (<|python_tag|>name.call(...)) stays content.
#include "gateway/tool_parsers/families.hpp"
#include "gateway/tool_parsers/tool_base.hpp"

namespace loom::gateway::tools {

std::unique_ptr<SpanParser> make_llama3(const ToolParserOptions& o) {
    JsonSyntax s;
    s.starts = {"<|python_tag|>"};
    s.at_start = true;
    s.separator.push_back(';');  // (not = ";": GCC 12 warns falsely, bug 105651)
    s.keys = {{"name"}, {"parameters", "arguments"}};
    return std::make_unique<JsonSectionParser>(std::move(s), o);
}

}  // namespace loom::gateway::tools
