// The entry points: constraints (JSON Schema, JSON object, regex, choice, tagged JSON) to a
// Grammar, and the line-safe text form in which a constraint travels to an engine.
//
// The gateway sends the constraint itself, not a compiled automaton: the engine compiles it
// against its own vocabulary (compile() here, then TokenAutomaton). Constraint::to_text() is
// `json_object`, `json_schema:<schema JSON>`, `regex:<pattern>`, `choice:<JSON array of
// strings>` or `tagged_json:<its source JSON, see from_source>`, percent-encoded so that it
// holds no byte <= 0x20, no 0x7F and no '%' (the escaping of loom protocol text values,
// docs/protocol.md "Lines").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/reasoning_block.hpp"

namespace loom::grammar {

/// JSON text valid against the JSON Schema `schema_json` (see json_schema.hpp for the
/// subset). Throws SchemaError (a GrammarError) for what it cannot compile.
Grammar compile_json_schema(std::string_view schema_json, const JsonOptions& opts = {});

/// Any JSON object (OpenAI `response_format: {"type": "json_object"}`).
Grammar compile_json_object(const JsonOptions& opts = {});

/// Text matching the regex `pattern` as a whole (vLLM `guided_regex`; syntax in regex.hpp).
/// Throws GrammarError with the offset of unsupported syntax.
Grammar compile_regex(std::string_view pattern);

/// Exactly one of `choices` (vLLM `guided_choice`). Throws GrammarError when the list is
/// empty or a choice is not valid UTF-8.
Grammar compile_choice(const std::vector<std::string>& choices);

/// One piece of a tagged item: literal bytes, or a JSON value valid against a JSON Schema.
struct TaggedPiece {
    bool schema = false;  ///< true: `text` is a JSON Schema document; false: literal bytes
    std::string text;
};

/// The tagged_json shape: `prefix`, one item, `suffix`; with `repeat`, one or more items
/// joined by `separator`. An item is one of `alternatives`, each a sequence of pieces (say
/// `<tool_call>\n{"name": "f", "arguments": `, the schema of f's arguments, `}\n</tool_call>`).
/// The shape of a model's tool calls in its template family's syntax.
struct TaggedJson {
    std::string prefix, suffix, separator;
    bool repeat = false;
    std::vector<std::vector<TaggedPiece>> alternatives;
};

/// The language of `t` (see TaggedJson). Each schema piece compiles on its own (its `$ref`s
/// point into itself). Throws SchemaError as compile_json_schema for a piece's schema,
/// GrammarError for a literal that is not UTF-8, no alternatives or an empty one.
Grammar compile_tagged_json(const TaggedJson& t, const JsonOptions& opts = {});

/// The tagged_json source of `t` (docs/protocol.md, "Grammars"; what Constraint::from_source
/// reads back): a JSON object with "prefix", "suffix" and "separator" where not empty, then
/// "repeat" and "alternatives" (literal pieces as JSON strings, schema pieces as their JSON
/// text, written as they are). Throws GrammarError for a literal that is not valid UTF-8.
std::string tagged_json_source(const TaggedJson& t);

/// A constraint as the gateway states it.
struct Constraint {
    enum class Kind { JsonObject, JsonSchema, Regex, Choice, TaggedJson };
    Kind kind = Kind::JsonObject;
    std::string text;                  ///< the schema JSON or the regex
    std::vector<std::string> choices;  ///< Choice
    TaggedJson tagged;                 ///< TaggedJson
    ReasoningBlock reasoning;          ///< free reasoning before the constraint (none when empty)

    /// The line-safe form (see the file comment). Throws GrammarError for a choice that is
    /// not valid UTF-8.
    std::string to_text() const;
    /// Reads to_text()'s form. Throws GrammarError for an unknown kind or bad escapes.
    static Constraint from_text(std::string_view text);
    /// The constraint of a protocol `grammar=<kind>:<source>` (docs/protocol.md, "Grammars"):
    /// kind json_object (source empty), json_schema (the schema JSON), regex (the pattern),
    /// choice (a JSON array of strings) or tagged_json (a JSON object {"prefix", "suffix",
    /// "separator": strings, "repeat": boolean, "alternatives": a non-empty array of
    /// non-empty arrays whose strings are literal text and whose objects or booleans are JSON
    /// Schemas}; "prefix", "suffix", "separator" and "repeat" may be left out: "", false; see
    /// TaggedJson). Throws GrammarError for another kind, a json_object with a source, or a
    /// choice / tagged_json source of another shape.
    static Constraint from_source(std::string_view kind, std::string_view source);
};

/// Compiles any constraint, after its reasoning block when it has one (reasoning_block.hpp).
/// Throws GrammarError (SchemaError) as the compile_* function of its kind, and for an open
/// marker without a close marker.
Grammar compile(const Constraint& c, const JsonOptions& opts = {});

}  // namespace loom::grammar
