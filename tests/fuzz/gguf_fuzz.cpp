// libFuzzer target for the GGUF reader and what reads a parsed file: hyperparameters,
// the vocabulary, the tokenizers and the CPU backend's tensor binding.
//
// Any input must either be refused with an exception of the documented kinds
// (model::GgufError, model::ModelError, model::VocabError, std::invalid_argument
// from the row decoders) or be read without a crash, a sanitizer report, a leak or
// an allocation past libFuzzer's -rss_limit_mb. Files that parse are tokenized with a
// fixed text and with the input's last 256 bytes, and the ids are decoded again.
// Built with clang (-fsanitize=fuzzer,address,undefined) when -DLOOM_FUZZ=ON; run by
// scripts/test.sh with the files of shared/models as seeds.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "engine/backends/cpu/matvec.hpp"
#include "engine/llama_weights.hpp"
#include "model/gguf/gguf.hpp"
#include "model/gguf/hparams.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/gguf/vocab.hpp"

namespace {

void exercise_tokenizer(const loom::model::GgufFile& f, const uint8_t* data, size_t size) {
    std::unique_ptr<loom::model::Tokenizer> tok;
    try {
        tok = loom::model::Tokenizer::from_gguf(f);
    } catch (const loom::model::VocabError&) { return; }
    const size_t tail = size < 256 ? size : 256;
    const std::string_view fuzzed(reinterpret_cast<const char*>(data + size - tail), tail);
    for (std::string_view text :
         {std::string_view("Once upon a time, <s> Führer Cửa Việt 123 \xF0\x9F\x98\x80"), fuzzed}) {
        for (bool special : {false, true}) {
            const auto ids = tok->encode(text, special, special);
            for (int32_t id : ids)
                if (id < 0 || id >= tok->n_vocab()) __builtin_trap();  // encode must return vocabulary ids
            (void)tok->decode(ids);
        }
    }
    const int32_t probe[] = {-1, 0, 1, tok->n_vocab() - 1, tok->n_vocab(), 0x7fffffff};
    (void)tok->decode(probe);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto f = loom::model::GgufFile::from_memory(data, size);
        for (const auto& [key, v] : f.metadata()) {
            (void)v.as_int(), (void)v.as_float(), (void)v.as_string();
            if (v.count < 4096) (void)v.numbers();
        }
        try {
            (void)loom::model::HParams::from_gguf(f);
        } catch (const loom::model::ModelError&) {}
        exercise_tokenizer(f, data, size);
        try {
            (void)loom::engine::LlamaWeights::bind(f, {"the CPU backend", loom::cpu::can_dot});
        } catch (const loom::model::ModelError&) {
        } catch (const loom::model::VocabError&) {}
    } catch (const loom::model::GgufError&) {}
    return 0;
}
