// grammar::token_bytes_from_pieces (the engines' adapter from GGUF token texts to token bytes)
// equals model::Tokenizer::token_bytes on every token of every shared vocabulary.
#include <catch2/catch.hpp>

#include "grammar/token_pieces.hpp"
#include "model/gguf/gguf.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "test_paths.hpp"

using namespace loom;

TEST_CASE("token bytes from stored pieces match the tokenizer's on every shared vocabulary", "[grammar]") {
    for (const char* name : {"llama-spm", "phi-3", "baichuan", "gpt-2", "gpt-neox", "mpt", "falcon", "starcoder",
                             "refact", "deepseek-coder", "deepseek-llm", "bert-bge"}) {
        const auto tok = model::Tokenizer::from_gguf(
            model::GgufFile::open(test::shared_path(std::string("models/vocab/ggml-vocab-") + name + ".gguf")));
        const model::Vocab& v = tok->vocab();
        std::vector<int32_t> types;
        for (auto t : v.types) types.push_back(static_cast<int32_t>(t));
        const auto spelling =
            v.kind == model::VocabKind::Bpe ? grammar::PieceSpelling::ByteLevel : grammar::PieceSpelling::SentencePiece;
        const std::vector<std::string> bytes = grammar::token_bytes_from_pieces(v.tokens, types, spelling);
        REQUIRE(bytes.size() == static_cast<size_t>(tok->n_vocab()));
        size_t differ = 0, nonempty = 0;
        for (int32_t id = 0; id < tok->n_vocab(); ++id) {
            differ += bytes[static_cast<size_t>(id)] != tok->token_bytes(id);
            nonempty += !bytes[static_cast<size_t>(id)].empty();
        }
        INFO(name);
        CHECK(differ == 0);
        CHECK(nonempty > static_cast<size_t>(tok->n_vocab()) * 9 / 10);
    }
    CHECK(grammar::piece_bytes("<0x0A>", grammar::kPieceByte, grammar::PieceSpelling::SentencePiece) == "\n");
    CHECK(grammar::piece_bytes("\xE2\x96\x81the", grammar::kPieceNormal, grammar::PieceSpelling::SentencePiece) ==
          " the");
    CHECK(grammar::piece_bytes("\xC4\xA0the", grammar::kPieceNormal, grammar::PieceSpelling::ByteLevel) ==
          " the");  // Ġ
    CHECK(grammar::piece_bytes("<|im_end|>", grammar::kPieceControl, grammar::PieceSpelling::ByteLevel).empty());
    CHECK_THROWS_AS(grammar::token_bytes_from_pieces({"a", "b"}, {1}, grammar::PieceSpelling::ByteLevel),
                    std::invalid_argument);
}
