// Decoding of stored token texts to bytes; see token_pieces.hpp.
#include "grammar/token_pieces.hpp"

#include <array>
#include <stdexcept>

namespace loom::grammar {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

// GPT-2's table: printable Latin-1 bytes stand for themselves, the other 68 bytes map to
// U+0100.. in byte order. byte_of[cp] is the byte code point cp stands for, or -1.
const std::array<int16_t, 0x144>& byte_of() {
    static const std::array<int16_t, 0x144> table = [] {
        std::array<int16_t, 0x144> t;
        t.fill(-1);
        uint32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            t[printable ? static_cast<uint32_t>(b) : next++] = static_cast<int16_t>(b);
        }
        return t;
    }();
    return table;
}

int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

}  // namespace

std::string piece_bytes(std::string_view t, int32_t type, PieceSpelling spelling) {
    if (type == kPieceUnknown || type == kPieceControl || type == kPieceUnused) return {};
    std::string out;
    if (spelling == PieceSpelling::SentencePiece) {
        if (type == kPieceByte && t.size() == 6 && t.substr(0, 3) == "<0x" && t[5] == '>' && hex(t[3]) >= 0 &&
            hex(t[4]) >= 0)
            return std::string(1, static_cast<char>(hex(t[3]) * 16 + hex(t[4])));
        for (size_t k = 0; k < t.size();) {
            if (t.substr(k, kSpaceMarker.size()) == kSpaceMarker) {
                out += ' ';
                k += kSpaceMarker.size();
            } else {
                out += t[k++];
            }
        }
        return out;
    }
    if (type == kPieceUserDefined) return std::string(t);  // matched as raw text, so raw bytes
    const auto& table = byte_of();
    for (size_t k = 0; k < t.size();) {
        const auto c = static_cast<unsigned char>(t[k]);
        if (c >= 0xC0 && c < 0xE0 && k + 1 < t.size() && (static_cast<unsigned char>(t[k + 1]) & 0xC0) == 0x80) {
            const uint32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(t[k + 1]) & 0x3Fu);
            const int b = cp < table.size() ? table[cp] : -1;
            if (b >= 0) out += static_cast<char>(b);
            else out.append(t.substr(k, 2));  // not a byte character: keep its text
            k += 2;
            continue;
        }
        const int b = c < 0x80 ? table[c] : -1;
        out += b >= 0 ? static_cast<char>(b) : static_cast<char>(c);
        ++k;
    }
    return out;
}

std::vector<std::string> token_bytes_from_pieces(const std::vector<std::string>& pieces,
                                                 const std::vector<int32_t>& types, PieceSpelling spelling) {
    if (!types.empty() && types.size() != pieces.size())
        throw std::invalid_argument("token types and token texts differ in number");
    std::vector<std::string> out;
    out.reserve(pieces.size());
    for (size_t k = 0; k < pieces.size(); ++k)
        out.push_back(piece_bytes(pieces[k], types.empty() ? kPieceNormal : types[k], spelling));
    return out;
}

}  // namespace loom::grammar
