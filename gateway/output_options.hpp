// What a chat request asks of its output beyond sampling (tool calls, reasoning, a
// grammar constraint) and what the served model's template allows: small value types
// shared by the request parser, the engine check and the output splitter.
#pragma once

#include <optional>
#include <string>

#include "gateway/reasoning_parser.hpp"
#include "gateway/tool_parser.hpp"

namespace loom::gateway {

/// The served model's chat syntax: from its chat template (detect_*_family) unless
/// --tool-parser / --reasoning-parser name one.
struct ChatFormat {
    ToolFamily tools = ToolFamily::None;
    ReasoningFamily reasoning = ReasoningFamily::None;
};

/// Output the engine must shape with a grammar: needs the engine's `grammar`
/// capability (until engines announce it, such requests get 400).
struct OutputConstraint {
    enum class Kind {
        JsonSchema,     ///< the whole output follows a JSON Schema
        Regex,          ///< ... matches a regular expression
        Choice,         ///< ... is one of the strings of a JSON array
        Grammar,        ///< ... follows a grammar (vLLM's guided_grammar text)
        ToolArguments,  ///< the arguments of calls to "strict" tools follow their schemas
        TaggedJson,     ///< forced calls in the family's syntax: protocol kind tagged_json (its source JSON)
    };
    Kind kind = Kind::JsonSchema;
    std::string value;  ///< the schema, regex, JSON array of choices, grammar, or the strict tools as JSON
    std::string param;  ///< the request member that asked for it (for errors)
    /// The reasoning block the model writes before the constrained text (GEN's
    /// grammar_reasoning=, docs/protocol.md "Grammars"): `reasoning_close` "" for none;
    /// `reasoning_open` "" when the prompt already opened it.
    std::string reasoning_open{}, reasoning_close{};
};

/// How to read one chat choice's output (see make_output_parser).
struct OutputOptions {
    ToolFamily tools = ToolFamily::None;  ///< syntax of tool calls
    bool calls = false;                   ///< look for calls (tools given, tool_choice not "none")
    bool parallel = true;                 ///< parallel_tool_calls
    ReasoningFamily reasoning = ReasoningFamily::None;
    bool inside_reasoning = false;        ///< the prompt leaves the model inside reasoning
    bool constrained = false;             ///< a grammar shapes the output (tool_choice required / named)
    std::optional<std::string> function;  ///< constrained: the named function (else an array of calls)
};

}  // namespace loom::gateway
