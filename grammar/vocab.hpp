// A model's vocabulary as the bytes each token contributes to the text, in a byte trie.
//
// The adapter between a tokenizer and the grammar engine: the caller passes, per token id,
// the exact bytes the token decodes to (SentencePiece U+2581 already a space, <0xNN> already
// byte NN, GPT-2 byte symbols already bytes; empty for control tokens), and the ids that end
// generation. The gateway has them from model::Tokenizer::token_bytes; an engine, which links
// no tokenizer, from the GGUF token texts with token_bytes_from_pieces (token_pieces.hpp). Tokens with no bytes are never allowed
// by a grammar, except the end ids when the grammar can end.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::grammar {

/// The trie of all non-empty token byte strings, in depth-first preorder: node 0 is the
/// root (the empty prefix); node i (i > 0) adds byte `byte[i]` to its parent's prefix, at
/// depth `depth[i]`; its subtree is nodes i .. end[i]-1. The tokens whose bytes are exactly
/// node i's prefix are tok[tok_begin[i] .. tok_begin[i+1]); those of its subtree are
/// tok[tok_begin[i] .. tok_begin[end[i]]) (tokens are listed in preorder).
struct TokenTrie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<uint32_t> end;
    std::vector<uint32_t> tok_begin;  // n_nodes + 1 entries
    std::vector<int32_t> tok;
    int max_depth = 0;
    size_t n_nodes() const { return byte.size(); }
};

class VocabBytes {
public:
    /// `token_bytes[id]` is token id's bytes; `eog` the ids that end generation; `n_vocab`
    /// the number of logits (>= token_bytes.size(); ids beyond the list have no bytes), or
    /// -1 for token_bytes.size(). Tokens longer than 65535 bytes are treated as having none.
    /// Throws std::invalid_argument for an eog id outside 0..n_vocab-1.
    VocabBytes(std::vector<std::string> token_bytes, std::vector<int32_t> eog, int32_t n_vocab = -1);

    int32_t n_vocab() const { return n_vocab_; }
    /// Bytes of token `id` ("" for an id with none or out of range).
    const std::string& bytes(int32_t id) const;
    const std::vector<int32_t>& eog() const { return eog_; }
    bool is_eog(int32_t id) const;
    const TokenTrie& trie() const { return trie_; }

    /// 32-bit words in a token mask of this vocabulary: bit (id % 32) of word (id / 32).
    size_t mask_words() const { return (static_cast<size_t>(n_vocab_) + 31) / 32; }

private:
    std::vector<std::string> bytes_;
    std::vector<int32_t> eog_;
    std::vector<uint8_t> is_eog_;
    int32_t n_vocab_ = 0;
    TokenTrie trie_;
};

}  // namespace loom::grammar
