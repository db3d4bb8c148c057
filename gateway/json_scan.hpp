// An incremental JSON scanner: reads one JSON value byte by byte (resumable across
// calls, so a value arriving token by token is read once), reports when it ends or
// first goes wrong, and for a top-level object where each member's key and value lie.
//
// Source: RFC 8259 (the JSON grammar: values, strings and their escapes, numbers,
// insignificant whitespace). Nothing is decoded: callers slice the raw text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::gateway {

/// Scans one JSON value (RFC 8259). Offsets are bytes since the scanner's first byte.
/// Leading whitespace is allowed; the value ends at its last byte (a number, which has
/// no closing byte, ends only at the byte after it, or at finish()). Nesting deeper
/// than kMaxDepth is an error. Bytes of strings are not checked as UTF-8 (the text
/// they come from is checked where it is written out).
class JsonScanner {
public:
    static constexpr size_t kMaxDepth = 512;

    /// A member of the top-level object: raw key bytes (between the quotes, escapes
    /// not decoded) and the value's span [value_begin, value_end); value_end is npos
    /// while the value is still open. `kind` is the value's first byte ('{', '[', '"',
    /// 't', 'f', 'n', '-' or a digit).
    struct Member {
        std::string key;
        size_t value_begin = std::string::npos, value_end = std::string::npos;
        char kind = 0;
    };

    /// Reads bytes of `s` until the value is complete or malformed; returns how many
    /// were used (all of them while the value is still open). After done() or error()
    /// it uses nothing.
    size_t feed(std::string_view s);

    /// The input ended: a number at the top level is complete; anything else still
    /// open is an error.
    void finish();

    bool done() const { return state_ == S::Done; }
    bool error() const { return state_ == S::Error; }
    /// Bytes consumed so far.
    size_t pos() const { return pos_; }
    /// Offset of the value's first byte (npos before it).
    size_t value_begin() const { return begin_; }
    /// The top-level value's first byte, 0 before it.
    char kind() const { return kind_; }
    /// Members of a top-level object so far, in order.
    const std::vector<Member>& members() const { return members_; }

private:
    enum class S : uint8_t {
        Value,       // a value must come next (whitespace first)
        AfterValue,  // a value ended inside a container: ',' or the closer
        ObjKey,      // '{' or ',' in an object: a key string (or '}' right after '{')
        Colon,       // after a key
        Str,
        StrEsc,
        StrHex,
        Num,  // inside a number (validated by num_)
        Lit,  // inside true/false/null
        Done,
        Error,
    };
    void step(unsigned char c);
    void value_start(unsigned char c);
    void value_end(size_t end);    // a value closed at byte offset `end` (exclusive)
    void next_member(bool first);  // after '{', '[' or ',': a key or a value of the innermost container
    void fail() { state_ = S::Error; }

    S state_ = S::Value;
    std::vector<char> stack_;    // open containers: '{' or '['
    bool key_string_ = false;    // the open string is an object key
    bool first_in_obj_ = false;  // ObjKey right after '{' ('}' allowed)
    bool first_in_arr_ = false;  // Value right after '[' (']' allowed)
    int hex_left_ = 0;
    uint8_t num_ = 0;       // number sub-state
    std::string_view lit_;  // literal being matched
    size_t lit_at_ = 0;
    size_t pos_ = 0, begin_ = std::string::npos;
    char kind_ = 0;
    std::vector<Member> members_;
};

}  // namespace loom::gateway
