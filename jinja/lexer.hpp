// Jinja2 tokenizer with trim_blocks / lstrip_blocks / "-" "+" whitespace control.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::jinja::detail {

enum class Tok : uint8_t {
    Data,        ///< template text (whitespace control already applied)
    VarBegin,    ///< {{
    VarEnd,      ///< }}
    BlockBegin,  ///< {%
    BlockEnd,    ///< %}
    Name,        ///< identifier (keywords too)
    String,      ///< string literal, unescaped
    Int,
    Float,
    Op,  ///< operator or punctuation; `text` holds it ("==", "(", ...)
    Eof,
};

struct Token {
    Tok type = Tok::Eof;
    std::string text;
    int64_t ival = 0;
    double fval = 0;
    int line = 1;
    int col = 1;
};

/// Splits `source` into tokens the way Jinja2 3.1's lexer does for an environment with
/// trim_blocks=True and lstrip_blocks=True: newlines normalized to "\n", one trailing
/// newline dropped, raw blocks returned as Data. The last token is Eof.
/// Throws TemplateError "line L, column C: ..." for malformed input.
std::vector<Token> tokenize(std::string_view source);

/// Human-readable name of a token for error messages ("end of print statement", "'('").
std::string describe(const Token& t);

}  // namespace loom::jinja::detail
