// The tool-call parser of each family (one file each under gateway/tool_parsers);
// gateway/tool_parser.cpp picks one by ToolFamily.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "gateway/span_parser.hpp"
#include "gateway/tool_parser.hpp"

namespace loom::gateway::tools {

std::unique_ptr<SpanParser> make_hermes(const ToolParserOptions& o);
std::unique_ptr<SpanParser> make_llama3(const ToolParserOptions& o);
std::unique_ptr<SpanParser> make_mistral(const ToolParserOptions& o);
std::unique_ptr<SpanParser> make_deepseek(const ToolParserOptions& o);
std::unique_ptr<SpanParser> make_granite(const ToolParserOptions& o);
std::unique_ptr<SpanParser> make_command_r(const ToolParserOptions& o);
std::unique_ptr<SpanParser> make_gpt_oss(const ToolParserOptions& o);
std::unique_ptr<SpanParser> make_kimi_k2(const ToolParserOptions& o);
/// See make_constrained_parser() in gateway/tool_parser.hpp.
std::unique_ptr<SpanParser> make_constrained(std::optional<std::string> function, const ToolParserOptions& o);

}  // namespace loom::gateway::tools
