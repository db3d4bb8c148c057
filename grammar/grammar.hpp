// A compiled grammar: a pushdown automaton made of one byte-level DFA per recursive rule.
//
// Grammar::from_rules() inlines every rule that is not needed to break a cycle of references,
// so a grammar without recursion is a single DFA (rule 0); the rules that remain are called
// through "call edges" (push the callee, return to the edge's state when the callee accepts).
// The construction: Thompson's NFA (built right to left, sharing a sub-expression whenever it
// has the same continuation), subset construction over byte classes, trimming of states that
// cannot reach acceptance, Moore's partition refinement. Sources: Aho, Lam, Sethi, Ullman,
// "Compilers" (2nd ed.) 3.7-3.9; the pushdown view follows XGrammar (Dong et al., 2024,
// arXiv:2411.15100), implemented independently.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/expr.hpp"

namespace loom::grammar {

/// An edge that enters rule `rule` at its state 0 and, once it accepts, goes on at `ret`.
struct Call {
    int32_t rule;
    int32_t ret;
};

/// Where a rule is called from: state `ret` of rule `rule` is where it returns to.
struct CallSite {
    int32_t rule;
    int32_t ret;
    bool operator==(const CallSite&) const = default;
};

/// One rule's DFA. State 0 is the start. Bytes map to classes (`byte_class`), and
/// `next[s * n_classes + c]` is the successor of state s on class c, or -1.
struct RuleDfa {
    std::string name;
    int32_t n_states = 0;
    int32_t n_classes = 0;
    std::array<uint8_t, 256> byte_class{};
    std::vector<int32_t> next;
    std::vector<uint8_t> accept;       ///< the rule may end here
    std::vector<uint8_t> can_end;      ///< accept, or accept after calls that match ""
    std::vector<uint8_t> has_out;      ///< some byte or call edge leaves the state
    std::vector<uint32_t> call_begin;  ///< calls of state s: calls[call_begin[s] .. call_begin[s+1])
    std::vector<Call> calls;

    int32_t step(int32_t s, uint8_t b) const {
        return next[static_cast<size_t>(s) * static_cast<size_t>(n_classes) + byte_class[b]];
    }
};

/// Limits that keep a hostile constraint from exhausting memory or time: a 60-byte regex such
/// as `(a|b)*a(a|b){20}` asks for 2^20 DFA states. Whichever is reached first ends the
/// construction with a GrammarError; the gateway checks every constraint with the same
/// limits the engine compiles it with, so what passes there compiles here.
struct GrammarLimits {
    size_t max_nfa_states = 1'000'000;
    size_t max_dfa_states = 200'000;
    /// Steps of the construction: NFA states made, NFA states visited by the epsilon
    /// closures, NFA edges followed by the subset construction (tens of ns each).
    size_t max_work = 10'000'000;
    /// Bytes the construction may hold, estimated: NFA states, the DFA states' NFA state
    /// sets (kept twice, for lookup), the transition rows. A JSON Schema object of 2,000
    /// required integer properties needs about 50 MB.
    size_t max_memory = 64u << 20;
};

/// An immutable compiled grammar, cheap to copy (shared). Rule 0 is the start rule.
class Grammar {
public:
    /// Compiles `rules` (starting at rules.root). Throws GrammarError when a rule is
    /// undefined, the grammar matches no text at all, a rule is left-recursive (it can call
    /// itself before consuming a byte), or the automaton would exceed `limits`.
    static Grammar from_rules(const Rules& rules, const GrammarLimits& limits = {});

    int32_t n_rules() const { return static_cast<int32_t>(d_->rules.size()); }
    const RuleDfa& rule(int32_t r) const { return d_->rules[static_cast<size_t>(r)]; }
    /// Every (caller rule, return state) that calls rule `r`.
    const std::vector<CallSite>& call_sites(int32_t r) const { return d_->sites[static_cast<size_t>(r)]; }
    /// True when rule `r` matches the empty string.
    bool nullable(int32_t r) const { return rule(r).can_end[0] != 0; }
    /// Index of (rule, state) among all states of all rules, 0 .. n_states()-1.
    size_t state_index(int32_t r, int32_t s) const {
        return d_->first_state[static_cast<size_t>(r)] + static_cast<size_t>(s);
    }
    size_t n_states() const { return d_->first_state.back(); }

    /// True when the whole of `text` is in the language (no tokenizer involved).
    bool accepts(std::string_view text) const;
    /// True when `text` can be extended to a string of the language.
    bool accepts_prefix(std::string_view text) const;

private:
    struct Data {
        std::vector<RuleDfa> rules;
        std::vector<std::vector<CallSite>> sites;
        std::vector<size_t> first_state;  // prefix sums of n_states, n_rules + 1 entries
    };
    std::shared_ptr<const Data> d_;
};

}  // namespace loom::grammar
