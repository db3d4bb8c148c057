// Text <-> token ids for a GGUF vocabulary.
//
// Follows llama.cpp's tokenizers (src/llama-vocab.cpp at c392e509), which the test
// vectors in shared/models/vocab were produced with: SentencePiece-style merges for
// "llama" vocabularies, byte-level BPE for "gpt2" ones, WordPiece for "bert".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf/vocab.hpp"

namespace loom::model {

class Tokenizer {
public:
    virtual ~Tokenizer() = default;

    /// Builds the tokenizer that the vocabulary's `tokenizer.ggml.model` names.
    /// Throws VocabError for vocabularies it cannot use.
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);
    static std::unique_ptr<Tokenizer> from_vocab(Vocab v);

    /// Encodes UTF-8 `text` into token ids.
    /// add_special: add BOS (and EOS) when the vocabulary asks for them.
    /// parse_special: text spelling a control token (e.g. "<|im_start|>") becomes that
    /// token; otherwise only user-defined tokens are matched as wholes.
    /// Bytes that are not valid UTF-8 are encoded like any other byte. Never throws
    /// for any input text.
    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

    /// The exact bytes that token `id` contributes to text: SentencePiece U+2581 is a
    /// space and `<0xNN>` is byte NN; byte-level BPE symbols map back to their bytes.
    /// Empty for special tokens (control, unknown, unused) and out-of-range ids.
    const std::string& token_bytes(int32_t id) const;

    /// Concatenated bytes of `ids`, skipping special tokens.
    std::string decode(std::span<const int32_t> ids) const;

    const Vocab& vocab() const { return vocab_; }
    int32_t n_vocab() const { return vocab_.size(); }

protected:
    explicit Tokenizer(Vocab v);
    /// Encodes a run of text that contains no special token. `after_special` is true
    /// when nothing (or only a special token) precedes it in the input.
    virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
    /// Bytes of a normal token's stored text (algorithm specific).
    virtual std::string piece_bytes(int32_t id) const = 0;
    /// Must be called by subclasses once constructed, to fill the byte table.
    void init_bytes();

    Vocab vocab_;

private:
    std::vector<std::string> bytes_;          // token_bytes() per id
    std::vector<int32_t> special_by_length_;  // matchable whole tokens, longest first
};

}  // namespace loom::model
