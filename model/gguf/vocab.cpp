// Vocabulary loading from GGUF tokenizer keys; see vocab.hpp.
#include "model/gguf/vocab.hpp"

#include <algorithm>

namespace loom::model {
namespace {

int32_t special_id(const GgufFile& f, const char* key, int32_t n_tokens, int32_t fallback) {
    const GgufValue* v = f.find(key);
    if (!v) return fallback;
    auto n = v->as_int();
    if (!n) throw VocabError(std::string(key) + " is not an integer");
    // 0xFFFFFFFF (and -1) are written for "no such token".
    if (*n == 0xFFFFFFFFll || *n < 0) return kNoToken;
    if (*n >= n_tokens)
        throw VocabError(std::string(key) + " = " + std::to_string(*n) + " is outside the " + std::to_string(n_tokens) +
                         "-token vocabulary");
    return static_cast<int32_t>(*n);
}

bool flag(const GgufFile& f, const char* key, bool fallback) {
    const GgufValue* v = f.find(key);
    if (!v || v->type != GgufType::BOOL) return fallback;
    return v->u != 0;
}

// Control tokens that end a turn in common chat formats, in addition to the ids the
// GGUF names (llama.cpp treats the same texts as end-of-generation).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",    "<end_of_turn>",         "<|endoftext|>",   "<EOT>",
    "<|return|>", "<|call|>",   "<|eom_id|>", "<｜end▁of▁sentence｜>", "<|end_of_text|>",
};

}  // namespace

int32_t Vocab::find(std::string_view text) const {
    auto it = token_to_id.find(std::string(text));
    return it == token_to_id.end() ? kNoToken : it->second;
}

bool Vocab::is_special(int32_t id) const {
    if (id < 0 || id >= size()) return true;
    const TokenType t = types[static_cast<size_t>(id)];
    return t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused;
}

bool Vocab::is_eog(int32_t id) const { return std::find(eog.begin(), eog.end(), id) != eog.end(); }

Vocab Vocab::from_gguf(const GgufFile& f) {
    Vocab v;
    v.model = f.get_string("tokenizer.ggml.model");
    if (v.model == "llama") v.kind = VocabKind::Spm;
    else if (v.model == "gpt2") v.kind = VocabKind::Bpe;
    else if (v.model == "bert") v.kind = VocabKind::Wpm;
    else if (v.model.empty()) throw VocabError("the GGUF has no tokenizer.ggml.model key");
    else throw VocabError("unsupported tokenizer model '" + v.model + "' (supported: llama, gpt2, bert)");
    v.pre = f.get_string("tokenizer.ggml.pre");

    const GgufValue* toks = f.find("tokenizer.ggml.tokens");
    if (!toks || toks->type != GgufType::ARRAY || toks->elem_type != GgufType::STRING)
        throw VocabError("the GGUF has no tokenizer.ggml.tokens string array");
    if (toks->count == 0 || toks->count > (1u << 24))
        throw VocabError("tokenizer.ggml.tokens has " + std::to_string(toks->count) + " entries");
    const auto n = static_cast<int32_t>(toks->count);
    v.tokens.reserve(static_cast<size_t>(n));
    for (std::string_view s : toks->strings) v.tokens.emplace_back(s);

    if (const GgufValue* sc = f.find("tokenizer.ggml.scores")) {
        auto nums = sc->numbers();
        if (nums.size() != static_cast<size_t>(n))
            throw VocabError("tokenizer.ggml.scores has " + std::to_string(nums.size()) + " entries for " +
                             std::to_string(n) + " tokens");
        v.scores.assign(nums.begin(), nums.end());
    }
    v.types.assign(static_cast<size_t>(n), TokenType::Normal);
    if (const GgufValue* ty = f.find("tokenizer.ggml.token_type")) {
        auto nums = ty->numbers();
        if (nums.size() != static_cast<size_t>(n))
            throw VocabError("tokenizer.ggml.token_type has " + std::to_string(nums.size()) + " entries for " +
                             std::to_string(n) + " tokens");
        for (size_t k = 0; k < nums.size(); ++k) {
            const int t = static_cast<int>(nums[k]);
            v.types[k] = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::Normal;
        }
    }
    if (const GgufValue* m = f.find("tokenizer.ggml.merges")) {
        if (m->type == GgufType::ARRAY && m->elem_type == GgufType::STRING)
            for (std::string_view s : m->strings) v.merges.emplace_back(s);
    }
    v.token_to_id.reserve(static_cast<size_t>(n));
    for (int32_t id = 0; id < n; ++id) v.token_to_id.emplace(v.tokens[static_cast<size_t>(id)], id);

    const bool spm = v.kind == VocabKind::Spm;
    v.bos = special_id(f, "tokenizer.ggml.bos_token_id", n, spm ? 1 : kNoToken);
    v.eos = special_id(f, "tokenizer.ggml.eos_token_id", n, spm ? 2 : kNoToken);
    v.unk = special_id(f, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : kNoToken);
    v.eot = special_id(f, "tokenizer.ggml.eot_token_id", n, kNoToken);
    v.eom = special_id(f, "tokenizer.ggml.eom_token_id", n, kNoToken);
    v.pad = special_id(f, "tokenizer.ggml.padding_token_id", n, kNoToken);
    v.sep = special_id(f, "tokenizer.ggml.seperator_token_id", n, kNoToken);
    // Without an add_bos_token key, SentencePiece vocabularies add BOS, and so do BPE
    // ones with Llama 3's pre-tokenizer (llama.cpp's LLAMA_VOCAB_PRE_TYPE_LLAMA3
    // branch: pre = llama3, llama-v3, llama-bpe or falcon3).
    const bool llama3_pre = v.kind == VocabKind::Bpe &&
                            (v.pre == "llama3" || v.pre == "llama-v3" || v.pre == "llama-bpe" || v.pre == "falcon3");
    v.add_bos = flag(f, "tokenizer.ggml.add_bos_token", spm || llama3_pre);
    v.add_eos = flag(f, "tokenizer.ggml.add_eos_token", false);
    v.add_space_prefix = flag(f, "tokenizer.ggml.add_space_prefix", spm);
    v.chat_template = f.get_string("tokenizer.chat_template");

    for (int32_t id : {v.eos, v.eot, v.eom})
        if (id != kNoToken && !v.is_eog(id)) v.eog.push_back(id);
    for (std::string_view t : kEogTexts) {
        int32_t id = v.find(t);
        if (id != kNoToken && v.types[static_cast<size_t>(id)] == TokenType::Control && !v.is_eog(id))
            v.eog.push_back(id);
    }
    return v;
}

}  // namespace loom::model
