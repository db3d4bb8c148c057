// Internal stages of Grammar::from_rules (grammar_build.cpp, grammar.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.hpp"

namespace loom::grammar::detail {

/// A rule's DFA straight from subset construction, before trimming and merging.
struct RawDfa {
    int32_t n_states = 0;
    int32_t n_classes = 0;
    std::array<uint8_t, 256> byte_class{};
    std::vector<int32_t> next;  // n_states * n_classes, -1 none
    std::vector<uint8_t> accept;
    std::vector<std::vector<Call>> calls;  // per state; callee = index into the result
};

/// Chooses the rules that stay rules (the root, and one rule per cycle of references),
/// inlines the others, and determinises each kept rule. The result is indexed by kept
/// rule, root first; `names` receives their names. Throws GrammarError past `limits`.
std::vector<RawDfa> build_raw_dfas(const Rules& rules, const GrammarLimits& limits, std::vector<std::string>& names);

}  // namespace loom::grammar::detail
