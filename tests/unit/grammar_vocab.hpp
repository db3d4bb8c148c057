// The shared vocabularies (shared/models/vocab) as grammar::VocabBytes, for the grammar tests:
// the adapter an engine would use, from model::Tokenizer::token_bytes and Vocab::eog.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "grammar/vocab.hpp"
#include "model/gguf/gguf.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "test_paths.hpp"

namespace loom::test {

struct TestVocab {
    std::unique_ptr<model::Tokenizer> tok;
    std::shared_ptr<const grammar::VocabBytes> bytes;
};

/// Loads `ggml-vocab-<name>.gguf`; `n_vocab` > the token count pads the logits as a model
/// with a rounded-up output matrix would.
inline TestVocab load_test_vocab(const std::string& name, int32_t n_vocab = -1) {
    TestVocab v;
    v.tok =
        model::Tokenizer::from_gguf(model::GgufFile::open(shared_path("models/vocab/ggml-vocab-" + name + ".gguf")));
    std::vector<std::string> b;
    for (int32_t id = 0; id < v.tok->n_vocab(); ++id) b.push_back(v.tok->token_bytes(id));
    v.bytes = std::make_shared<const grammar::VocabBytes>(std::move(b), v.tok->vocab().eog, n_vocab);
    return v;
}

}  // namespace loom::test
