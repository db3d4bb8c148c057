// The bytes each token of a GGUF vocabulary adds to the text, for grammars: what a backend puts
// in ModelInfo::vocab_bytes (engine/backend.hpp) when it can apply a token mask. Shared by the
// CPU and the GPU backends so that both announce the same grammar vocabulary.
#pragma once

#include <cstdint>
#include <memory>

#include "grammar/vocab.hpp"
#include "model/gguf/vocab.hpp"

namespace loom::engine {

/// The grammar vocabulary of `vocab` for a model of n_vocab logits (>= vocab.size()): each
/// token's bytes from its GGUF text (grammar::token_bytes_from_pieces, byte-level spelling for
/// BPE vocabularies, SentencePiece otherwise; token types used only when there is one per
/// token) and the end-of-generation ids. Ids vocab.size()..n_vocab-1 have no bytes.
std::shared_ptr<const grammar::VocabBytes> make_vocab_bytes(const model::Vocab& vocab, int32_t n_vocab);

}  // namespace loom::engine
