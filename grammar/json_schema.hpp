// JSON Schema (the subset OpenAI's structured outputs accept, and a little more) to grammar rules.
//
// Supported keywords: type (one or a list), enum, const, anyOf, allOf with one subschema,
// $ref to "#" or any JSON pointer inside the document ($defs, definitions; recursion is
// fine), properties, required, additionalProperties (false, true or a schema), items
// (a schema or false), prefixItems, minItems, maxItems, minLength, maxLength, pattern,
// format (date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid), minimum,
// maximum, exclusiveMinimum, exclusiveMaximum (number or draft-4 boolean), multipleOf.
// Annotations (title, description, default, examples, $comment, $schema, $id, $anchor,
// deprecated, readOnly, writeOnly) are ignored; any other keyword is refused with a
// SchemaError naming it.
//
// What the generated text looks like:
// - Properties appear in the order the schema lists them; optional ones may be left out.
//   Additional properties (when allowed) follow the listed ones, with keys spelled as
//   json::quote() spells them and different from every listed name.
// - With "properties" present and "additionalProperties" absent, no other keys are
//   written (OpenAI's strict behaviour); an object schema without "properties" allows any.
// - A schema without "type" takes the types its keywords imply (properties -> object,
//   items -> array, minLength -> string, minimum -> number, ...), or any JSON value.
// - Whitespace: after `{`, `[`, `:` and `,` and before `}` and `]`, nothing, one space, or
//   one line break ("\n" or "\r\n") followed by at most JsonOptions::max_indent spaces or
//   tabs: compact JSON, `{"a": 1, "b": 2}` and pretty-printed JSON all fit, and a model
//   cannot write whitespace forever (a small model under a grammar tends to: `{ \n` and then
//   newlines until max_tokens). None before `:` or `,` (JSON allows it, models do not write
//   it, and it would double the automaton), and none before or after the top-level value.
//   JsonOptions::compact allows none at all. (xgrammar's any_whitespace=false is stricter:
//   fixed separators, no line breaks.)
// - At most 256 optional properties in a row (each run costs quadratic automaton work).
// - Exponents have at most two digits; numbers with bounds or multipleOf are written
//   without exponent and never as "-0".
// - pattern is a search (ECMA-262 semantics) unless anchored with ^ / $.
// - format, pattern and minLength/maxLength cannot be combined in one schema (refused).
// Source: JSON Schema Core and Validation, draft 2020-12; OpenAI API guide "Structured
// model outputs", section "Supported schemas".
#pragma once

#include <string>
#include <string_view>

#include "grammar/expr.hpp"

namespace loom::grammar {

/// A schema that cannot be compiled. `pointer()` is the JSON Pointer (RFC 6901) of the
/// schema object at fault ("" for the root), `keyword()` the keyword ("" when the schema
/// itself is malformed JSON).
class SchemaError : public GrammarError {
public:
    SchemaError(std::string pointer, std::string keyword, const std::string& message)
        : GrammarError(format(pointer, keyword, message)), pointer_(std::move(pointer)), keyword_(std::move(keyword)) {}
    const std::string& pointer() const { return pointer_; }
    const std::string& keyword() const { return keyword_; }

private:
    static std::string format(const std::string& p, const std::string& k, const std::string& m) {
        std::string out = "schema";
        if (!p.empty()) out += " at '" + p + "'";
        if (!k.empty()) out += ", keyword '" + k + "'";
        return out + ": " + m;
    }
    std::string pointer_, keyword_;
};

/// The whitespace a JSON grammar allows between tokens (see the file comment).
struct JsonOptions {
    /// Most spaces or tabs after a line break: 16 indents 4 levels by 4 or 8 by 2 (more would
    /// grow the automaton of a large schema past GrammarLimits::max_memory).
    uint32_t max_indent = 16;
    /// No whitespace anywhere (compact JSON).
    bool compact = false;
};

/// Rules for JSON text valid against `schema_json` (a JSON Schema document). Throws
/// SchemaError for malformed JSON, a malformed schema, or an unsupported keyword.
Rules json_schema_rules(std::string_view schema_json, const JsonOptions& opts = {});

/// Rules for any JSON object (`response_format: {"type": "json_object"}`).
Rules json_object_rules(const JsonOptions& opts = {});

}  // namespace loom::grammar
