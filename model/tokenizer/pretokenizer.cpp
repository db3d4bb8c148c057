// Regex pre-tokenizers on PCRE2 (UTF + UCP): word splitting for byte-level BPE.
//
// Follows llama.cpp's unicode_regex_split (src/unicode.cpp at c392e509) and the regex
// lists of llm_tokenizer_bpe (src/llama-vocab.cpp), written here as PCRE2 patterns.
// llama.cpp runs most lists on std::regex over a "collapsed" text (one byte per code
// point, category placeholders for non-ASCII characters) and the gpt-2 / llama3 regexes
// on hand-written matchers; PCRE2 with Unicode properties gives the same splits, given
// the two character substitutions described in pretokenizer.hpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tokenizer/pretokenizer.hpp"

#include <algorithm>
#include <cstdint>

#include "model/tokenizer/utf8.hpp"
#include "model/gguf/vocab.hpp"

namespace loom::model {

struct PreTokenizer::Regex {
    explicit Regex(pcre2_code* c) : code(c) {}
    ~Regex() { pcre2_code_free(code); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
    pcre2_code* code;
};

namespace {

// ---- patterns --------------------------------------------------------------------

// GPT-2's regex; llama.cpp's copy drops the final `|\s+`, which changes nothing because
// a lone space left over by `\s+(?!\S)` becomes a word of its own anyway.
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama 3 (tiktoken cl100k style); llama.cpp spells the case-insensitive contractions
// out as classes. Qwen2 is the same with single digits.
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// CJK ideographs, U+0800..U+4E00 and Hangul, as in DeepSeek's tokenizer.json.
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// DeepSeek-LLM's explicit list of cased letters (its tokenizer.json spells them out
// rather than using \p{L}), and its ASCII / full-width punctuation class.
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";

struct NamedList {
    std::vector<std::string_view> names;
    std::vector<std::string> patterns;
};

const std::vector<NamedList>& named_lists() {
    static const std::vector<NamedList> lists = {
        {{"gpt-2", "phi-2", "roberta-bpe", "mpt", "olmo", "jais"}, {kGpt2}},
        // Digits one by one, then GPT-2's regex.
        {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"}, {R"(\p{N})", kGpt2}},
        // Runs of punctuation and ASCII symbols first; numbers end up in groups of three.
        {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
        {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
        // "\s+$" written as "(?<!\s)\s+$": the same match (the whitespace run that ends
        // the fragment), but tried once per run instead of at every space, which keeps
        // PCRE2's interpreter linear on long runs of spaces.
        {{"deepseek-llm"},
         {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"((?<!\s)\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe"}, {kLlama3}},
        {{"qwen2", "deepseek-r1-qwen", "stablelm2"}, {kQwen2}},
        // llama.cpp's fallback for BPE vocabularies that name no pre-tokenizer.
        {{"default", ""}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
    };
    return lists;
}

// ---- PCRE2 helpers ---------------------------------------------------------------

// The subject has every non-ASCII White_Space character replaced by U+000B (see
// make_subject), so `\s` only has to cover ASCII. PCRE2's UCP `\s` would also take
// U+180E, which is not White_Space, hence the explicit classes.
std::string ascii_space_classes(std::string_view p) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char n = p[++i];
            if (n == 's') out += in_class ? R"(\t-\r\x20)" : R"([\t-\r\x20])";
            else if (n == 'S' && !in_class) out += R"([^\t-\r\x20])";
            else {
                out += c;
                out += n;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // literal ']' first
            continue;
        }
        if (c == ']') in_class = false;
        out += c;
    }
    return out;
}

/// Compiles `pattern` in UTF + UCP mode (and JIT when available). Throws VocabError.
pcre2_code* compile(const std::string& pattern, bool translate_spaces) {
    const std::string p = translate_spaces ? ascii_space_classes(pattern) : pattern;
    int err = 0;
    PCRE2_SIZE at = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &at, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        throw VocabError("pre-tokenizer regex '" + pattern + "' does not compile at offset " + std::to_string(at) +
                         ": " + reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    return code;
}

struct MatchDataDeleter {
    void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

/// Finds the next match in subject[0, len) at or after `start`. Returns false when there
/// is none or matching failed (e.g. PCRE2's match limit on pathological input).
bool find_next(const pcre2_code* code, const char* subject, size_t len, size_t start, pcre2_match_data* md,
               size_t& begin, size_t& end) {
    auto s = reinterpret_cast<PCRE2_SPTR>(subject);
    int rc = pcre2_match(code, s, len, start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(code, s, len, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc < 0) return false;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    begin = ov[0];
    end = ov[1];
    return begin <= end && end <= len;
}

// ---- the text as PCRE2 sees it -------------------------------------------------

/// Valid UTF-8 with exactly one code point per "unit" of the input. A unit is what
/// llama.cpp's decoder reads as one character: a well-formed sequence by its lead
/// byte, or a single byte that starts none.
struct Subject {
    std::string text;
    std::vector<size_t> orig;  // unit -> byte offset in the input (one extra at the end)
    std::vector<size_t> subj;  // unit -> byte offset in `text` (one extra at the end)

    size_t unit_at(size_t offset) const {
        return static_cast<size_t>(std::lower_bound(subj.begin(), subj.end(), offset) - subj.begin());
    }
};

/// Reads one character of `in` at `i` as llama.cpp's decoder does: a sequence that its
/// lead byte announces and whose continuation bytes are present, or else one byte.
/// Returns the code point, U+FFFD for anything that is not a Unicode scalar value.
uint32_t next_char(std::string_view in, size_t i, size_t& n) {
    const auto b = static_cast<unsigned char>(in[i]);
    n = 1;
    if (b < 0x80) return b;
    const size_t len = !(b & 0x40) ? 0 : !(b & 0x20) ? 2 : !(b & 0x10) ? 3 : !(b & 0x08) ? 4 : 0;
    if (len == 0 || i + len > in.size()) return 0xFFFD;
    uint32_t v = len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t k = 1; k < len; ++k) {
        const auto c = static_cast<unsigned char>(in[i + k]);
        if ((c & 0xC0) != 0x80) return 0xFFFD;
        v = (v << 6) | (c & 0x3Fu);
    }
    n = len;
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    const bool scalar = v >= kMin[len] && v <= 0x10FFFF && (v < 0xD800 || v > 0xDFFF);
    return scalar ? v : 0xFFFD;
}

Subject make_subject(std::string_view in, const pcre2_code* space) {
    Subject s;
    s.text.reserve(in.size());
    s.orig.reserve(in.size() + 1);
    s.subj.reserve(in.size() + 1);
    for (size_t i = 0, n = 0; i < in.size(); i += n) {
        const uint32_t cp = next_char(in, i, n);
        s.orig.push_back(i);
        s.subj.push_back(s.text.size());
        append_utf8(s.text, cp);
    }
    s.orig.push_back(in.size());
    s.subj.push_back(s.text.size());

    // Non-ASCII White_Space -> U+000B, as llama.cpp does before running its regexes.
    MatchData md(pcre2_match_data_create_from_pattern(space, nullptr));
    if (!md) throw std::bad_alloc();
    std::vector<size_t> spaces;  // units
    size_t b = 0, e = 0;
    for (size_t at = 0;
         at < s.text.size() && find_next(space, s.text.data(), s.text.size(), at, md.get(), b, e) && e > b; at = e)
        spaces.push_back(s.unit_at(b));
    if (spaces.empty()) return s;
    std::string text;
    text.reserve(s.text.size());
    size_t next = 0;
    for (size_t u = 0; u + 1 < s.subj.size(); ++u) {
        const size_t from = s.subj[u], to = s.subj[u + 1];
        s.subj[u] = text.size();
        if (next < spaces.size() && spaces[next] == u) {
            text += '\x0B';
            ++next;
        } else {
            text.append(s.text, from, to - from);
        }
    }
    s.subj.back() = text.size();
    s.text = std::move(text);
    return s;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0, n = 0; i < text.size(); i += n) append_utf8(out, next_char(text, i, n));
    return out;
}

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) : patterns_(patterns) {
    for (const std::string& p : patterns_) regexes_.push_back(std::make_shared<const Regex>(compile(p, true)));
    space_ = std::make_shared<const Regex>(compile(R"((?![\x00-\x7F])[\x{85}\p{Z}])", false));
}

PreTokenizer PreTokenizer::for_name(std::string_view name) {
    for (const NamedList& l : named_lists())
        if (std::find(l.names.begin(), l.names.end(), name) != l.names.end()) return PreTokenizer(l.patterns);
    throw VocabError("unknown pre-tokenizer '" + std::string(name) + "' (tokenizer.ggml.pre)");
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
    if (text.empty()) return {};
    const Subject s = make_subject(text, space_->code);
    struct Range {
        size_t first, last;  // units [first, last)
    };
    std::vector<Range> frags{{0, s.orig.size() - 1}}, next;
    for (const auto& re : regexes_) {
        MatchData md(pcre2_match_data_create_from_pattern(re->code, nullptr));
        if (!md) throw std::bad_alloc();
        next.clear();
        next.reserve(frags.size() * 2);
        for (const Range& f : frags) {
            const size_t base = s.subj[f.first];
            const char* subject = s.text.data() + base;
            const size_t len = s.subj[f.last] - base;
            size_t done = f.first;  // first unit not yet emitted
            size_t at = 0, b = 0, e = 0;
            while (at < len && find_next(re->code, subject, len, at, md.get(), b, e)) {
                if (e == b) {  // empty match: try again one character further on
                    if (b >= len) break;
                    at = s.subj[s.unit_at(base + b) + 1] - base;
                    continue;
                }
                const size_t ub = s.unit_at(base + b), ue = s.unit_at(base + e);
                if (ub > done) next.push_back({done, ub});
                next.push_back({ub, ue});
                done = ue;
                at = e;
            }
            if (done < f.last) next.push_back({done, f.last});
        }
        frags.swap(next);
    }
    std::vector<std::string_view> words;
    words.reserve(frags.size());
    for (const Range& f : frags) words.push_back(text.substr(s.orig[f.first], s.orig[f.last] - s.orig[f.first]));
    return words;
}

}  // namespace loom::model
