// TextAssembler on hand-built token sequences: characters split across byte tokens,
// stop strings across tokens and at the very start, special tokens, echo, and the
// invariant that released entries spell exactly the released text.
#include <catch2/catch.hpp>

#include "gateway/text_assembler.hpp"
#include "gateway_vocab.hpp"

using namespace loom;
using namespace loom::gateway;
using namespace loom::test;

namespace {

std::string joined(const std::vector<LogprobEntry>& es) {
    std::string out;
    for (const auto& e : es) out += e.bytes;
    return out;
}

// Everything a choice sent, released piece by piece, with the invariant checked on
// every piece.
struct Sink {
    std::string text;
    std::vector<LogprobEntry> entries;
    std::vector<std::string> pieces;  // each non-empty release's text
    void add(Released r) {
        REQUIRE(joined(r.entries) == r.text);
        if (!r.empty()) pieces.push_back(r.text);
        text += r.text;
        for (auto& e : r.entries) entries.push_back(std::move(e));
    }
};

protocol::Logprobs lp(float v, std::vector<protocol::TokenLogprob> top = {}) {
    protocol::Logprobs l;
    l.logprob = v;
    l.top = std::move(top);
    return l;
}

const auto tok = test_tokenizer();

}  // namespace

TEST_CASE("the test vocabulary spells what the tests assume") {
    CHECK(tok->token_bytes(kHello) == " Hello");
    CHECK(tok->token_bytes(byte_token(0xC3)) == "\xC3");
    CHECK(tok->token_bytes(kEot).empty());
    CHECK(tok->vocab().is_special(kEot));
}

TEST_CASE("whole tokens of complete text go out at once, with their logprobs") {
    TextAssembler ta(*tok, {});
    auto a = lp(-0.5f, {{kHello, -0.5f}, {kWor, -1.5f}});
    Released r = ta.push(kHello, &a);
    CHECK(r.text == " Hello");
    REQUIRE(r.entries.size() == 1);
    CHECK(r.entries[0].token == kHello);
    CHECK(r.entries[0].logprob == -0.5f);
    CHECK(r.entries[0].top.size() == 2);
    CHECK(r.entries[0].has_logprob);
    CHECK_FALSE(r.entries[0].special);
    CHECK(ta.push(kWor, nullptr).text == " wor");
    CHECK(ta.finish().empty());
    CHECK(ta.generated() == 2);
}

TEST_CASE("a character split across byte tokens is held, with its entries, until complete") {
    TextAssembler ta(*tok, {});
    Sink s;
    auto l1 = lp(-1.0f), l2 = lp(-2.0f), l3 = lp(-3.0f), l4 = lp(-4.0f);
    Released r = ta.push(byte_token(0xF0), &l1);  // 😀 = F0 9F 98 80
    CHECK(r.empty());
    CHECK(ta.push(byte_token(0x9F), &l2).empty());
    CHECK(ta.push(byte_token(0x98), &l3).empty());
    r = ta.push(byte_token(0x80), &l4);
    CHECK(r.text == "\xF0\x9F\x98\x80");
    REQUIRE(r.entries.size() == 4);
    CHECK(r.entries[0].bytes == "\xF0");
    CHECK(r.entries[3].bytes == "\x80");
    CHECK(r.entries[0].logprob == -1.0f);
    CHECK(r.entries[3].logprob == -4.0f);
    s.add(std::move(r));

    // A complete token after an incomplete character waits for it too.
    CHECK(ta.push(byte_token(0xC3), nullptr).empty());
    s.add(ta.push(byte_token(0xA9), nullptr));
    s.add(ta.push(kBang, nullptr));
    CHECK(s.text == "\xF0\x9F\x98\x80\xC3\xA9!");
    CHECK(s.pieces == std::vector<std::string>{"\xF0\x9F\x98\x80", "\xC3\xA9", "!"});
}

TEST_CASE("a token that completes one character and starts another releases only the first") {
    TextAssembler ta(*tok, {});
    Sink s;
    s.add(ta.push(byte_token(0xE4), nullptr));  // 中 = E4 B8 AD
    s.add(ta.push(byte_token(0xB8), nullptr));
    CHECK(s.text.empty());
    s.add(ta.push(byte_token(0xAD), nullptr));
    CHECK(s.text == "\xE4\xB8\xAD");
    s.add(ta.push(kCjk, nullptr));
    CHECK(s.text == "\xE4\xB8\xAD\xE4\xB8\xAD");
    CHECK(s.entries.size() == 4);
}

TEST_CASE("bytes that can never be valid UTF-8 are not held") {
    TextAssembler ta(*tok, {});
    Sink s;
    s.add(ta.push(byte_token(0xC3), nullptr));
    CHECK(s.text.empty());
    s.add(ta.push(kA, nullptr));  // C3 41: invalid, so complete
    CHECK(s.text ==
          "\xC3"
          "A");
    s.add(ta.push(byte_token(0xFF), nullptr));
    CHECK(s.text ==
          "\xC3"
          "A\xFF");
    CHECK(s.entries.size() == 3);
}

TEST_CASE("finish releases an unfinished character, so no token is lost") {
    TextAssembler ta(*tok, {});
    Sink s;
    s.add(ta.push(kHello, nullptr));
    s.add(ta.push(byte_token(0xF0), nullptr));
    s.add(ta.push(byte_token(0x9F), nullptr));
    CHECK(s.text == " Hello");
    s.add(ta.finish());
    CHECK(s.text == " Hello\xF0\x9F");
    CHECK(s.entries.size() == 3);
    CHECK(sanitize_utf8(s.text) == " Hello\xEF\xBF\xBD");
}

TEST_CASE("stop strings") {
    SECTION("a stop string split across tokens: the possible start is held, then dropped") {
        TextAssembler ta(*tok, {"STOP"});
        Sink s;
        s.add(ta.push(kHello, nullptr));
        s.add(ta.push(kST, nullptr));
        CHECK(s.text == " Hello");  // "ST" might begin "STOP"
        s.add(ta.push(kOP, nullptr));
        CHECK(ta.stopped());
        CHECK(s.text == " Hello");
        CHECK(s.entries.size() == 1);
        CHECK(ta.finish().empty());
        CHECK(ta.push(kBang, nullptr).empty());  // nothing after a stop
        CHECK(ta.generated() == 3);
    }
    SECTION("a held possible start that does not become the stop string goes out") {
        TextAssembler ta(*tok, {"STOP"});
        Sink s;
        s.add(ta.push(kST, nullptr));
        CHECK(s.text.empty());
        s.add(ta.push(kLd, nullptr));
        CHECK(s.text == "STld");
        CHECK(s.entries.size() == 2);
        CHECK_FALSE(ta.stopped());
    }
    SECTION("a token straddling the stop keeps its logprob and only its bytes before the stop") {
        TextAssembler ta(*tok, {"lo w"});
        Sink s;
        auto l1 = lp(-0.25f), l2 = lp(-0.75f);
        s.add(ta.push(kHello, &l1));
        CHECK(s.text.empty());  // " Hello" ends with "lo", which may begin "lo w"
        s.add(ta.push(kWor, &l2));
        CHECK(ta.stopped());
        CHECK(s.text == " Hel");
        REQUIRE(s.entries.size() == 1);
        CHECK(s.entries[0].token == kHello);
        CHECK(s.entries[0].bytes == " Hel");
        CHECK(s.entries[0].logprob == -0.25f);
    }
    SECTION("a stop at the very start leaves empty text and no entries") {
        TextAssembler ta(*tok, {" Hello"});
        Released r = ta.push(kHello, nullptr);
        CHECK(ta.stopped());
        CHECK(r.empty());
        CHECK(ta.finish().empty());
    }
    SECTION("a stop string made of byte tokens") {
        TextAssembler ta(*tok, {"\xF0\x9F\x98\x80"});
        Sink s;
        s.add(ta.push(kHello, nullptr));
        for (int b : {0xF0, 0x9F, 0x98}) s.add(ta.push(byte_token(static_cast<unsigned char>(b)), nullptr));
        CHECK(s.text == " Hello");
        s.add(ta.push(byte_token(0x80), nullptr));
        CHECK(ta.stopped());
        CHECK(s.text == " Hello");
        CHECK(s.entries.size() == 1);
    }
    SECTION("the earliest of several stop strings wins") {
        TextAssembler ta(*tok, {"wor", "Hel"});
        Sink s;
        s.add(ta.push(kHello, nullptr));
        CHECK(ta.stopped());
        CHECK(s.text == " ");
        REQUIRE(s.entries.size() == 1);
        CHECK(s.entries[0].bytes == " ");
    }
    SECTION("a stop inside one token cuts that token") {
        TextAssembler ta(*tok, {"ell"});
        Sink s;
        s.add(ta.push(kHello, nullptr));
        CHECK(s.text == " H");
        CHECK(s.entries.size() == 1);
    }
    SECTION("finish releases a held possible start") {
        TextAssembler ta(*tok, {"STOP"});
        Sink s;
        s.add(ta.push(kHello, nullptr));
        s.add(ta.push(kST, nullptr));
        s.add(ta.finish());
        CHECK(s.text == " HelloST");
        CHECK(s.entries.size() == 2);
    }
}

TEST_CASE("special tokens") {
    SECTION("chat: no bytes, and they never hold text back") {
        TextAssembler ta(*tok, {});
        Sink s;
        s.add(ta.push(kHello, nullptr));
        s.add(ta.push(kEot, nullptr));
        CHECK(s.entries.size() == 2);
        CHECK(s.entries[1].special);
        CHECK(s.entries[1].bytes.empty());
        s.add(ta.push(kBang, nullptr));
        CHECK(s.text == " Hello!");
    }
    SECTION("completions: a special token adds its text") {
        TextAssembler ta(*tok, {}, true);
        Sink s;
        s.add(ta.push(kEot, nullptr));
        s.add(ta.push(kHello, nullptr));
        CHECK(s.text == "<|eot|> Hello");
        CHECK(s.entries[0].special);
        CHECK(s.entries[0].bytes == "<|eot|>");
    }
    SECTION("an empty special token just before a stop string is kept") {
        TextAssembler ta(*tok, {"ST"});
        Sink s;
        s.add(ta.push(kHello, nullptr));
        s.add(ta.push(kEot, nullptr));
        s.add(ta.push(kST, nullptr));
        CHECK(ta.stopped());
        CHECK(s.text == " Hello");
        CHECK(s.entries.size() == 2);
    }
}

TEST_CASE("echo: prompt tokens go first and never match a stop string") {
    TextAssembler ta(*tok, {"Hello", "STOP"}, true);
    Sink s;
    protocol::PromptLogprobs first;  // index 0: no value
    protocol::PromptLogprobs second;
    second.index = 1;
    second.logprob = -2.5f;
    second.top = {{kHello, -0.5f}};
    s.add(ta.push_prompt(kBos, &first));
    s.add(ta.push_prompt(kHello, &second));
    s.add(ta.push_prompt(kST, nullptr));
    CHECK_FALSE(ta.stopped());
    CHECK(s.text == "<s> HelloST");
    REQUIRE(s.entries.size() == 3);
    CHECK_FALSE(s.entries[0].has_logprob);
    CHECK(s.entries[1].has_logprob);
    CHECK(s.entries[1].logprob == -2.5f);
    CHECK_FALSE(s.entries[2].has_logprob);
    // "ST" + "OP" spans the prompt and the completion: not a stop.
    s.add(ta.push(kOP, nullptr));
    CHECK_FALSE(ta.stopped());
    CHECK(s.text == "<s> HelloSTOP");
    CHECK(ta.generated() == 1);
    s.add(ta.push(kHello, nullptr));
    CHECK(ta.stopped());
    CHECK(s.text == "<s> HelloSTOP ");
    // After the completion began, prompt tokens are refused.
    CHECK(ta.push_prompt(kBang, nullptr).empty());
}

TEST_CASE("echo: a character split between the prompt and the completion") {
    TextAssembler ta(*tok, {});
    Sink s;
    s.add(ta.push_prompt(kHello, nullptr));
    s.add(ta.push_prompt(byte_token(0xC3), nullptr));
    CHECK(s.text == " Hello");
    s.add(ta.push(byte_token(0xA9), nullptr));
    CHECK(s.text == " Hello\xC3\xA9");
    CHECK(s.pieces == std::vector<std::string>{" Hello", "\xC3\xA9"});
}

TEST_CASE("UTF-8 helpers follow RFC 3629 and the maximal-subpart substitution") {
    CHECK(valid_utf8(""));
    CHECK(valid_utf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));
    CHECK_FALSE(valid_utf8("\xC0\xAF"));          // overlong
    CHECK_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate
    CHECK_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
    CHECK_FALSE(valid_utf8("\xF0\x9F\x98"));      // truncated

    CHECK(complete_utf8_prefix("ab\xF0\x9F\x98") == 2);
    CHECK(complete_utf8_prefix("ab\xF0\x9F\x98\x80") == 6);
    CHECK(complete_utf8_prefix("ab\xF0\x9F"
                               "A") == 5);         // invalid, so complete
    CHECK(complete_utf8_prefix("\xE0\x80") == 2);  // E0 80 can never be valid

    const std::string fffd = "\xEF\xBF\xBD";
    // The same results as Python's bytes.decode("utf-8", "replace").
    CHECK(sanitize_utf8("\xF0\x9F\x98"
                        "A") == fffd + "A");
    CHECK(sanitize_utf8("\xED\xA0\x80") == fffd + fffd + fffd);
    CHECK(sanitize_utf8("\xC0\xAF") == fffd + fffd);
    CHECK(sanitize_utf8("\xE0\x80\x80") == fffd + fffd + fffd);
    CHECK(sanitize_utf8("a\xF0\x9F") == "a" + fffd);
    CHECK(sanitize_utf8("\xC3\xA9") == "\xC3\xA9");
}
