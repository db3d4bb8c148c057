// The pieces of JSON text (RFC 8259) the schema compiler assembles: whitespace, strings in
// their escaped form, numbers, the any-value rule, and the string formats JSON Schema names.
#pragma once

#include <string>
#include <string_view>

#include "grammar/expr.hpp"

namespace loom::grammar::json {

/// `s` as a JSON string literal in the canonical form loom writes: `"` and `\` escaped,
/// \b \f \n \r \t for those controls, \u00XX (lowercase hex) for the other controls,
/// every other code point as its UTF-8 bytes. Throws GrammarError for invalid UTF-8.
std::string quote(std::string_view s);

/// One character of string content in any of JSON's spellings: unescaped UTF-8 (not a
/// control, `"` or `\`), a short escape, \uXXXX, or a \uD8xx\uDCxx surrogate pair.
ExprPtr any_char();

/// Maps an expression over code points (Chars nodes, e.g. from parse_regex) to the same
/// strings written as JSON string content in the canonical spelling of quote().
ExprPtr as_content(const ExprPtr& e);

/// The decoded-text expression of JSON Schema format `name` (date-time, time, date,
/// duration, email, hostname, ipv4, ipv6, uuid), or nullptr for another name.
/// Sources: RFC 3339 5.6 and appendix A, RFC 1123 2.1, RFC 5321 4.1.2 (dot-atom local part
/// only), RFC 2673 3.2 (dotted quad), RFC 4291 2.2 (forms 1 and 2), RFC 4122 3.
ExprPtr format_text(std::string_view name);

}  // namespace loom::grammar::json
