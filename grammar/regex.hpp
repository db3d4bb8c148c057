// Regular expressions (the common ECMAScript syntax) to grammar expressions over code points.
//
// Supported: literals (UTF-8), `.` (any code point but \n \r U+2028 U+2029), classes
// `[a-z]`, `[^...]`, the escapes \d \D \w \W \s \S (ECMAScript sets: \d = [0-9],
// \w = [A-Za-z0-9_], \s = ECMAScript WhiteSpace and LineTerminator), \t \n \r \f \v \0,
// \xHH, \uHHHH, \u{H..}, escaped punctuation; quantifiers * + ? {n} {n,} {n,m} (a trailing
// lazy `?` is accepted: it does not change the language); alternation; groups (...),
// (?:...), (?<name>...), (?P<name>...); `^` at the start and `$` at the end of a top-level
// alternative. Refused with a GrammarError naming the construct: backreferences,
// lookaround, \b \B, \p{...}, inline flags, anchors elsewhere, counts above 10000.
// Source: ECMA-262 (2024) section 22.2, "RegExp (Regular Expression) Objects".
#pragma once

#include <string_view>

#include "grammar/expr.hpp"

namespace loom::grammar {

/// How anchors are read.
enum class RegexMatch {
    Full,    ///< the whole text must match; ^ and $ are implied (vLLM's guided_regex)
    Search,  ///< JSON Schema `pattern`: an alternative without ^ (or $) may have any
             ///< text before (or after) its match
};

/// Parses `pattern` into an expression whose Chars nodes are code point classes. Throws
/// GrammarError with the byte offset and the construct for syntax it does not support.
ExprPtr parse_regex(std::string_view pattern, RegexMatch mode = RegexMatch::Full);

}  // namespace loom::grammar
