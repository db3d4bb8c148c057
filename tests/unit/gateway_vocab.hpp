// A small hand-built SentencePiece vocabulary for the gateway's unit tests: the three
// llama specials, all 256 byte tokens <0x00>..<0xFF> (id = 3 + byte), a few pieces,
// and a control token in the middle of the text.
#pragma once

#include <memory>
#include <string>

#include "model/tokenizer/tokenizer.hpp"

namespace loom::test {

/// Ids of the named pieces of test_tokenizer().
enum TestToken : int32_t {
    kUnk = 0,
    kBos = 1,
    kEos = 2,
    kHello = 259,   ///< "▁Hello" -> " Hello"
    kWor = 260,     ///< "▁wor"   -> " wor"
    kLd = 261,      ///< "ld"
    kBang = 262,    ///< "!"
    kEAcute = 263,  ///< "é" as one piece
    kST = 264,      ///< "ST"
    kOP = 265,      ///< "OP"
    kA = 266,       ///< "A", the same text as the byte token <0x41>
    kEot = 267,     ///< "<|eot|>", a control token
    kCjk = 268,     ///< "中" as one piece
};

/// The byte token for `b`.
inline int32_t byte_token(unsigned char b) { return 3 + b; }

/// Builds the vocabulary (bos 1, eos 2, unk 0) and its SentencePiece tokenizer.
inline std::unique_ptr<model::Tokenizer> test_tokenizer() {
    using model::TokenType;
    model::Vocab v;
    v.kind = model::VocabKind::Spm;
    v.model = "llama";
    auto add = [&](std::string text, TokenType type) {
        v.tokens.push_back(std::move(text));
        v.types.push_back(type);
        v.scores.push_back(-static_cast<float>(v.tokens.size()));
    };
    add("<unk>", TokenType::Unknown);
    add("<s>", TokenType::Control);
    add("</s>", TokenType::Control);
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", TokenType::Byte);
    add("\xE2\x96\x81Hello", TokenType::Normal);
    add("\xE2\x96\x81wor", TokenType::Normal);
    add("ld", TokenType::Normal);
    add("!", TokenType::Normal);
    add("\xC3\xA9", TokenType::Normal);
    add("ST", TokenType::Normal);
    add("OP", TokenType::Normal);
    add("A", TokenType::Normal);
    add("<|eot|>", TokenType::Control);
    add("\xE4\xB8\xAD", TokenType::Normal);
    for (int32_t id = 0; id < v.size(); ++id) v.token_to_id[v.tokens[static_cast<size_t>(id)]] = id;
    v.unk = kUnk;
    v.bos = kBos;
    v.eos = kEos;
    v.add_bos = true;
    v.add_space_prefix = false;  // "!" encodes as the one token "!"
    v.eog = {kEos, kEot};
    return model::Tokenizer::from_vocab(std::move(v));
}

}  // namespace loom::test
