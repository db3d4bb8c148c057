// A Grammar compiled against a vocabulary: which tokens each parser state allows.
//
// For the top frame (rule, state) of a parse stack, a walk over the vocabulary trie sorts
// every token into one of three sets, without looking below that frame:
// - accepted: its bytes are consumed inside the frame (and rules it calls), so it is valid
//   whatever stack lies below;
// - rejected: it fails inside the frame and in every place the frame's rule is called from;
// - uncertain: it would leave the frame, and some caller could go on with it; Matcher checks
//   these against the real stack (a few hundred at most in JSON grammars).
// A grammar without recursion is one DFA, so nothing is ever uncertain and the mask of a
// state is its accepted set. Classifications are computed on first use and kept (shared by
// every Matcher, thread-safe); precompute() fills all of them ahead of time.
// Source: XGrammar's context-independent / context-dependent token split (Dong et al., 2024,
// arXiv:2411.15100), reimplemented over loom's own grammar and stack representation.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/stack.hpp"
#include "grammar/vocab.hpp"

namespace loom::grammar {

/// The classification of one (rule, state). The accepted tokens are a token mask
/// (vocab.mask_words() words) when there are many, else a list of ids (`accepted` empty):
/// most states allow a few hundred tokens, and a 128K-token mask is 16 KiB. `uncertain`
/// holds token ids in byte order (so neighbours share prefixes).
struct TokenClasses {
    std::vector<uint32_t> accepted;
    std::vector<int32_t> accepted_ids;
    std::vector<int32_t> uncertain;
    size_t n_accepted = 0;
};

/// Hash of a set of stack ids (internal).
struct ConfigHash {
    size_t operator()(const std::vector<int32_t>& v) const {
        uint64_t h = 1469598103934665603ull;
        for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
        return static_cast<size_t>(h);
    }
};

class TokenAutomaton {
public:
    TokenAutomaton(Grammar g, std::shared_ptr<const VocabBytes> vocab);
    TokenAutomaton(const TokenAutomaton&) = delete;
    TokenAutomaton& operator=(const TokenAutomaton&) = delete;

    const Grammar& grammar() const { return g_; }
    const VocabBytes& vocab() const { return *vocab_; }

    /// The classes of top frame (rule, state); computed once (a trie walk), then cached.
    /// The reference stays valid for the automaton's lifetime. Thread-safe.
    const TokenClasses& classes(int32_t rule, int32_t state) const;

    /// A Matcher's exact check of a stack's uncertain tokens, shared with later matchers:
    /// the result depends only on the stack's frames (`frames`: rule, state pairs from the
    /// top down, flattened). Returns false when not known. Thread-safe.
    bool find_checked(const std::vector<int32_t>& frames, std::vector<int32_t>& allowed) const;
    /// Records such a result; the cache holds at most 4096 stacks (then it starts over).
    void add_checked(std::vector<int32_t> frames, const std::vector<int32_t>& allowed) const;

    /// Classifies every state now (compile-time cost instead of first-use cost).
    void precompute() const;
    /// How many states are classified so far.
    size_t n_classified() const;

private:
    TokenClasses classify(int32_t rule, int32_t state) const;  // mu_ held
    int32_t intern_config(std::vector<int32_t>& nodes) const;  // mu_ held
    int32_t step_config(int32_t config, uint8_t b) const;      // mu_ held

    Grammar g_;
    std::shared_ptr<const VocabBytes> vocab_;
    mutable std::mutex mu_;
    mutable std::vector<std::unique_ptr<TokenClasses>> cache_;  // by Grammar::state_index
    mutable size_t n_classified_ = 0;
    // Walk configurations: sets of stacks over sentinels kIn/kCtx, interned; their byte
    // transitions memoised (entry = successor config * 2 + "left into unknown context").
    mutable detail::StackArena arena_;
    mutable std::vector<std::vector<int32_t>> configs_;
    mutable std::vector<uint8_t> config_inside_;  // some stack still rests on kIn
    mutable std::vector<int32_t> memo_;           // configs_ x 256; -1 unknown
    mutable std::unordered_map<std::vector<int32_t>, int32_t, ConfigHash> config_index_;
    mutable std::vector<int32_t> scratch_out_, scratch_visited_;
    mutable std::unordered_map<std::vector<int32_t>, std::vector<int32_t>, ConfigHash> checked_;
};

}  // namespace loom::grammar
