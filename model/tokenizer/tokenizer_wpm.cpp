// WordPiece tokenizer for "bert" GGUF vocabularies.
//
// Follows llama.cpp's llm_tokenizer_wpm_session (src/llama-vocab.cpp at c392e509),
// itself BERT's BasicTokenizer + WordpieceTokenizer: the text is lower-cased and split
// at White_Space; control characters, NUL and U+FFFD are dropped; punctuation, ASCII
// symbols and CJK ideographs become one-character words. Each word, prefixed with
// U+2581 (the GGUF converter spells word-initial pieces "▁foo" and continuation pieces
// "foo" where BERT has "##foo"), is cut greedily into the longest vocabulary pieces;
// a word that cannot be cut completely becomes the unknown token.
//
// Before that, as llama.cpp does (unicode_cpts_normalize_nfd), every code point is
// replaced by the first code point of its canonical (NFD) decomposition, which strips
// the accents of precomposed letters ("ü" -> "u", "ệ" -> "e") and maps Hangul
// syllables to their leading jamo. This differs from BERT's strip_accents (NFD, then
// drop every nonspacing mark) only for marks that arrive already decomposed or that
// are not accents (e.g. Thai vowel signs): llama.cpp, and so this tokenizer, keep them.
//
// Character classes come from PCRE2's Unicode tables, decompositions from ICU
// (Normalizer2, NFD data), lower-casing from the C library's C.UTF-8 locale.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <locale.h>
#include <unordered_map>
#include <wctype.h>

#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/utf8.hpp"

namespace loom::model {
namespace {

// One character per match: group 1 White_Space (ASCII ones by hand, as PCRE2's UCP \s
// would add U+180E), group 2 characters BERT drops, group 3 characters that stand alone.
constexpr const char* kClasses =
    R"(([\t-\r\x20\x{85}\p{Z}])|([\x{0}\x{FFFD}\p{Cc}\p{Cf}\p{Co}\p{Cs}]))"
    R"(|(\p{P}|(?=\p{S})[\x00-\x7E])"
    R"(|[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F})"
    R"(\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]))";
// The CJK blocks are BERT's _is_chinese_char list, including the 0x2B920 start that
// HF's Rust implementation (and so llama.cpp) uses for Extension E.

struct CodeDeleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
    void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

/// Unicode simple lower-casing through the C.UTF-8 locale; ASCII only without it.
class LowerCase {
public:
    LowerCase() {
        for (const char* name : {"C.UTF-8", "C.utf8", "en_US.UTF-8"})
            if ((loc_ = newlocale(LC_CTYPE_MASK, name, static_cast<locale_t>(nullptr)))) break;
    }
    ~LowerCase() {
        if (loc_) freelocale(loc_);
    }
    LowerCase(const LowerCase&) = delete;
    LowerCase& operator=(const LowerCase&) = delete;

    uint32_t operator()(uint32_t cp) const {
        if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        if (!loc_) return cp;
        const auto lower = static_cast<uint32_t>(towlower_l(static_cast<wint_t>(cp), loc_));
        return lower <= 0x10FFFF ? lower : cp;
    }

private:
    locale_t loc_ = static_cast<locale_t>(nullptr);
};

const LowerCase& lower_case() {
    static const LowerCase lc;
    return lc;
}

/// `valid` (well-formed UTF-8) with each code point replaced by the first code point
/// of its canonical decomposition (see the file comment). Unchanged when ICU's NFD
/// data cannot be loaded.
std::string fold_to_nfd_base(std::string_view valid) {
    static const icu::Normalizer2* nfd = [] {
        UErrorCode status = U_ZERO_ERROR;
        const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(status);
        return U_SUCCESS(status) ? n : nullptr;
    }();
    std::string out;
    out.reserve(valid.size());
    for (size_t k = 0; k < valid.size();) {
        const auto b = static_cast<unsigned char>(valid[k]);
        const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (n == 1 || !nfd) {  // nothing below U+00C0 decomposes canonically
            out.append(valid.substr(k, n));
            k += n;
            continue;
        }
        uint32_t cp = n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
        for (size_t j = 1; j < n && k + j < valid.size(); ++j)
            cp = (cp << 6) | (static_cast<unsigned char>(valid[k + j]) & 0x3Fu);
        icu::UnicodeString d;
        if (cp >= 0xC0 && nfd->getDecomposition(static_cast<UChar32>(cp), d) && d.length() > 0)
            cp = static_cast<uint32_t>(d.char32At(0));
        append_utf8(out, cp);
        k += n;
    }
    return out;
}

/// Appends `valid` (well-formed UTF-8) to `out`, lower-cased.
void append_lower(std::string& out, std::string_view valid) {
    for (size_t k = 0; k < valid.size();) {
        const auto b = static_cast<unsigned char>(valid[k]);
        const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
        for (size_t j = 1; j < n && k + j < valid.size(); ++j)
            cp = (cp << 6) | (static_cast<unsigned char>(valid[k + j]) & 0x3Fu);
        append_utf8(out, lower_case()(cp));
        k += n;
    }
}

/// WordPiece over a "bert" vocabulary; see the file comment. Decoding is lossy: pieces
/// decode lower-cased, word-initial pieces with a leading space, [UNK] as nothing.
class WpmTokenizer final : public Tokenizer {
public:
    explicit WpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {
        // BERT inputs are "[CLS] text [SEP]" (llama.cpp adds cls/sep for add_special);
        // the GGUF carries them as cls/sep ids, which Vocab does not read, so look the
        // standard texts up and expose them as BOS/EOS.
        if (vocab_.bos == kNoToken) vocab_.bos = vocab_.find("[CLS]");
        if (vocab_.eos == kNoToken) vocab_.eos = vocab_.sep != kNoToken ? vocab_.sep : vocab_.find("[SEP]");
        vocab_.add_bos = vocab_.bos != kNoToken;
        vocab_.add_eos = vocab_.eos != kNoToken;
        if (vocab_.unk == kNoToken) vocab_.unk = vocab_.find("[UNK]");

        ids_.reserve(vocab_.tokens.size());
        for (int32_t id = 0; id < vocab_.size(); ++id) {
            const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
            ids_.emplace(std::string_view(t), id);  // views into vocab_, which never changes
            max_len_ = std::max(max_len_, t.size());
        }
        int err = 0;
        PCRE2_SIZE at = 0;
        classes_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kClasses), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr));
        if (!classes_) throw VocabError("WordPiece character classes do not compile");
        pcre2_jit_compile(classes_.get(), PCRE2_JIT_COMPLETE);
        init_bytes();
    }

protected:
    std::string piece_bytes(int32_t id) const override {
        // "▁" marks a word start: it decodes as a space (llama.cpp's token_to_piece).
        const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
        return spaces_from_markers(t);
    }

    void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
        for (const std::string& word : words(text)) encode_word(word, out);
    }

private:
    /// BERT's basic tokenization of `raw` into lower-cased words.
    std::vector<std::string> words(std::string_view raw) const {
        const std::string text = fold_to_nfd_base(valid_utf8(raw));
        std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
            pcre2_match_data_create_from_pattern(classes_.get(), nullptr));
        if (!md) throw std::bad_alloc();
        std::vector<std::string> words(1);
        auto finish = [&] {
            if (!words.back().empty()) words.emplace_back();
        };
        const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t at = 0;
        while (at < text.size()) {
            int rc = pcre2_match(classes_.get(), subject, text.size(), at, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(classes_.get(), subject, text.size(), at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(),
                                 nullptr);
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
            if (rc < 0 || ov[1] <= ov[0]) break;  // no more special characters
            append_lower(words.back(), std::string_view(text).substr(at, ov[0] - at));
            if (rc >= 2 && ov[2] != PCRE2_UNSET) {
                finish();  // White_Space ends a word
            } else if (rc >= 4 && ov[6] != PCRE2_UNSET) {
                finish();  // a word of its own
                append_lower(words.back(), std::string_view(text).substr(ov[0], ov[1] - ov[0]));
                words.emplace_back();
            }  // else: dropped character
            at = ov[1];
        }
        if (at < text.size()) append_lower(words.back(), std::string_view(text).substr(at));
        if (words.back().empty()) words.pop_back();
        return words;
    }

    /// Greedy longest-match-first cut of one word into vocabulary pieces.
    void encode_word(const std::string& word, std::vector<int32_t>& out) const {
        const std::string w = std::string(kSpaceMarker) + word;
        const size_t start = out.size();
        for (size_t i = 0; i < w.size();) {
            size_t j = std::min(w.size(), i + max_len_);
            int32_t id = kNoToken;
            for (; j > i; --j) {
                auto it = ids_.find(std::string_view(w).substr(i, j - i));
                if (it != ids_.end()) {
                    id = it->second;
                    break;
                }
            }
            if (id == kNoToken) {  // no piece fits here: the whole word is unknown
                out.resize(start);
                break;
            }
            out.push_back(id);
            i = j;
        }
        if (out.size() == start && vocab_.unk != kNoToken) out.push_back(vocab_.unk);
    }

    std::unordered_map<std::string_view, int32_t> ids_;
    size_t max_len_ = 0;
    std::unique_ptr<pcre2_code, CodeDeleter> classes_;
};

}  // namespace

/// Builds the WordPiece tokenizer for a "bert" vocabulary. Adding special tokens puts
/// [CLS] before and [SEP] after the text. Throws VocabError if its character-class
/// regex cannot be compiled (a broken PCRE2 build).
std::unique_ptr<Tokenizer> make_wpm_tokenizer(Vocab v) { return std::make_unique<WpmTokenizer>(std::move(v)); }

}  // namespace loom::model
