// SentencePiece-style tokenizer for "llama" GGUF vocabularies.
//
// Follows llama.cpp's llm_tokenizer_spm (src/llama-vocab.cpp): the text is split into
// UTF-8 characters, adjacent pairs are merged greedily by the score of the merged
// token (ties: leftmost first), and characters that are not tokens are emitted as
// byte tokens `<0xNN>`, or as the unknown token when the vocabulary has no byte tokens.
#include <queue>

#include "model/tokenizer/bigram_merge.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/utf8.hpp"

namespace loom::model {
namespace {

size_t utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;  // stray continuation or invalid lead byte: one byte on its own
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

class SpmTokenizer final : public Tokenizer {
public:
    explicit SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {
        for (int b = 0; b < 256; ++b) {
            static const char* hex = "0123456789ABCDEF";
            const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
            int32_t id = vocab_.find(name);
            if (id == kNoToken) id = vocab_.find(std::string(1, static_cast<char>(b)));
            byte_token_[b] = id;
        }
        init_bytes();
    }

protected:
    std::string piece_bytes(int32_t id) const override {
        const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
        if (vocab_.types[static_cast<size_t>(id)] == TokenType::Byte && t.size() == 6 && t.compare(0, 3, "<0x") == 0 &&
            t[5] == '>') {
            int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
            if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
        }
        return spaces_from_markers(t);
    }

    void encode_fragment(std::string_view raw, bool after_special, std::vector<int32_t>& out) const override {
        std::string text;
        if (vocab_.add_space_prefix && after_special) text = kSpaceMarker;
        for (char c : raw) {
            if (c == ' ') text += kSpaceMarker;
            else text += c;
        }
        Session(*this, text).run(out);
    }

private:
    struct Symbol {
        int prev, next;
        const char* text;
        size_t n;
    };
    struct Bigram {
        int left, right;
        float score;
        size_t size;
        bool operator<(const Bigram& o) const {  // max-heap: highest score, then leftmost
            return score < o.score || (score == o.score && left > o.left);
        }
    };

    class Session {
    public:
        Session(const SpmTokenizer& tok, const std::string& text) : tok_(tok), text_(text) {}

        void run(std::vector<int32_t>& out) {
            for (size_t offs = 0; offs < text_.size();) {
                size_t n = std::min(utf8_len(static_cast<unsigned char>(text_[offs])), text_.size() - offs);
                const int idx = static_cast<int>(symbols_.size());
                symbols_.push_back({idx - 1, offs + n == text_.size() ? -1 : idx + 1, text_.data() + offs, n});
                offs += n;
            }
            for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add(i - 1, i);
            merge_bigrams(
                symbols_, queue_, [](const Bigram& b, const Symbol& l, const Symbol& r) { return l.n + r.n != b.size; },
                [this](int left, int right) { try_add(left, right); });
            for (int i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[static_cast<size_t>(i)].next)
                resegment(symbols_[static_cast<size_t>(i)], out);
        }

    private:
        void try_add(int left, int right) {
            if (left < 0 || right < 0) return;
            const Symbol& l = symbols_[static_cast<size_t>(left)];
            const Symbol& r = symbols_[static_cast<size_t>(right)];
            std::string s(l.text, l.n + r.n);
            const int32_t id = tok_.vocab_.find(s);
            if (id == kNoToken) return;
            const auto& sc = tok_.vocab_.scores;
            queue_.push({left, right, sc.empty() ? 0.0f : sc[static_cast<size_t>(id)], s.size()});
        }

        void resegment(const Symbol& sym, std::vector<int32_t>& out) {
            std::string s(sym.text, sym.n);
            const int32_t id = tok_.vocab_.find(s);
            if (id != kNoToken) {
                out.push_back(id);
                return;
            }
            // Every merge forms a vocabulary token, so only single characters the
            // vocabulary lacks get here: emit their bytes as byte tokens.
            for (size_t j = 0; j < sym.n; ++j) {
                int32_t b = tok_.byte_token_[static_cast<unsigned char>(sym.text[j])];
                if (b == kNoToken) {
                    // No byte tokens: the whole character becomes the unknown token.
                    if (tok_.vocab_.unk != kNoToken) out.push_back(tok_.vocab_.unk);
                    return;
                }
                out.push_back(b);
            }
        }

        const SpmTokenizer& tok_;
        const std::string& text_;
        std::vector<Symbol> symbols_;
        std::priority_queue<Bigram> queue_;
    };

    int32_t byte_token_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab v) { return std::make_unique<SpmTokenizer>(std::move(v)); }

}  // namespace loom::model
