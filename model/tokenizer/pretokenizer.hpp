// Regex pre-tokenizers that split text into words before byte-level BPE merges.
//
// Follows llama.cpp's unicode_regex_split (src/unicode.cpp at c392e509) and the
// per-model regex lists of llm_tokenizer_bpe (src/llama-vocab.cpp), which produced the
// test vectors in shared/models/vocab. The regexes run on PCRE2 in UTF + UCP mode.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom::model {

/// `text` as valid UTF-8, reading it the way llama.cpp's unicode_cpts_from_utf8 does:
/// every byte sequence that is not a well-formed UTF-8 character (stray or truncated
/// bytes, overlong forms, surrogates, values above U+10FFFF) becomes one U+FFFD.
/// Never throws except std::bad_alloc.
std::string valid_utf8(std::string_view text);

/// Splits text into words with an ordered list of regexes.
///
/// Semantics (as llama.cpp's unicode_regex_split): the text starts as one fragment;
/// each regex in turn is searched within every fragment on its own (lookarounds and
/// `$` see only that fragment), and the fragment is replaced by its matches and the
/// unmatched runs between them, in order. Nothing is ever dropped, so the words always
/// concatenate back to the input.
///
/// Character handling reproduces llama.cpp: a byte sequence that is not valid UTF-8
/// (stray bytes, truncated sequences, overlong forms, surrogates, code points above
/// U+10FFFF) counts as one U+FFFD character for matching, and every non-ASCII
/// White_Space character counts as U+000B, so `\s` means White_Space while literal
/// ranges in a pattern never match non-ASCII spaces. The returned words still carry
/// the original bytes. Thread-safe: `split` may run concurrently on one instance.
class PreTokenizer {
public:
    /// Compiles `patterns` (PCRE2 syntax, in application order). `\s` and `\S` mean
    /// White_Space as above. Throws VocabError (model/gguf/vocab.hpp) naming the pattern
    /// when one does not compile.
    explicit PreTokenizer(const std::vector<std::string>& patterns);

    /// The pre-tokenizer that llama.cpp selects for `tokenizer.ggml.pre` = `name`:
    /// "gpt-2", "mpt", "falcon", "starcoder", "refact", "deepseek-coder",
    /// "deepseek-llm", "llama3" / "llama-bpe" / "llama-v3" / "falcon3", "qwen2",
    /// "smollm", "default" (also used for "") and a few aliases with the same regexes
    /// (e.g. "phi-2", "olmo", "stablelm2", "command-r", "dbrx").
    /// Throws VocabError for names it does not know, as llama.cpp refuses those models.
    static PreTokenizer for_name(std::string_view name);

    /// Splits `text` (any bytes). Returns non-empty views into `text` that cover it
    /// completely and in order; an empty text gives no words. Never throws except
    /// std::bad_alloc; a regex that fails at run time (PCRE2 match limits on
    /// pathological input) leaves the rest of that fragment as one word.
    std::vector<std::string_view> split(std::string_view text) const;

    /// The patterns as given to the constructor.
    const std::vector<std::string>& patterns() const { return patterns_; }

private:
    struct Regex;
    std::vector<std::string> patterns_;
    std::vector<std::shared_ptr<const Regex>> regexes_;
    std::shared_ptr<const Regex> space_;  // finds non-ASCII White_Space characters
};

}  // namespace loom::model
