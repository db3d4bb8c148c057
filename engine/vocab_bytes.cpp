// make_vocab_bytes: a GGUF vocabulary's token texts turned into the bytes grammars match.
#include "engine/vocab_bytes.hpp"

#include <vector>

#include "grammar/token_pieces.hpp"

namespace loom::engine {

std::shared_ptr<const grammar::VocabBytes> make_vocab_bytes(const model::Vocab& vocab, int32_t n_vocab) {
    std::vector<int32_t> types;
    types.reserve(vocab.types.size());
    for (model::TokenType t : vocab.types) types.push_back(static_cast<int32_t>(t));
    if (!types.empty() && types.size() != vocab.tokens.size()) types.clear();
    const auto spelling =
        vocab.kind == model::VocabKind::Bpe ? grammar::PieceSpelling::ByteLevel : grammar::PieceSpelling::SentencePiece;
    return std::make_shared<const grammar::VocabBytes>(grammar::token_bytes_from_pieces(vocab.tokens, types, spelling),
                                                       vocab.eog, n_vocab);
}

}  // namespace loom::engine
