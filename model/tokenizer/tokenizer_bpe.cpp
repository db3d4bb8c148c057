// Byte-level BPE tokenizer for "gpt2" GGUF vocabularies.
//
// Follows llama.cpp's llm_tokenizer_bpe_session (src/llama-vocab.cpp at c392e509):
// the text is split into words by the model's pre-tokenizer (pretokenizer.hpp), each
// word's bytes are spelled with GPT-2's byte-to-character table (bytes_to_unicode in
// OpenAI's gpt-2 encoder.py), and adjacent symbols are merged by the rank of the pair
// in `tokenizer.ggml.merges` (lowest rank first, ties leftmost first) until no ranked
// pair is left. Differences from llama.cpp, for robustness only: bytes that are not
// valid UTF-8 are encoded as they are (llama.cpp first replaces them with U+FFFD), and
// a symbol the vocabulary lacks falls back to its byte tokens or, failing those, to
// the unknown token (llama.cpp drops it silently).
#include <array>
#include <queue>
#include <unordered_map>

#include "model/tokenizer/bigram_merge.hpp"
#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::model {
namespace {

/// GPT-2's reversible byte <-> printable character table: bytes that are printable
/// Latin-1 stand for themselves, the other 68 map to U+0100.. in byte order.
class ByteChars {
public:
    ByteChars() {
        rev_.fill(-1);
        uint32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
            rev_[cp] = static_cast<int16_t>(b);
            std::string& s = chars_[static_cast<size_t>(b)];
            if (cp < 0x80) {
                s = std::string(1, static_cast<char>(cp));
            } else {
                s += static_cast<char>(0xC0 | (cp >> 6));
                s += static_cast<char>(0x80 | (cp & 0x3F));
            }
        }
    }
    /// UTF-8 of the character that stands for byte `b`.
    const std::string& of(unsigned char b) const { return chars_[b]; }
    /// The byte that code point `cp` stands for, or -1.
    int byte_of(uint32_t cp) const { return cp < rev_.size() ? rev_[cp] : -1; }

private:
    std::array<std::string, 256> chars_;
    std::array<int16_t, 0x144> rev_;
};

const ByteChars& byte_chars() {
    static const ByteChars table;
    return table;
}

bool ignores_merges(const std::string& pre) {
    // llama.cpp sets ignore_merges for the Llama 3 family: a word that is already a
    // token is taken whole.
    return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3";
}

/// Byte-level BPE over a "gpt2" vocabulary; see the file comment. Throws VocabError
/// from the constructor for an unknown `tokenizer.ggml.pre`.
class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(Vocab v)
        : Tokenizer(std::move(v)),
          pre_(PreTokenizer::for_name(vocab_.pre)),
          ignore_merges_(ignores_merges(vocab_.pre)) {
        ranks_.reserve(vocab_.merges.size());
        for (size_t i = 0; i < vocab_.merges.size(); ++i) {
            // "left right"; llama.cpp splits at the first space after the first byte.
            const std::string& m = vocab_.merges[i];
            if (m.size() >= 3 && m.find(' ', 1) != std::string::npos)
                ranks_.emplace(m, static_cast<int32_t>(i));  // the first of duplicates wins
        }
        for (int b = 0; b < 256; ++b)
            byte_token_[static_cast<size_t>(b)] = vocab_.find(byte_chars().of(static_cast<unsigned char>(b)));
        init_bytes();
    }

protected:
    std::string piece_bytes(int32_t id) const override {
        const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
        // User-defined tokens are matched as raw text, so they decode as raw text.
        if (vocab_.types[static_cast<size_t>(id)] == TokenType::UserDefined) return t;
        std::string out;
        for (size_t k = 0; k < t.size();) {
            const auto c = static_cast<unsigned char>(t[k]);
            if (c >= 0xC0 && c < 0xE0 && k + 1 < t.size() && (static_cast<unsigned char>(t[k + 1]) & 0xC0) == 0x80) {
                const uint32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(t[k + 1]) & 0x3Fu);
                const int b = byte_chars().byte_of(cp);
                if (b >= 0) out += static_cast<char>(b);
                else out.append(t, k, 2);  // not a byte character: keep its text
                k += 2;
                continue;
            }
            const int b = c < 0x80 ? byte_chars().byte_of(c) : -1;
            out += b >= 0 ? static_cast<char>(b) : static_cast<char>(c);
            ++k;
        }
        return out;
    }

    void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
        for (std::string_view word : pre_.split(text)) encode_word(word, out);
    }

private:
    struct Symbol {
        int prev, next;
        size_t first, n;  // bytes [first, first + n) of the word
    };
    struct Bigram {
        int32_t rank;
        int left, right;
        size_t n_left, n_right;                  // symbol sizes when queued, to spot stale entries
        bool operator<(const Bigram& o) const {  // max-heap: lowest rank, then leftmost
            return rank > o.rank || (rank == o.rank && left > o.left);
        }
    };

    void encode_word(std::string_view word, std::vector<int32_t>& out) const {
        const ByteChars& bc = byte_chars();
        std::string enc;                          // the word spelled in byte characters
        std::vector<size_t> at(word.size() + 1);  // byte k of the word -> offset in enc
        enc.reserve(word.size() * 2);
        for (size_t k = 0; k < word.size(); ++k) {
            at[k] = enc.size();
            enc += bc.of(static_cast<unsigned char>(word[k]));
        }
        at[word.size()] = enc.size();
        auto text = [&](size_t first, size_t n) {
            return std::string_view(enc).substr(at[first], at[first + n] - at[first]);
        };

        if (ignore_merges_) {
            const int32_t id = vocab_.find(enc);
            if (id != kNoToken) {
                out.push_back(id);
                return;
            }
        }

        std::vector<Symbol> sym(word.size());
        for (size_t k = 0; k < word.size(); ++k)
            sym[k] = {static_cast<int>(k) - 1, k + 1 == word.size() ? -1 : static_cast<int>(k) + 1, k, 1};
        std::priority_queue<Bigram> queue;
        std::string key;
        auto try_add = [&](int l, int r) {
            if (l < 0 || r < 0) return;
            const Symbol& a = sym[static_cast<size_t>(l)];
            const Symbol& b = sym[static_cast<size_t>(r)];
            key.assign(text(a.first, a.n));
            key += ' ';
            key.append(text(b.first, b.n));
            auto it = ranks_.find(key);
            if (it != ranks_.end()) queue.push({it->second, l, r, a.n, b.n});
        };
        for (size_t k = 1; k < sym.size(); ++k) try_add(static_cast<int>(k) - 1, static_cast<int>(k));
        merge_bigrams(
            sym, queue,
            [](const Bigram& g, const Symbol& a, const Symbol& b) { return a.n != g.n_left || b.n != g.n_right; },
            try_add);

        for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
            const Symbol& s = sym[static_cast<size_t>(i)];
            const int32_t id = vocab_.find(text(s.first, s.n));
            if (id != kNoToken) {
                out.push_back(id);
                continue;
            }
            // Not a token (merges that make no vocabulary entry, or an incomplete
            // vocabulary): one token per byte, <unk> for bytes without one.
            for (size_t k = s.first; k < s.first + s.n; ++k) {
                const int32_t b = byte_token_[static_cast<unsigned char>(word[k])];
                if (b != kNoToken) out.push_back(b);
                else if (vocab_.unk != kNoToken) out.push_back(vocab_.unk);
            }
        }
    }

    PreTokenizer pre_;
    bool ignore_merges_;
    std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> merge rank
    std::array<int32_t, 256> byte_token_{};           // token spelling each single byte
};

}  // namespace

/// Builds the byte-level BPE tokenizer for a "gpt2" vocabulary. Throws VocabError when
/// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp does not know either.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab v) { return std::make_unique<BpeTokenizer>(std::move(v)); }

}  // namespace loom::model
