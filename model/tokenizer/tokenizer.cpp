// Shared tokenizer logic: special-token partitioning, BOS/EOS, byte table.
#include "model/tokenizer/tokenizer.hpp"

#include <algorithm>

namespace loom::model {

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab v);  // tokenizer_spm.cpp
std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab v);  // tokenizer_bpe.cpp
std::unique_ptr<Tokenizer> make_wpm_tokenizer(Vocab v);  // tokenizer_wpm.cpp

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)) {
    for (int32_t id = 0; id < vocab_.size(); ++id) {
        const TokenType t = vocab_.types[static_cast<size_t>(id)];
        if ((t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) &&
            !vocab_.tokens[static_cast<size_t>(id)].empty())
            special_by_length_.push_back(id);
    }
    std::stable_sort(special_by_length_.begin(), special_by_length_.end(), [&](int32_t a, int32_t b) {
        return vocab_.tokens[static_cast<size_t>(a)].size() > vocab_.tokens[static_cast<size_t>(b)].size();
    });
}

void Tokenizer::init_bytes() {
    bytes_.resize(static_cast<size_t>(vocab_.size()));
    for (int32_t id = 0; id < vocab_.size(); ++id)
        if (!vocab_.is_special(id)) bytes_[static_cast<size_t>(id)] = piece_bytes(id);
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& f) { return from_vocab(Vocab::from_gguf(f)); }

std::unique_ptr<Tokenizer> Tokenizer::from_vocab(Vocab v) {
    switch (v.kind) {
        case VocabKind::Spm: return make_spm_tokenizer(std::move(v));
        case VocabKind::Bpe: return make_bpe_tokenizer(std::move(v));
        case VocabKind::Wpm: return make_wpm_tokenizer(std::move(v));
    }
    throw VocabError("unknown vocabulary kind");
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    static const std::string empty;
    if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return empty;
    return bytes_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
    // Split the text at whole special tokens, longest first (llama.cpp's
    // tokenizer_st_partition). Fragment: either raw text or a token id.
    struct Fragment {
        int32_t token;  // kNoToken for raw text
        std::string_view text;
    };
    std::vector<Fragment> frags{{kNoToken, text}};
    if (!text.empty()) {
        for (int32_t id : special_by_length_) {
            const TokenType t = vocab_.types[static_cast<size_t>(id)];
            if (!parse_special && t != TokenType::UserDefined) continue;
            const std::string& st = vocab_.tokens[static_cast<size_t>(id)];
            std::vector<Fragment> next;
            next.reserve(frags.size());
            for (const Fragment& fr : frags) {
                if (fr.token != kNoToken || fr.text.size() < st.size()) {
                    next.push_back(fr);
                    continue;
                }
                std::string_view rest = fr.text;
                for (size_t at; (at = rest.find(st)) != std::string_view::npos;) {
                    if (at > 0) next.push_back({kNoToken, rest.substr(0, at)});
                    next.push_back({id, {}});
                    rest.remove_prefix(at + st.size());
                }
                if (!rest.empty()) next.push_back({kNoToken, rest});
            }
            frags.swap(next);
        }
    }

    std::vector<int32_t> out;
    if (add_special && vocab_.add_bos && vocab_.bos != kNoToken) out.push_back(vocab_.bos);
    bool after_special = true;
    for (const Fragment& fr : frags) {
        if (fr.token != kNoToken) {
            out.push_back(fr.token);
            after_special = true;
        } else if (!fr.text.empty()) {
            encode_fragment(fr.text, after_special, out);
            after_special = false;
        }
    }
    if (add_special && vocab_.add_eos && vocab_.eos != kNoToken) out.push_back(vocab_.eos);
    return out;
}

}  // namespace loom::model
