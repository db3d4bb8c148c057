// An OutputConstraint (tool_request.hpp) as the GEN line's grammar= (docs/protocol.md,
// "Grammars"), checked before it is sent: what loom's grammar engine cannot enforce is refused
// here with a 400 that names the request member and the reason.
//
// Source: docs/protocol.md ("Grammars"); the OpenAI API reference (structured outputs,
// "Supported schemas"); grammar/json_schema.hpp for the JSON Schema subset.
#pragma once

#include "gateway/output_options.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

/// The grammar= of constraint `c`: json_schema (the schema JSON), regex or choice (the JSON
/// array), tagged_json, with c's reasoning block (grammar_reasoning=). The constraint is compiled once here (grammar::compile, no vocabulary), so that
/// an unsupported keyword or regex construct is a 400 and not an engine ERR. Throws
/// ApiError(400, param c.param) for a constraint that does not compile (the message names the
/// schema pointer and keyword, or the regex offset) and for kinds loom does not enforce yet
/// (guided_grammar, strict tools under tool_choice "auto"), among them a constraint past
/// grammar::GrammarLimits (too many states, steps or bytes to compile).
protocol::GrammarSpec grammar_spec(const OutputConstraint& c);

}  // namespace loom::gateway
