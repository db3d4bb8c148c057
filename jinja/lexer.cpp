// Jinja2 tokenizer with trim_blocks / lstrip_blocks / "-" "+" whitespace control.
#include "jinja/lexer.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "jinja/jinja.hpp"
#include "jinja/pystr.hpp"

namespace loom::jinja::detail {

namespace {

// Byte length of the (Unicode) whitespace code point at `pos`, or 0.
size_t ws_at(std::string_view s, size_t pos) {
    if (pos >= s.size()) return 0;
    auto b = static_cast<unsigned char>(s[pos]);
    if (b < 0x80) return (b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F)) ? 1 : 0;
    size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    if (len == 1 || pos + len > s.size()) return 0;
    std::u32string cp = py::decode(s.substr(pos, len));
    return cp.size() == 1 && py::is_space(cp[0]) ? len : 0;
}

size_t skip_ws(std::string_view s, size_t pos) {
    while (size_t k = ws_at(s, pos)) pos += k;
    return pos;
}

// Python's str.rstrip() on whitespace.
std::string_view rstrip_ws(std::string_view s) {
    size_t e = s.size();
    while (e > 0) {
        size_t start = e - 1;  // the lead byte of the last code point
        while (start > 0 && e - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        if (ws_at(s, start) != e - start) break;
        e = start;
    }
    return s.substr(0, e);
}

bool all_ws(std::string_view s) {
    if (s.empty()) return false;
    for (size_t p = 0; p < s.size();) {
        size_t k = ws_at(s, p);
        if (!k) return false;
        p += k;
    }
    return true;
}

bool is_name_start(unsigned char c) { return c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80; }
bool is_name_char(unsigned char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
public:
    explicit Lexer(std::string_view source) {
        // Normalize \r\n and \r to \n and drop one trailing newline (keep_trailing_newline=False).
        src_.reserve(source.size());
        for (size_t i = 0; i < source.size(); ++i) {
            if (source[i] == '\r') {
                src_.push_back('\n');
                if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
            } else {
                src_.push_back(source[i]);
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
        line_starts_.push_back(0);
        for (size_t i = 0; i < src_.size(); ++i)
            if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<Token> run() {
        std::string_view s = src_;
        size_t pos = 0;
        bool line_starting = true;
        while (pos < s.size()) {
            size_t k = pos;
            while (true) {
                k = s.find('{', k);
                if (k == std::string_view::npos || k + 1 >= s.size()) {
                    k = std::string_view::npos;
                    break;
                }
                char c = s[k + 1];
                if (c == '{' || c == '%' || c == '#') break;
                ++k;
            }
            if (k == std::string_view::npos) {
                emit_data(s.substr(pos), pos);
                break;
            }
            char kind = s[k + 1];
            size_t after = k + 2;
            char sign = 0;
            if (after < s.size() && (s[after] == '-' || s[after] == '+')) sign = s[after++];
            size_t raw_end = 0;
            bool is_raw = kind == '%' && match_raw_begin(s, k, raw_end);
            if (is_raw) sign = raw_sign_;
            std::string_view text = s.substr(pos, k - pos);
            text = apply_lstrip(text, sign, kind != '{', line_starting);
            emit_data(text, pos);
            line_starting = false;
            if (is_raw) {
                line_starting = raw_end > 0 && s[raw_end - 1] == '\n';
                pos = lex_raw(s, raw_end, line_starting);
            } else if (kind == '#') {
                pos = lex_comment(s, after, k, line_starting);
            } else {
                pos = lex_tag(s, k, after, kind == '%', line_starting);
            }
        }
        Token eof;
        eof.type = Tok::Eof;
        set_pos(eof, s.size());
        out_.push_back(std::move(eof));
        return std::move(out_);
    }

private:
    [[noreturn]] void fail(size_t pos, const std::string& msg) {
        Token t;
        set_pos(t, pos);
        throw TemplateError("line " + std::to_string(t.line) + ", column " + std::to_string(t.col) + ": " + msg);
    }

    void set_pos(Token& t, size_t pos) {
        // Positions mostly increase: walk forward from the last line, else search.
        if (pos < line_starts_[line_idx_]) {
            auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
            line_idx_ = static_cast<size_t>(it - line_starts_.begin()) - 1;
        }
        while (line_idx_ + 1 < line_starts_.size() && line_starts_[line_idx_ + 1] <= pos) ++line_idx_;
        t.line = static_cast<int>(line_idx_ + 1);
        t.col = static_cast<int>(pos - line_starts_[line_idx_] + 1);
    }

    void emit(Tok type, std::string text, size_t pos) {
        Token t;
        t.type = type;
        t.text = std::move(text);
        set_pos(t, pos);
        out_.push_back(std::move(t));
    }

    void emit_data(std::string_view text, size_t pos) {
        if (!text.empty()) emit(Tok::Data, std::string(text), pos);
    }

    // Whitespace control on the text before a tag (Jinja2's OptionalLStrip).
    static std::string_view apply_lstrip(std::string_view text, char sign, bool lstrip_applies, bool line_starting) {
        if (sign == '-') return rstrip_ws(text);
        if (sign == '+' || !lstrip_applies) return text;
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_ws(text.substr(l_pos))) return text.substr(0, l_pos);
        return text;
    }

    // {%(-|+|)\s*raw\s*(-%}\s*|%}) at k; sets end to the position after it.
    bool match_raw_begin(std::string_view s, size_t k, size_t& end) {
        size_t p = k + 2;
        raw_sign_ = 0;
        if (p < s.size() && (s[p] == '-' || s[p] == '+')) raw_sign_ = s[p++];
        p = skip_ws(s, p);
        if (s.substr(p, 3) != "raw") return false;
        p = skip_ws(s, p + 3);
        if (s.substr(p, 3) == "-%}") {
            end = skip_ws(s, p + 3);
            return true;
        }
        if (s.substr(p, 2) == "%}") {
            end = p + 2;
            return true;
        }
        return false;
    }

    size_t lex_raw(std::string_view s, size_t pos, bool& line_starting) {
        for (size_t k = s.find("{%", pos); k != std::string_view::npos; k = s.find("{%", k + 1)) {
            size_t p = k + 2;
            char sign = 0;
            if (p < s.size() && (s[p] == '-' || s[p] == '+')) sign = s[p++];
            p = skip_ws(s, p);
            if (s.substr(p, 6) != "endraw") continue;
            p = skip_ws(s, p + 6);
            size_t end;
            if (s.substr(p, 3) == "+%}") end = p + 3;
            else if (s.substr(p, 3) == "-%}") end = skip_ws(s, p + 3);
            else if (s.substr(p, 2) == "%}") end = p + 2 + (p + 2 < s.size() && s[p + 2] == '\n' ? 1 : 0);
            else continue;
            emit_data(apply_lstrip(s.substr(pos, k - pos), sign, true, line_starting), pos);
            line_starting = s[end - 1] == '\n';
            return end;
        }
        fail(pos, "Missing end of raw directive");
    }

    size_t lex_comment(std::string_view s, size_t after, size_t start, bool& line_starting) {
        size_t e = s.find("#}", after);
        if (e == std::string_view::npos) fail(start, "Missing end of comment tag");
        size_t end = e + 2;
        char sign = e > after ? s[e - 1] : 0;
        if (sign == '-') end = skip_ws(s, end);
        else if (sign != '+' && end < s.size() && s[end] == '\n') ++end;
        line_starting = s[end - 1] == '\n';
        return end;
    }

    size_t lex_tag(std::string_view s, size_t start, size_t pos, bool block, bool& line_starting) {
        emit(block ? Tok::BlockBegin : Tok::VarBegin, block ? "{%" : "{{", start);
        std::vector<char> balance;
        while (true) {
            if (pos >= s.size()) return pos;  // the parser reports the missing end tag
            if (balance.empty()) {
                size_t end = 0;
                if (block) {
                    if (s.compare(pos, 3, "+%}") == 0) end = pos + 3;
                    else if (s.compare(pos, 3, "-%}") == 0) end = skip_ws(s, pos + 3);
                    else if (s.compare(pos, 2, "%}") == 0)
                        end = pos + 2 + (pos + 2 < s.size() && s[pos + 2] == '\n' ? 1 : 0);
                } else {
                    if (s.compare(pos, 3, "-}}") == 0) end = skip_ws(s, pos + 3);
                    else if (s.compare(pos, 2, "}}") == 0) end = pos + 2;
                }
                if (end) {
                    emit(block ? Tok::BlockEnd : Tok::VarEnd, block ? "%}" : "}}", pos);
                    line_starting = s[end - 1] == '\n';
                    return end;
                }
            }
            if (size_t w = ws_at(s, pos)) {
                pos += w;
                continue;
            }
            if (size_t n = lex_number(s, pos)) {
                pos = n;
                continue;
            }
            auto c = static_cast<unsigned char>(s[pos]);
            if (is_name_start(c)) {
                size_t e = pos;
                while (e < s.size() && is_name_char(static_cast<unsigned char>(s[e])) && !ws_at(s, e)) ++e;
                emit(Tok::Name, std::string(s.substr(pos, e - pos)), pos);
                pos = e;
                continue;
            }
            if (c == '\'' || c == '"') {
                if (size_t e = lex_string(s, pos)) {
                    pos = e;
                    continue;
                }
            }
            std::string o = lex_operator(s, pos);
            if (o.empty())
                fail(pos, "unexpected char " + py::repr(std::string(1, s[pos])) + " at " + std::to_string(pos));
            if (o == "{" || o == "(" || o == "[") {
                balance.push_back(o == "{" ? '}' : o == "(" ? ')' : ']');
            } else if (o == "}" || o == ")" || o == "]") {
                if (balance.empty()) fail(pos, "unexpected '" + o + "'");
                char expected = balance.back();
                balance.pop_back();
                if (expected != o[0]) fail(pos, "unexpected '" + o + "', expected '" + std::string(1, expected) + "'");
            }
            emit(Tok::Op, o, pos);
            pos += o.size();
        }
    }

    // The longest operator at `pos`, or "".
    static std::string lex_operator(std::string_view s, size_t pos) {
        char c = s[pos], d = pos + 1 < s.size() ? s[pos + 1] : '\0';
        if ((c == '/' || c == '*') && d == c) return std::string(2, c);
        if ((c == '=' || c == '!' || c == '>' || c == '<') && d == '=') return std::string(1, c) + "=";
        if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) return std::string(1, c);
        return {};
    }

    // Digits with single '_' separators; returns the end or `pos` when none.
    static size_t digits(std::string_view s, size_t pos, bool (*ok)(char)) {
        size_t p = pos;
        if (p >= s.size() || !ok(s[p])) return pos;
        while (p < s.size()) {
            if (ok(s[p])) {
                ++p;
            } else if (s[p] == '_' && p + 1 < s.size() && ok(s[p + 1])) {
                p += 2;
            } else {
                break;
            }
        }
        return p;
    }

    size_t lex_number(std::string_view s, size_t pos) {
        if (!is_digit(s[pos])) return 0;
        // Float: D(.D)?(e[+-]?D)? with a fraction or an exponent, not right after a '.'.
        if (pos == 0 || s[pos - 1] != '.') {
            size_t p = digits(s, pos, is_digit);
            bool frac = false, expo = false;
            if (p < s.size() && s[p] == '.') {
                size_t q = digits(s, p + 1, is_digit);
                if (q > p + 1) {
                    p = q;
                    frac = true;
                }
            }
            if (p < s.size() && (s[p] | 32) == 'e') {
                size_t q = p + 1;
                if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
                size_t r = digits(s, q, is_digit);
                if (r > q) {
                    p = r;
                    expo = true;
                }
            }
            if (frac || expo) {
                std::string clean;
                for (size_t i = pos; i < p; ++i)
                    if (s[i] != '_') clean.push_back(s[i]);
                Token t;
                t.type = Tok::Float;
                t.text = clean;
                t.fval = std::strtod(clean.c_str(), nullptr);
                set_pos(t, pos);
                out_.push_back(std::move(t));
                return p;
            }
        }
        int base = 10;
        size_t p = 0, body = pos;
        auto bin = [](char c) { return c == '0' || c == '1'; };
        auto oct = [](char c) { return c >= '0' && c <= '7'; };
        auto hex = [](char c) { return is_digit(c) || ((c | 32) >= 'a' && (c | 32) <= 'f'); };
        auto zero = [](char c) { return c == '0'; };
        char x = pos + 1 < s.size() ? static_cast<char>(s[pos + 1] | 32) : 0;
        if (s[pos] == '0' && (x == 'b' || x == 'o' || x == 'x')) {
            int b = x == 'b' ? 2 : x == 'o' ? 8 : 16;
            size_t q = pos + 2;
            if (q < s.size() && s[q] == '_') ++q;
            size_t e = digits(s, q, b == 2 ? +bin : b == 8 ? +oct : +hex);
            if (e > q) {
                p = e;
                base = b;
                body = pos + 2;
            }
        }
        if (!p) p = s[pos] == '0' ? digits(s, pos, zero) : digits(s, pos, is_digit);
        std::string clean;
        for (size_t i = body; i < p; ++i)
            if (s[i] != '_') clean.push_back(s[i]);
        errno = 0;
        Token t;
        t.type = Tok::Int;
        t.text = std::string(s.substr(pos, p - pos));
        t.ival = std::strtoll(clean.c_str(), nullptr, base);
        if (errno == ERANGE) fail(pos, "integer literal too large");
        set_pos(t, pos);
        out_.push_back(std::move(t));
        return p;
    }

    // A quoted string with backslash escapes decoded like Python's "unicode-escape".
    size_t lex_string(std::string_view s, size_t pos) {
        char q = s[pos];
        size_t p = pos + 1;
        while (p < s.size() && s[p] != q) p += (s[p] == '\\' && p + 1 < s.size()) ? 2 : 1;
        if (p >= s.size()) return 0;
        std::string_view body = s.substr(pos + 1, p - pos - 1);
        std::string out;
        for (size_t i = 0; i < body.size(); ++i) {
            char c = body[i];
            if (c != '\\' || i + 1 >= body.size()) {
                out.push_back(c);
                continue;
            }
            char e = body[++i];
            auto hexval = [&](size_t n) -> char32_t {
                const char* what = n == 2   ? "truncated \\xXX escape"
                                   : n == 4 ? "truncated \\uXXXX escape"
                                            : "truncated \\UXXXXXXXX escape";
                char32_t v = 0;
                for (size_t k = 1; k <= n; ++k) {
                    if (i + k >= body.size()) fail(pos, what);
                    char h = body[i + k];
                    int d = is_digit(h) ? h - '0' : ((h | 32) >= 'a' && (h | 32) <= 'f') ? (h | 32) - 'a' + 10 : -1;
                    if (d < 0) fail(pos, what);
                    v = v * 16 + static_cast<char32_t>(d);
                }
                i += n;
                return v;
            };
            switch (e) {
                case '\n': break;
                case '\\': out.push_back('\\'); break;
                case '\'': out.push_back('\''); break;
                case '"': out.push_back('"'); break;
                case 'a': out.push_back('\a'); break;
                case 'b': out.push_back('\b'); break;
                case 'f': out.push_back('\f'); break;
                case 'n': out.push_back('\n'); break;
                case 'r': out.push_back('\r'); break;
                case 't': out.push_back('\t'); break;
                case 'v': out.push_back('\v'); break;
                case 'x': py::append_utf8(out, hexval(2)); break;
                case 'u': py::append_utf8(out, hexval(4)); break;
                case 'U': {
                    char32_t v = hexval(8);
                    if (v > 0x10FFFF) fail(pos, "illegal Unicode character");
                    py::append_utf8(out, v);
                    break;
                }
                default:
                    if (e >= '0' && e <= '7') {
                        char32_t v = static_cast<char32_t>(e - '0');
                        for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
                            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
                        py::append_utf8(out, v);
                    } else {
                        out.push_back('\\');
                        out.push_back(e);
                    }
            }
        }
        Token t;
        t.type = Tok::String;
        t.text = std::move(out);
        set_pos(t, pos);
        out_.push_back(std::move(t));
        return p + 1;
    }

    std::string src_;
    std::vector<size_t> line_starts_;
    size_t line_idx_ = 0;
    std::vector<Token> out_;
    char raw_sign_ = 0;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe(const Token& t) {
    switch (t.type) {
        case Tok::Data: return "template data / text";
        case Tok::VarBegin: return "begin of print statement";
        case Tok::VarEnd: return "end of print statement";
        case Tok::BlockBegin: return "begin of statement block";
        case Tok::BlockEnd: return "end of statement block";
        case Tok::Name: return t.text;
        case Tok::String: return "string";
        case Tok::Int: return "integer";
        case Tok::Float: return "float";
        case Tok::Op: return t.text;
        case Tok::Eof: return "end of template";
    }
    return "token";
}

}  // namespace loom::jinja::detail
