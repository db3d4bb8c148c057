// Input quoted in error messages and logs, cut short: a client's 7 MiB `model` or an
// engine's endless ERR line must not come back whole.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace loom::gateway {

/// Longest piece of an input value an error message repeats, in bytes.
inline constexpr size_t kQuoteMax = 200;

/// `v` itself when it is at most `max` bytes; else its first `max` bytes (cut back to a
/// UTF-8 character boundary), "...", and the full length: "abc... (7340032 bytes)".
inline std::string cut(std::string_view v, size_t max = kQuoteMax) {
    if (v.size() <= max) return std::string(v);
    size_t n = max;
    while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) --n;
    std::string out(v.substr(0, n));
    out.append("... (").append(std::to_string(v.size())).append(" bytes)");
    return out;
}

/// `v` between single quotes, cut as cut() does but with the length after the quote:
/// "'abc'" or "'abc...' (7340032 bytes)".
inline std::string quoted(std::string_view v, size_t max = kQuoteMax) {
    std::string out(1, '\'');
    if (v.size() <= max) return out.append(v).append(1, '\'');
    size_t n = max;
    while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) --n;
    out.append(v.substr(0, n)).append("...' (").append(std::to_string(v.size())).append(" bytes)");
    return out;
}

}  // namespace loom::gateway
