// JSON numbers with bounds and multipleOf, as exact automata over their decimal text.
//
// Bounds and multipleOf are read as exact decimals (the schema's number text, never a
// double), so `"maximum": 0.1` means 1/10. The automaton reads JSON number syntax
// (RFC 8259 section 6) without an exponent, follows the digits' comparison with each bound
// as they arrive, and, for multipleOf = a * 10^-k, the value times 10^k modulo a (at most k
// fraction digits are then written). Source: JSON Schema Validation (2020-12) 6.2.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "grammar/expr.hpp"

namespace loom::grammar {

/// An exact decimal: (neg ? -1 : 1) * int_digits.frac_digits, without leading zeros in
/// int_digits or trailing zeros in frac_digits (zero is "" "" and never negative).
struct Decimal {
    bool neg = false;
    std::string int_digits, frac_digits;
    bool is_zero() const { return int_digits.empty() && frac_digits.empty(); }
};

/// Reads JSON number text (an exponent is allowed). Returns nothing for text that is not
/// a JSON number or whose exponent puts it beyond 400 digits.
std::optional<Decimal> parse_decimal(std::string_view text);

struct NumberConstraint {
    bool integer = false;             ///< JSON Schema "integer"
    std::optional<Decimal> min, max;  ///< bounds
    bool min_exclusive = false, max_exclusive = false;
    std::optional<Decimal> multiple_of;  ///< > 0
};

/// The JSON texts of the numbers satisfying `c`. Without bounds or multipleOf this is the
/// plain JSON number (exponent of at most two digits) or integer grammar; otherwise an exact automaton
/// (no exponent, no "-0"). Throws GrammarError when no number satisfies `c` or the
/// automaton would be too large (multipleOf with more than 5 significant digits and long
/// bounds).
ExprPtr number_expr(const NumberConstraint& c);

}  // namespace loom::grammar
