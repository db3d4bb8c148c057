// Python str semantics on UTF-8 text: code points, whitespace, case mapping, repr.
//
// Internal to loom_jinja. Text is processed as Unicode code points like Python 3 str;
// bytes that are not valid UTF-8 map to lone surrogates U+DC80..U+DCFF (Python's
// "surrogateescape") so that decoding and re-encoding gives back the same bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::jinja::py {

/// Decodes UTF-8 into code points (invalid bytes become U+DC80+byte).
std::u32string decode(std::string_view s);
/// Encodes code points as UTF-8 (U+DC80..U+DCFF become the original bytes again).
std::string encode(std::u32string_view cps);
/// Appends the UTF-8 encoding of `c`.
void append_utf8(std::string& out, char32_t c);
/// Number of code points (Python len()).
size_t length(std::string_view s);
/// True when `s` is pure ASCII (byte index == code point index).
bool is_ascii(std::string_view s);

/// Python str.isspace() for one code point (also what `\s` matches in Python's re).
bool is_space(char32_t c);
/// Unicode simple case mappings (C.UTF-8 tables), Python's isupper/islower per char.
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_upper(char32_t c);
bool is_lower(char32_t c);
bool is_alpha(char32_t c);
bool is_alnum(char32_t c);
bool is_digit(char32_t c);
/// Python's `\w` (letters, digits, underscore).
bool is_word(char32_t c);
/// Python str.isprintable() for one code point (approximate outside the common planes).
bool is_printable(char32_t c);

/// str.upper(), str.lower(), str.title(), str.capitalize(), str.swapcase().
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
std::string swapcase(std::string_view s);
/// Jinja2's `title` filter: words start after runs of whitespace, '-', '(', '{', '[', '<'.
std::string jinja_title(std::string_view s);

/// str.strip/lstrip/rstrip: `chars` nullopt strips Unicode whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
/// str.split(sep, maxsplit) (sep nullopt: runs of whitespace); rsplit when `from_right`.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right);
/// str.splitlines(keepends).
std::vector<std::string> splitlines(std::string_view s, bool keepends);
/// str.replace(old, new, count) (count < 0: all).
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
/// str.find/rfind with code point indices (start/end as Python slice bounds); -1 if absent.
int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool from_right);
/// str.count(sub).
int64_t count(std::string_view s, std::string_view sub);
/// str.center/ljust/rjust(width, fill).
std::string pad(std::string_view s, int64_t width, char32_t fill, int align /*-1 left, 0 center, 1 right*/);
/// s[index] by code point with Python's negative indices; nullopt when out of range.
std::optional<std::string> char_at(std::string_view s, int64_t index);
/// s[start:stop:step] by code points (Python slice semantics; step != 0).
std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);

/// Python repr() of a str: quoted with ' (or " when only ' occurs), escapes as Python.
std::string repr(std::string_view s);
/// Python repr()/str() of a float: shortest round-trip digits, "1.0", "1e+16", "inf", "nan".
std::string float_repr(double d);

/// Adjusts Python slice bounds for a sequence of `len` items; returns the selected indices.
std::vector<int64_t> slice_indices(int64_t len, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   int64_t step);

}  // namespace loom::jinja::py
