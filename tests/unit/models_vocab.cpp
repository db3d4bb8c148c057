// Vocabulary defaults that depend on the model family (model/gguf/vocab.cpp).
#include <catch2/catch.hpp>

#include <optional>

#include "model/gguf/gguf.hpp"
#include "model/gguf/gguf_writer.hpp"
#include "model/gguf/vocab.hpp"

namespace {

// A minimal byte-level BPE vocabulary GGUF with pre-tokenizer `pre` and, when given,
// an add_bos_token key; returns its parsed vocabulary.
loom::model::Vocab bpe_vocab(const std::string& pre, std::optional<bool> add_bos) {
    loom::model::GgufWriter w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", pre);
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "<|begin_of_text|>"});
    w.add_string_array("tokenizer.ggml.merges", {"a b"});
    w.add_u32("tokenizer.ggml.bos_token_id", 3);
    if (add_bos) w.add_bool("tokenizer.ggml.add_bos_token", *add_bos);
    const auto bytes = w.to_bytes();
    return loom::model::Vocab::from_gguf(loom::model::GgufFile::from_memory(bytes.data(), bytes.size()));
}

}  // namespace

TEST_CASE("Llama 3 BPE vocabularies add BOS when the GGUF does not say (as llama.cpp)") {
    for (const char* pre : {"llama3", "llama-v3", "llama-bpe", "falcon3"}) {
        INFO(pre);
        CHECK(bpe_vocab(pre, std::nullopt).add_bos);
        CHECK_FALSE(bpe_vocab(pre, false).add_bos);  // the key wins
    }
    for (const char* pre : {"gpt-2", "qwen2", "default", ""}) {
        INFO(pre);
        CHECK_FALSE(bpe_vocab(pre, std::nullopt).add_bos);
        CHECK(bpe_vocab(pre, true).add_bos);
    }
}
