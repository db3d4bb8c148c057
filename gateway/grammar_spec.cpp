// OutputConstraint -> protocol::GrammarSpec, compiled once to refuse what cannot be enforced;
// see grammar_spec.hpp.
#include "gateway/grammar_spec.hpp"

#include "gateway/api_types.hpp"
#include "grammar/compile.hpp"

namespace loom::gateway {

protocol::GrammarSpec grammar_spec(const OutputConstraint& c) {
    namespace kind = protocol::grammar_kind;
    using K = OutputConstraint::Kind;
    protocol::GrammarSpec spec;
    switch (c.kind) {
        case K::JsonSchema: spec = {kind::kJsonSchema, c.value}; break;
        case K::Regex: spec = {kind::kRegex, c.value}; break;
        case K::Choice: spec = {kind::kChoice, c.value}; break;
        case K::TaggedJson: spec = {kind::kTaggedJson, c.value}; break;
        case K::Grammar:
            throw ApiError(400,
                           "'" + c.param +
                               "' with a grammar text (EBNF/Lark) is not supported: loom enforces JSON "
                               "Schema, JSON object, regex and choice constraints",
                           c.param, "unsupported_constraint");
        case K::ToolArguments:
            throw ApiError(
                400,
                "\"strict\": true tools with tool_choice \"auto\" are not supported yet: loom cannot "
                "enforce the arguments of calls the model chooses to make; use tool_choice \"required\" or a "
                "named function, or drop \"strict\"",
                c.param, "unsupported_constraint");
    }
    spec.reasoning_open = c.reasoning_open;
    spec.reasoning_close = c.reasoning_close;
    try {
        grammar::Constraint gc = grammar::Constraint::from_source(spec.kind, spec.source);
        gc.reasoning = {c.reasoning_open, c.reasoning_close};
        (void)grammar::compile(gc);
    } catch (const std::exception& e) {
        throw ApiError(400, "'" + c.param + "' cannot be enforced: " + e.what(), c.param, "unsupported_constraint");
    }
    return spec;
}

}  // namespace loom::gateway
