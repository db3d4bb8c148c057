// Grammar constraints in the engine: GEN's grammar= compiled against the model's own vocabulary
// into a token automaton, with a small cache so that requests repeating a schema compile once.
//
// Source: docs/protocol.md ("Grammars"); the automaton and its masks are grammar/'s
// (token_automaton.hpp, matcher.hpp). The engine links no tokenizer: the token bytes come from
// the backend (ModelInfo::vocab_bytes, made from the GGUF token texts by
// grammar::token_bytes_from_pieces).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "grammar/token_automaton.hpp"
#include "grammar/vocab.hpp"
#include "protocol/protocol.hpp"

namespace loom::engine {

class ConstraintCompiler {
public:
    /// Automata kept for reuse (least recently used goes first).
    static constexpr size_t kCacheEntries = 32;

    /// Compiles against `vocab` (the backend's token bytes and end ids); null: the engine has
    /// none and compile() refuses every grammar.
    explicit ConstraintCompiler(std::shared_ptr<const grammar::VocabBytes> vocab) : vocab_(std::move(vocab)) {}

    bool available() const { return vocab_ != nullptr; }

    /// The automaton of `spec` (shared with earlier requests of the same kind and source).
    /// Throws grammar::GrammarError (a SchemaError names the keyword) for an unknown kind or a
    /// source that does not compile, std::invalid_argument when the engine has no vocabulary.
    /// Cost: the DFA construction, once per distinct spec; token classes are filled lazily by
    /// the matchers (TokenAutomaton).
    std::shared_ptr<const grammar::TokenAutomaton> compile(const protocol::GrammarSpec& spec);

private:
    std::shared_ptr<const grammar::VocabBytes> vocab_;
    std::list<std::pair<protocol::GrammarSpec, std::shared_ptr<const grammar::TokenAutomaton>>> cache_;  // MRU first
};

}  // namespace loom::engine
