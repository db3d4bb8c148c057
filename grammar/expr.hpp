// The grammar IR: an EBNF-like expression DAG over Unicode text, and rules that name them.
//
// A constraint (JSON Schema, regex, choice) compiles to `Rules`: named rules whose bodies are
// expressions built from literals, code point classes, sequence, alternation, bounded or
// unbounded repetition, references to rules, and explicit byte automata (numeric ranges).
// Expressions are immutable and shared (a DAG), so one sub-expression used in several places
// is stored once. `Grammar` (grammar.hpp) turns Rules into per-rule byte DFAs.
// Sources: the EBNF notation of ISO/IEC 14977 and llama.cpp's GBNF, of which this is a subset.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/charset.hpp"

namespace loom::grammar {

/// A constraint that cannot be compiled (bad regex, unsupported construct, too large).
class GrammarError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A deterministic automaton over bytes, embedded in an expression (numeric ranges).
/// State 0 is the start; `next[s * 256 + b]` is the successor or -1.
struct ByteDfa {
    int32_t n_states = 0;
    std::vector<int32_t> next;
    std::vector<uint8_t> accept;
};

enum class ExprKind : uint8_t {
    Empty,    ///< the empty string
    Nothing,  ///< no string at all (an empty alternation)
    Literal,  ///< exactly the bytes of `text`
    Chars,    ///< one code point of `chars`, UTF-8 encoded
    Seq,      ///< items in order
    Alt,      ///< any one of items
    Repeat,   ///< items[0] repeated min..max times (max == kUnbounded: no limit)
    Ref,      ///< the rule `rule`
    Dfa,      ///< a string accepted by `dfa`
};

inline constexpr uint32_t kUnbounded = UINT32_MAX;

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
    ExprKind kind = ExprKind::Empty;
    std::string text;                    ///< Literal
    CharSet chars;                       ///< Chars
    std::vector<ExprPtr> items;          ///< Seq, Alt; Repeat: one item
    uint32_t min = 0, max = 0;           ///< Repeat
    int32_t rule = -1;                   ///< Ref
    std::shared_ptr<const ByteDfa> dfa;  ///< Dfa
};

// Builders. They simplify as they go: Seq and Alt flatten nested ones when those are short
// (long shared tails and choices stay shared nodes), Empty vanishes in a
// Seq, Nothing makes a Seq Nothing and vanishes in an Alt, one-item Seq/Alt is the item.
ExprPtr empty();
ExprPtr nothing();
ExprPtr lit(std::string_view bytes);
ExprPtr chars(CharSet set);
ExprPtr seq(std::vector<ExprPtr> items);
ExprPtr alt(std::vector<ExprPtr> items);
/// `e` repeated min..max times; throws GrammarError when min > max.
ExprPtr repeat(ExprPtr e, uint32_t min, uint32_t max);
inline ExprPtr opt(ExprPtr e) { return repeat(std::move(e), 0, 1); }
inline ExprPtr star(ExprPtr e) { return repeat(std::move(e), 0, kUnbounded); }
inline ExprPtr plus(ExprPtr e) { return repeat(std::move(e), 1, kUnbounded); }
ExprPtr ref(int32_t rule);
ExprPtr dfa(std::shared_ptr<const ByteDfa> d);

/// Named rules; rule 0 is not special: `root` says where a grammar starts.
class Rules {
public:
    /// Adds a rule with no body yet and returns its id. Names need not be unique.
    int32_t add(std::string name);
    /// Sets the body of rule `id`.
    void define(int32_t id, ExprPtr body);
    int32_t size() const { return static_cast<int32_t>(names_.size()); }
    const std::string& name(int32_t id) const { return names_.at(static_cast<size_t>(id)); }
    /// The body of rule `id`; throws GrammarError when it was never defined.
    const ExprPtr& body(int32_t id) const;

    int32_t root = 0;

    /// The rules in a GBNF-like text, root first: `name ::= expr`, literals in double quotes,
    /// classes in brackets, `(a | b)`, `x*`, `x{2,5}`; byte automata print as `<dfa:N>`.
    /// Shared sub-expressions print once per use, so the text is cut ("...") past 1 MiB or
    /// 200 levels. For diagnostics: it is not parsed back.
    std::string to_string() const;

private:
    std::vector<std::string> names_;
    std::vector<ExprPtr> bodies_;
};

}  // namespace loom::grammar
