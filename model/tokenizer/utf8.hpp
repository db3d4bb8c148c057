// UTF-8 text helpers shared by the tokenizers and the pre-tokenizer (model/*.cpp); internal.
//
// Source: the UTF-8 encoding of RFC 3629, and llama.cpp's token_to_piece (src/llama-vocab.cpp)
// for the SentencePiece space marker.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom::model {

/// Appends code point `cp` to `out` in UTF-8: 1 byte below U+0080, 2 below U+0800, 3 below
/// U+10000, else 4. No checks: the caller passes a Unicode scalar value (cp <= U+10FFFF, not
/// a surrogate), or gets the bytes that the same bit pattern spells.
inline void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

/// U+2581 (LOWER ONE EIGHTH BLOCK) in UTF-8: SentencePiece's space, and the word-initial
/// marker with which the GGUF converter spells WordPiece vocabularies.
inline constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

/// The bytes of token text `t` with each kSpaceMarker decoded as one space (llama.cpp's
/// token_to_piece); every other byte is copied as it is. Never throws but for std::bad_alloc.
inline std::string spaces_from_markers(std::string_view t) {
    std::string out;
    for (size_t k = 0; k < t.size();) {
        if (t.compare(k, kSpaceMarker.size(), kSpaceMarker) == 0) {
            out += ' ';
            k += kSpaceMarker.size();
        } else {
            out += t[k++];
        }
    }
    return out;
}

}  // namespace loom::model
