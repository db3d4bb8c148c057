// Token bytes from a GGUF vocabulary's stored token texts, for engines (which carry no tokenizer).
//
// A GGUF file stores each token's text as the tokenizer spells it (`tokenizer.ggml.tokens`):
// SentencePiece writes a space as U+2581 and byte-fallback tokens as `<0xNN>`; GPT-2's
// byte-level BPE writes every byte as a printable character (bytes_to_unicode in OpenAI's
// gpt-2 encoder.py). VocabBytes wants the bytes a token adds to the text; this decodes
// them exactly as loom's model::Tokenizer::token_bytes does (tests/unit/grammar_pieces.cpp
// compares the two on every shared vocabulary), without linking the tokenizer library.
// Sources: the GGUF specification, "Tokenizer" keys; llama.cpp's token_to_piece.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::grammar {

/// How the vocabulary spells its tokens, from `tokenizer.ggml.model`.
enum class PieceSpelling {
    SentencePiece,  ///< "llama" (and "bert"): U+2581 is a space, byte tokens are <0xNN>
    ByteLevel,      ///< "gpt2": one printable character per byte
};

/// GGUF token types (`tokenizer.ggml.token_type`, llama.cpp's llama_token_type).
enum PieceType : int32_t {
    kPieceNormal = 1,
    kPieceUnknown = 2,
    kPieceControl = 3,
    kPieceUserDefined = 4,
    kPieceUnused = 5,
    kPieceByte = 6
};

/// The bytes of one token: empty for unknown, control and unused tokens (they carry no
/// text); user-defined tokens of a byte-level vocabulary are their raw text.
std::string piece_bytes(std::string_view piece, int32_t type, PieceSpelling spelling);

/// piece_bytes() of every token. `types` may be empty (all normal) or one per token.
/// Throws std::invalid_argument when `types` has another length.
std::vector<std::string> token_bytes_from_pieces(const std::vector<std::string>& pieces,
                                                 const std::vector<int32_t>& types, PieceSpelling spelling);

}  // namespace loom::grammar
