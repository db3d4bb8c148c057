// Sets of Unicode scalar values as sorted, disjoint, non-adjacent ranges; their UTF-8 bytes.
//
// Source: the UTF-8 encoding of RFC 3629 (section 3: 1 to 4 bytes, no surrogates, at most
// U+10FFFF), and the usual split of a code point range into runs of byte ranges that share
// one encoded length (as in RE2's and Rust regex-syntax's UTF-8 compilers).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace loom::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

/// A set of code points. Surrogates (U+D800..U+DFFF) are never members: they have no UTF-8
/// encoding, and every operation drops them.
class CharSet {
public:
    using Range = std::pair<uint32_t, uint32_t>;  ///< inclusive [first, second]

    CharSet() = default;
    /// The set of the given inclusive ranges (any order, may overlap; lo > hi ranges ignored).
    explicit CharSet(std::vector<Range> ranges);
    static CharSet single(uint32_t cp) { return CharSet({{cp, cp}}); }
    static CharSet range(uint32_t lo, uint32_t hi) { return CharSet({{lo, hi}}); }
    /// Every code point, U+0000..U+10FFFF without surrogates.
    static CharSet all() { return range(0, kMaxCodePoint); }

    const std::vector<Range>& ranges() const { return ranges_; }
    bool empty() const { return ranges_.empty(); }
    bool contains(uint32_t cp) const;
    /// Number of code points in the set.
    uint64_t size() const;

    CharSet operator|(const CharSet& o) const;
    CharSet operator&(const CharSet& o) const;
    CharSet operator-(const CharSet& o) const { return *this & o.complement(); }
    /// All code points not in the set.
    CharSet complement() const;
    bool operator==(const CharSet& o) const { return ranges_ == o.ranges_; }

private:
    void normalize();
    std::vector<Range> ranges_;
};

/// A run of byte ranges: one UTF-8 encoding shape, each byte in [lo, hi].
using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;

/// Calls `emit` with byte-range sequences whose union is exactly the UTF-8 encodings of
/// the code points in [lo, hi] (surrogates skipped). Sequences are disjoint.
void utf8_sequences(uint32_t lo, uint32_t hi, const std::function<void(const ByteRangeSeq&)>& emit);

/// Appends the UTF-8 encoding of scalar value `cp` (not a surrogate, <= U+10FFFF).
void append_utf8(std::string& out, uint32_t cp);

/// Decodes one UTF-8 character of `s` at `pos`, advancing `pos`. Returns false (and leaves
/// `pos`) when the bytes there are not a valid, shortest-form scalar value.
bool next_utf8(std::string_view s, size_t& pos, uint32_t& cp);

}  // namespace loom::grammar
