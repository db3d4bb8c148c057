// Code point sets and their UTF-8 byte-range sequences; see charset.hpp.
#include "grammar/charset.hpp"

#include <algorithm>
#include <string_view>

namespace loom::grammar {
namespace {

constexpr uint32_t kSurLo = 0xD800, kSurHi = 0xDFFF;

// Largest code point encoded with n bytes.
constexpr uint32_t kMaxOfLen[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

void encode_fixed(uint32_t cp, int n, uint8_t* out) {
    if (n == 1) {
        out[0] = static_cast<uint8_t>(cp);
        return;
    }
    static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int k = n - 1; k > 0; --k) {
        out[k] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

// [lo, hi] with lo and hi of the same encoded length n: split until every byte position
// below the first differing one spans its full continuation range.
void split_same_len(uint32_t lo, uint32_t hi, int n, const std::function<void(const ByteRangeSeq&)>& emit) {
    if (n == 1) {
        emit({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
        return;
    }
    // Find a split: for the trailing k continuation bytes (6k bits), if lo is not aligned
    // to the start or hi to the end of a 6k-bit block, split off the ragged part.
    for (int k = 1; k < n; ++k) {
        const uint32_t m = (1u << (6 * k)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split_same_len(lo, lo | m, n, emit);
                split_same_len((lo | m) + 1, hi, n, emit);
                return;
            }
            if ((hi & m) != m) {
                split_same_len(lo, (hi & ~m) - 1, n, emit);
                split_same_len(hi & ~m, hi, n, emit);
                return;
            }
        }
    }
    uint8_t a[4], b[4];
    encode_fixed(lo, n, a);
    encode_fixed(hi, n, b);
    ByteRangeSeq seq;
    for (int k = 0; k < n; ++k) seq.emplace_back(a[k], b[k]);
    emit(seq);
}

}  // namespace

CharSet::CharSet(std::vector<Range> ranges) : ranges_(std::move(ranges)) { normalize(); }

void CharSet::normalize() {
    std::vector<Range> in;
    in.swap(ranges_);
    // Drop empty ranges, clamp, and cut the surrogates out.
    std::vector<Range> clean;
    for (auto [lo, hi] : in) {
        if (lo > hi || lo > kMaxCodePoint) continue;
        hi = std::min(hi, kMaxCodePoint);
        if (hi < kSurLo || lo > kSurHi) {
            clean.emplace_back(lo, hi);
            continue;
        }
        if (lo < kSurLo) clean.emplace_back(lo, kSurLo - 1);
        if (hi > kSurHi) clean.emplace_back(kSurHi + 1, hi);
    }
    std::sort(clean.begin(), clean.end());
    for (auto r : clean) {
        // Ranges that touch across the surrogate gap are merged too: nothing lies between.
        if (!ranges_.empty()) {
            uint32_t next = ranges_.back().second + 1;
            if (next == kSurLo) next = kSurHi + 1;
            if (r.first <= next) {
                ranges_.back().second = std::max(ranges_.back().second, r.second);
                continue;
            }
        }
        ranges_.push_back(r);
    }
}

bool CharSet::contains(uint32_t cp) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), Range{cp, UINT32_MAX});
    if (it == ranges_.begin()) return false;
    --it;
    return cp >= it->first && cp <= it->second && !(cp >= kSurLo && cp <= kSurHi);
}

uint64_t CharSet::size() const {
    uint64_t n = 0;
    for (auto [lo, hi] : ranges_) {
        n += hi - lo + 1;
        if (lo < kSurLo && hi > kSurHi) n -= kSurHi - kSurLo + 1;
    }
    return n;
}

CharSet CharSet::operator|(const CharSet& o) const {
    std::vector<Range> all = ranges_;
    all.insert(all.end(), o.ranges_.begin(), o.ranges_.end());
    return CharSet(std::move(all));
}

CharSet CharSet::complement() const {
    std::vector<Range> out;
    uint32_t next = 0;
    for (auto [lo, hi] : ranges_) {
        if (lo > next) out.emplace_back(next, lo - 1);
        next = hi + 1;
    }
    if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
    return CharSet(std::move(out));
}

CharSet CharSet::operator&(const CharSet& o) const {
    std::vector<Range> out;
    size_t i = 0, j = 0;
    while (i < ranges_.size() && j < o.ranges_.size()) {
        const uint32_t lo = std::max(ranges_[i].first, o.ranges_[j].first);
        const uint32_t hi = std::min(ranges_[i].second, o.ranges_[j].second);
        if (lo <= hi) out.emplace_back(lo, hi);
        if (ranges_[i].second < o.ranges_[j].second) ++i;
        else ++j;
    }
    return CharSet(std::move(out));
}

void utf8_sequences(uint32_t lo, uint32_t hi, const std::function<void(const ByteRangeSeq&)>& emit) {
    const CharSet set = CharSet::range(lo, hi);
    for (auto [a, b] : set.ranges()) {
        for (int n = 1; n <= 4 && a <= b; ++n) {
            if (a > kMaxOfLen[n]) continue;
            const uint32_t end = std::min(b, kMaxOfLen[n]);
            // The surrogate gap lies inside the 3-byte range: encode the two sides apart.
            if (n == 3 && a < kSurLo && end > kSurHi) {
                split_same_len(a, kSurLo - 1, 3, emit);
                split_same_len(kSurHi + 1, end, 3, emit);
            } else {
                split_same_len(a, end, n, emit);
            }
            a = end + 1;
        }
    }
}

void append_utf8(std::string& out, uint32_t cp) {
    const int n = cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4;
    uint8_t b[4];
    encode_fixed(cp, n, b);
    out.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
}

bool next_utf8(std::string_view s, size_t& pos, uint32_t& cp) {
    if (pos >= s.size()) return false;
    const auto c0 = static_cast<uint8_t>(s[pos]);
    int n;
    uint32_t v;
    if (c0 < 0x80) {
        cp = c0;
        ++pos;
        return true;
    } else if (c0 >= 0xC2 && c0 <= 0xDF) {
        n = 2, v = c0 & 0x1F;
    } else if (c0 >= 0xE0 && c0 <= 0xEF) {
        n = 3, v = c0 & 0x0F;
    } else if (c0 >= 0xF0 && c0 <= 0xF4) {
        n = 4, v = c0 & 0x07;
    } else {
        return false;
    }
    if (pos + static_cast<size_t>(n) > s.size()) return false;
    for (int k = 1; k < n; ++k) {
        const auto c = static_cast<uint8_t>(s[pos + static_cast<size_t>(k)]);
        if ((c & 0xC0) != 0x80) return false;
        v = (v << 6) | (c & 0x3F);
    }
    if (v <= kMaxOfLen[n - 1] || v > kMaxCodePoint || (v >= kSurLo && v <= kSurHi)) return false;
    cp = v;
    pos += static_cast<size_t>(n);
    return true;
}

}  // namespace loom::grammar
