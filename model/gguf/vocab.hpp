// A model's vocabulary as stored under the GGUF `tokenizer.*` keys.
//
// Source: GGUF specification (ggml/docs/gguf.md, "Tokenizer" keys) and the token-type
// values of llama.cpp's llama_token_type (1 normal, 2 unknown, 3 control,
// 4 user-defined, 5 unused, 6 byte).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf/gguf.hpp"

namespace loom::model {

/// A vocabulary that cannot be used (missing or inconsistent tokenizer keys).
class VocabError : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

/// Which tokenization algorithm the vocabulary needs (`tokenizer.ggml.model`).
enum class VocabKind {
    Spm,  ///< "llama": SentencePiece-style score-driven merges with byte fallback
    Bpe,  ///< "gpt2": byte-level BPE with ranked merges and a pre-tokenizer
    Wpm,  ///< "bert": WordPiece
};

constexpr int32_t kNoToken = -1;

struct Vocab {
    VocabKind kind = VocabKind::Spm;
    std::string model;                ///< tokenizer.ggml.model as written
    std::string pre;                  ///< tokenizer.ggml.pre ("" when absent)
    std::vector<std::string> tokens;  ///< token text as stored (SPM uses U+2581 for space)
    std::vector<float> scores;        ///< per token; empty when absent
    std::vector<TokenType> types;     ///< per token; Normal when absent
    std::vector<std::string> merges;  ///< BPE merges "a b", in rank order
    std::unordered_map<std::string, int32_t> token_to_id;

    int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken;
    int32_t unk = kNoToken, pad = kNoToken, sep = kNoToken;
    /// From tokenizer.ggml.add_bos_token etc.; when that key is absent, add_bos is true
    /// for "llama" (SentencePiece) vocabularies and for BPE ones whose pre-tokenizer is
    /// Llama 3's ("llama3", "llama-v3", "llama-bpe", "falcon3"), as in llama.cpp.
    bool add_bos = false, add_eos = false, add_space_prefix = true;
    std::vector<int32_t> eog;   ///< end-of-generation ids: eos, eot, eom and known end markers
    std::string chat_template;  ///< tokenizer.chat_template, "" when absent

    int32_t size() const { return static_cast<int32_t>(tokens.size()); }
    /// Id of the token whose stored text is exactly `text`, or kNoToken.
    int32_t find(std::string_view text) const;
    /// True for control, unknown and unused tokens: they carry no text of their own.
    bool is_special(int32_t id) const;
    bool is_eog(int32_t id) const;

    /// Reads the tokenizer keys of `f`. Throws VocabError when the token list is
    /// missing, arrays disagree in length, a special id is out of range, or the
    /// tokenizer model is not one of "llama", "gpt2", "bert".
    static Vocab from_gguf(const GgufFile& f);
};

}  // namespace loom::model
