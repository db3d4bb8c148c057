// SentencePiece-style tokenizer against real vocabularies and recorded ids.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "model/gguf/gguf.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "test_paths.hpp"

using loom::model::GgufFile;
using loom::model::Tokenizer;
using loom::test::shared_path;

TEST_CASE("stories260K prompts encode to the reference ids") {
    auto f = GgufFile::open(shared_path("models/stories260K.gguf"));
    auto tok = Tokenizer::from_gguf(f);
    // ids recorded in shared/reference/stories260K.json
    CHECK(tok->encode("Once upon a time", true, true) == std::vector<int32_t>{1, 403, 407, 261, 378});
    CHECK(tok->encode("The little dog", true, true) == std::vector<int32_t>{1, 291, 376, 400, 428});
    CHECK(tok->encode("Lily and Tom went to the park. They", true, true) ==
          std::vector<int32_t>{1, 317, 269, 274, 287, 263, 377, 267, 265, 282, 295, 433, 426, 342});
    CHECK(tok->token_bytes(383) == " there");
    CHECK(tok->token_bytes(432) == ",");
    CHECK(tok->token_bytes(1).empty());  // BOS is a control token
}

TEST_CASE("TinyStories-656K has no byte tokens: llama.cpp's ids") {
    auto f = GgufFile::open(shared_path("models/TinyStories-656K-Q8_0.gguf"));
    auto tok = Tokenizer::from_gguf(f);
    CHECK(tok->encode("Once upon a time", true, true) == std::vector<int32_t>{1, 80, 147, 201, 282, 57});
    // A character outside the vocabulary falls back to <unk> instead of crashing.
    auto ids = tok->encode("\xE2\x98\x83", false, false);
    CHECK(std::find(ids.begin(), ids.end(), 0) != ids.end());
}

static std::vector<std::string> split_inputs(const std::string& all) {
    std::vector<std::string> out;
    const std::string sep = "\n__ggml_vocab_test__\n";
    size_t k = 0;
    while (true) {
        size_t e = all.find(sep, k);
        if (e == std::string::npos) break;
        out.push_back(all.substr(k, e - k));
        k = e + sep.size();
    }
    return out;
}

static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST_CASE("SentencePiece vocabularies pass llama.cpp's test vectors") {
    for (std::string name : {"llama-spm", "phi-3"}) {
        const std::string base = shared_path("models/vocab/ggml-vocab-" + name + ".gguf");
        auto f = GgufFile::open(base);
        auto tok = Tokenizer::from_gguf(f);
        auto inputs = split_inputs(slurp(base + ".inp"));
        std::istringstream outs(slurp(base + ".out"));
        std::string line;
        size_t n = 0;
        for (const std::string& text : inputs) {
            REQUIRE(std::getline(outs, line));
            std::vector<int32_t> want;
            std::istringstream ls(line);
            for (int32_t id; ls >> id;) want.push_back(id);
            INFO(name << " input #" << n << ": '" << text << "'");
            CHECK(tok->encode(text, false, false) == want);
            ++n;
        }
        CHECK(n == inputs.size());
    }
}
