// Byte-level BPE ("gpt2" vocabularies): not implemented yet (issue 3).
#include "model/tokenizer.hpp"

namespace loom::model {

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab v) {
    throw VocabError("byte-level BPE vocabularies (pre-tokenizer '" + v.pre + "') are not supported yet");
}

std::unique_ptr<Tokenizer> make_wpm_tokenizer(Vocab) {
    throw VocabError("WordPiece vocabularies are not supported yet");
}

}  // namespace loom::model
