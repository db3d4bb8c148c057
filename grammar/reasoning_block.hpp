// A reasoning block before a constraint: a reasoning model thinks in free text, closes its
// reasoning with a marker (`</think>`), and only then writes the constrained answer. The
// grammar of such an output is "any text up to and including the first close marker, a
// little whitespace, then the constraint's language" (docs/protocol.md, "Grammars",
// grammar_reasoning=), so that the engine enforces the constraint from the marker on and
// the model reasons as it would unconstrained.
//
// Source: the generation prompts of DeepSeek R1 and V3.1 (they end inside `<think>`) and
// Qwen3 (the model opens `<think>` itself); the string-matching automaton is Knuth, Morris
// and Pratt's (SIAM J. Comput. 6(2), 1977).
#pragma once

#include <string>
#include <string_view>

#include "grammar/expr.hpp"

namespace loom::grammar {

/// Most whitespace bytes (space, tab, LF, CR) allowed next to a block's markers: before the
/// open marker and after the close marker ("</think>\n\n" is what the models write).
inline constexpr uint32_t kReasoningBlockSpace = 2;

/// The markers of a reasoning block. `close` empty: no block. `open` empty: the text starts
/// inside the block (the prompt opened it). `open` set: the text may start with the block
/// (whitespace, `open`, ...) or go straight to the constraint.
struct ReasoningBlock {
    std::string open, close;
    bool empty() const { return close.empty(); }
    bool operator==(const ReasoningBlock&) const = default;
};

/// Any bytes (valid UTF-8 or not) up to and including the first occurrence of `marker`:
/// a byte automaton of marker.size() + 1 states. Throws GrammarError for an empty marker.
ExprPtr text_through(std::string_view marker);

/// `rules` with a new root: block `b` (see ReasoningBlock; as in the file comment), then
/// the old root's language. `rules` unchanged when `b` is empty. Throws GrammarError for
/// an open marker without a close marker.
Rules after_reasoning(Rules rules, const ReasoningBlock& b);

}  // namespace loom::grammar
