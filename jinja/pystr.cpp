// Python str semantics on UTF-8 text: code points, whitespace, case mapping, repr.
#include "jinja/pystr.hpp"

#include <locale.h>
#include <algorithm>
#include <charconv>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cwctype>

namespace loom::jinja::py {

namespace {

locale_t utf8_locale() {
    static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
    return loc;
}

bool is_surrogate(char32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

}  // namespace

std::u32string decode(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0, n = s.size();
    while (i < n) {
        auto b = static_cast<unsigned char>(s[i]);
        if (b < 0x80) {
            out.push_back(b);
            ++i;
            continue;
        }
        int len = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
        char32_t cp = len == 4 ? (b & 0x07) : len == 3 ? (b & 0x0F) : (b & 0x1F);
        bool ok = len > 0 && i + len <= n;
        for (int k = 1; ok && k < len; ++k) {
            auto c = static_cast<unsigned char>(s[i + k]);
            if ((c & 0xC0) != 0x80) ok = false;
            cp = (cp << 6) | (c & 0x3F);
        }
        if (ok && ((len == 3 && (cp < 0x800 || is_surrogate(cp))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))))
            ok = false;
        if (!ok) {
            out.push_back(0xDC00 + b);  // surrogateescape
            ++i;
            continue;
        }
        out.push_back(cp);
        i += len;
    }
    return out;
}

void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
        out.push_back(static_cast<char>(c - 0xDC00));  // surrogateescape'd byte
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

std::string encode(std::u32string_view cps) {
    std::string out;
    out.reserve(cps.size());
    for (char32_t c : cps) append_utf8(out, c);
    return out;
}

bool is_ascii(std::string_view s) {
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

size_t length(std::string_view s) { return is_ascii(s) ? s.size() : decode(s).size(); }

bool is_space(char32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t to_upper(char32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if (is_surrogate(c) || !utf8_locale()) return c;
    return static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), utf8_locale()));
}

char32_t to_lower(char32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (is_surrogate(c) || !utf8_locale()) return c;
    return static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), utf8_locale()));
}

bool is_upper(char32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z';
    return !is_surrogate(c) && utf8_locale() && iswupper_l(static_cast<wint_t>(c), utf8_locale());
}

bool is_lower(char32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z';
    if (c == 0xDF) return true;
    return !is_surrogate(c) && utf8_locale() && iswlower_l(static_cast<wint_t>(c), utf8_locale());
}

bool is_alpha(char32_t c) {
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    return !is_surrogate(c) && utf8_locale() && iswalpha_l(static_cast<wint_t>(c), utf8_locale());
}

bool is_digit(char32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    return !is_surrogate(c) && utf8_locale() && iswdigit_l(static_cast<wint_t>(c), utf8_locale());
}

bool is_alnum(char32_t c) { return is_alpha(c) || is_digit(c); }

bool is_word(char32_t c) { return c == '_' || is_alnum(c); }

bool is_printable(char32_t c) {
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    if (c <= 0xA0 || c == 0xAD) return false;
    if (c == 0x061C || c == 0x180E || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x206F) || c == 0x3000 || is_surrogate(c) || (c >= 0xE000 && c <= 0xF8FF) || c == 0xFEFF ||
        (c >= 0xFFF0 && c <= 0xFFFB) || c == 0xFFFE || c == 0xFFFF)
        return false;
    return c < 0xE0000 && (c & 0xFFFE) != 0xFFFE;
}

namespace {

void append_upper(std::string& out, char32_t c) {
    if (c == 0xDF) {
        out += "SS";
        return;
    }
    append_utf8(out, to_upper(c));
}

void append_lower(std::string& out, char32_t c) {
    if (c == 0x130) {
        out += "i\xCC\x87";
        return;
    }
    append_utf8(out, to_lower(c));
}

void append_titlecase(std::string& out, char32_t c) {
    if (c == 0xDF) {
        out += "Ss";
        return;
    }
    append_utf8(out, to_upper(c));
}

bool is_cased(char32_t c) { return is_upper(c) || is_lower(c); }

}  // namespace

std::string upper(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : decode(s)) append_upper(out, c);
    return out;
}

std::string lower(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : decode(s)) append_lower(out, c);
    return out;
}

std::string title(std::string_view s) {
    std::string out;
    bool prev_cased = false;
    for (char32_t c : decode(s)) {
        if (is_cased(c)) {
            if (prev_cased) append_lower(out, c);
            else append_titlecase(out, c);
            prev_cased = true;
        } else {
            append_utf8(out, c);
            prev_cased = false;
        }
    }
    return out;
}

std::string capitalize(std::string_view s) {
    std::string out;
    bool first = true;
    for (char32_t c : decode(s)) {
        if (first) append_titlecase(out, c);
        else append_lower(out, c);
        first = false;
    }
    return out;
}

std::string swapcase(std::string_view s) {
    std::string out;
    for (char32_t c : decode(s)) {
        if (is_upper(c)) append_lower(out, c);
        else if (is_lower(c)) append_upper(out, c);
        else append_utf8(out, c);
    }
    return out;
}

std::string jinja_title(std::string_view s) {
    auto is_sep = [](char32_t c) { return is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
    std::string out;
    bool word_start = true;
    for (char32_t c : decode(s)) {
        if (is_sep(c)) {
            append_utf8(out, c);
            word_start = true;
        } else if (word_start) {
            append_upper(out, c);
            word_start = false;
        } else {
            append_lower(out, c);
        }
    }
    return out;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
    std::u32string cps = decode(s);
    std::u32string set;
    if (chars) set = decode(*chars);
    auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b])) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1])) --e;
    return encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right) {
    std::vector<std::string> out;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sep) {
        const std::string& d = *sep;
        if (!from_right) {
            size_t pos = 0;
            while (maxsplit-- > 0) {
                size_t k = s.find(d, pos);
                if (k == std::string_view::npos) break;
                out.emplace_back(s.substr(pos, k - pos));
                pos = k + d.size();
            }
            out.emplace_back(s.substr(pos));
        } else {
            size_t end = s.size();
            while (maxsplit-- > 0 && end >= d.size()) {
                size_t k = s.rfind(d, end - d.size());
                if (k == std::string_view::npos) break;
                out.emplace_back(s.substr(k + d.size(), end - k - d.size()));
                end = k;
            }
            out.emplace_back(s.substr(0, end));
            std::reverse(out.begin(), out.end());
        }
        return out;
    }
    std::u32string cps = decode(s);
    size_t n = cps.size();
    if (!from_right) {
        size_t i = 0;
        while (true) {
            while (i < n && is_space(cps[i])) ++i;
            if (i >= n) break;
            if (maxsplit == 0) {
                out.push_back(encode(std::u32string_view(cps).substr(i)));
                break;
            }
            size_t j = i;
            while (j < n && !is_space(cps[j])) ++j;
            out.push_back(encode(std::u32string_view(cps).substr(i, j - i)));
            --maxsplit;
            i = j;
        }
    } else {
        size_t i = n;
        while (true) {
            while (i > 0 && is_space(cps[i - 1])) --i;
            if (i == 0) break;
            if (maxsplit == 0) {
                out.push_back(encode(std::u32string_view(cps).substr(0, i)));
                break;
            }
            size_t j = i;
            while (j > 0 && !is_space(cps[j - 1])) --j;
            out.push_back(encode(std::u32string_view(cps).substr(j, i - j)));
            --maxsplit;
            i = j;
        }
        std::reverse(out.begin(), out.end());
    }
    return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
    std::u32string cps = decode(s);
    std::vector<std::string> out;
    size_t i = 0, start = 0, n = cps.size();
    auto is_break = [](char32_t c) {
        return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    };
    while (i < n) {
        if (is_break(cps[i])) {
            size_t eol = i + 1;
            if (cps[i] == '\r' && eol < n && cps[eol] == '\n') ++eol;
            out.push_back(encode(std::u32string_view(cps).substr(start, (keepends ? eol : i) - start)));
            start = i = eol;
        } else {
            ++i;
        }
    }
    if (start < n) out.push_back(encode(std::u32string_view(cps).substr(start)));
    return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
    if (count < 0) count = INT64_MAX;
    std::string out;
    if (old.empty()) {
        // Python inserts `repl` before every code point and at the end.
        std::u32string cps = decode(s);
        for (char32_t c : cps) {
            if (count > 0) {
                out += repl;
                --count;
            }
            append_utf8(out, c);
        }
        if (count > 0) out += repl;
        return out;
    }
    size_t pos = 0;
    while (count > 0) {
        size_t k = s.find(old, pos);
        if (k == std::string_view::npos) break;
        out.append(s.substr(pos, k - pos));
        out.append(repl);
        pos = k + old.size();
        --count;
    }
    out.append(s.substr(pos));
    return out;
}

int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool from_right) {
    std::u32string cps = decode(s), needle = decode(sub);
    auto len = static_cast<int64_t>(cps.size());
    int64_t b = start.value_or(0), e = end.value_or(len);
    if (b < 0) b = std::max<int64_t>(0, b + len);
    if (e < 0) e = std::max<int64_t>(0, e + len);
    e = std::min(e, len);
    auto m = static_cast<int64_t>(needle.size());
    if (b > len || e - b < m) return -1;
    std::u32string_view hay = std::u32string_view(cps).substr(b, e - b);
    size_t k = from_right ? hay.rfind(needle) : hay.find(needle);
    return k == std::u32string_view::npos ? -1 : b + static_cast<int64_t>(k);
}

int64_t count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
    int64_t n = 0;
    for (size_t k = s.find(sub); k != std::string_view::npos; k = s.find(sub, k + sub.size())) ++n;
    return n;
}

std::string pad(std::string_view s, int64_t width, char32_t fill, int align) {
    auto len = static_cast<int64_t>(length(s));
    if (width <= len) return std::string(s);
    int64_t marg = width - len, left = 0;
    if (align == 0) left = marg / 2 + (marg & width & 1);
    else if (align > 0) left = marg;
    std::string f;
    append_utf8(f, fill);
    std::string out;
    for (int64_t i = 0; i < left; ++i) out += f;
    out += s;
    for (int64_t i = left; i < marg; ++i) out += f;
    return out;
}

std::vector<int64_t> slice_indices(int64_t len, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   int64_t step) {
    auto adjust = [&](std::optional<int64_t> v, bool is_start) -> int64_t {
        if (!v) return step < 0 ? (is_start ? len - 1 : -1) : (is_start ? 0 : len);
        int64_t x = *v;
        if (x < 0) {
            x += len;
            if (x < 0) x = step < 0 ? -1 : 0;
        } else if (x >= len) {
            x = step < 0 ? len - 1 : len;
        }
        return x;
    };
    int64_t b = adjust(start, true), e = adjust(stop, false);
    std::vector<int64_t> out;
    if (step > 0)
        for (int64_t i = b; i < e; i += step) out.push_back(i);
    else
        for (int64_t i = b; i > e; i += step) out.push_back(i);
    return out;
}

std::optional<std::string> char_at(std::string_view s, int64_t index) {
    if (is_ascii(s)) {
        auto len = static_cast<int64_t>(s.size());
        if (index < 0) index += len;
        if (index < 0 || index >= len) return std::nullopt;
        return std::string(1, s[static_cast<size_t>(index)]);
    }
    std::u32string cps = decode(s);
    auto len = static_cast<int64_t>(cps.size());
    if (index < 0) index += len;
    if (index < 0 || index >= len) return std::nullopt;
    std::string out;
    append_utf8(out, cps[static_cast<size_t>(index)]);
    return out;
}

std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
    if (is_ascii(s)) {
        std::string out;
        for (int64_t i : slice_indices(static_cast<int64_t>(s.size()), start, stop, step))
            out.push_back(s[static_cast<size_t>(i)]);
        return out;
    }
    std::u32string cps = decode(s);
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step))
        append_utf8(out, cps[static_cast<size_t>(i)]);
    return out;
}

std::string repr(std::string_view s) {
    std::u32string cps = decode(s);
    bool has_single = false, has_double = false;
    for (char32_t c : cps) {
        has_single |= c == '\'';
        has_double |= c == '"';
    }
    char32_t quote = (has_single && !has_double) ? '"' : '\'';
    std::string out;
    out.push_back(static_cast<char>(quote));
    char buf[16];
    for (char32_t c : cps) {
        if (c == quote || c == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (is_printable(c)) {
            append_utf8(out, c);
        } else {
            if (c <= 0xFF) snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
            else if (c <= 0xFFFF) snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            else snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
            out += buf;
        }
    }
    out.push_back(static_cast<char>(quote));
    return out;
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, res.ptr);
    std::string out;
    size_t i = 0;
    if (sci[0] == '-') {
        out.push_back('-');
        i = 1;
    }
    size_t epos = sci.find('e');
    std::string digits;
    for (size_t k = i; k < epos; ++k)
        if (sci[k] != '.') digits.push_back(sci[k]);
    int exp = std::atoi(sci.c_str() + epos + 1);
    int decpt = exp + 1;
    auto nd = static_cast<int>(digits.size());
    if (decpt <= -4 || decpt > 16) {
        out += digits.substr(0, 1);
        if (nd > 1) {
            out += '.';
            out.append(digits, 1, std::string::npos);
        }
        char eb[16];
        snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        out += eb;
    } else if (decpt <= 0) {
        out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
        out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
        out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
}

}  // namespace loom::jinja::py
