// Token automaton and Matcher on real vocabularies: masks equal an independent per-token check
// at every step of tokenized outputs; byte-fallback and multi-byte tokens; tokens that span a
// grammar boundary; end tokens; rollback and replay.
#include <catch2/catch.hpp>

#include <thread>

#include "grammar/compile.hpp"
#include "grammar/matcher.hpp"
#include "grammar_vocab.hpp"

using namespace loom::grammar;
using loom::test::load_test_vocab;
using loom::test::TestVocab;

namespace {

bool bit(const std::vector<uint32_t>& m, int32_t id) { return (m[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u; }

std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& m, int32_t n) {
    std::vector<int32_t> out;
    for (int32_t id = 0; id < n; ++id)
        if (bit(m, id)) out.push_back(id);
    return out;
}

// The allowed tokens after `text`, found without the trie, the classification or any cache:
// each token's bytes are stepped from the parse stacks of `text`.
std::vector<int32_t> oracle(const Grammar& g, const VocabBytes& v, const std::string& text) {
    detail::StackArena a;
    std::vector<int32_t> cur{a.intern(0, 0, detail::kBottom)}, next, visited;
    for (char c : text) {
        detail::step_set(g, a, cur, static_cast<uint8_t>(c), next, visited);
        cur.swap(next);
    }
    REQUIRE_FALSE(cur.empty());
    bool end = false;
    for (int32_t s : cur) end = end || detail::stack_can_end(g, a, s);
    std::vector<int32_t> out;
    const int32_t mark = a.size();
    for (int32_t id = 0; id < v.n_vocab(); ++id) {
        if (v.is_eog(id)) {
            if (end) out.push_back(id);
            continue;
        }
        const std::string& b = v.bytes(id);
        if (b.empty()) continue;
        std::vector<int32_t> s = cur;
        for (char c : b) {
            detail::step_set(g, a, s, static_cast<uint8_t>(c), next, visited);
            s.swap(next);
            if (s.empty()) break;
        }
        if (!s.empty()) out.push_back(id);
        a.truncate(mark);
    }
    return out;
}

// The tokenizer's encoding of `text`; when that does not spell `text` exactly (SentencePiece
// adds a leading space), the greedy longest-match tokenization instead.
std::vector<int32_t> tokens_for(const TestVocab& v, const std::string& text) {
    std::vector<int32_t> toks = v.tok->encode(text, false, false);
    if (v.tok->decode(toks) == text) return toks;
    toks.clear();
    for (size_t pos = 0; pos < text.size();) {
        int32_t best = -1;
        size_t len = 0;
        for (int32_t id = 0; id < v.bytes->n_vocab(); ++id) {
            const std::string& b = v.bytes->bytes(id);
            if (b.size() > len && !v.bytes->is_eog(id) && text.compare(pos, b.size(), b) == 0)
                best = id, len = b.size();
        }
        REQUIRE(best >= 0);
        toks.push_back(best);
        pos += len;
    }
    return toks;
}

// Follows the tokenization of `text` (which the grammar must accept), comparing the mask
// with the oracle every `every` steps, then ends with an end token.
void follow(const TestVocab& v, const Grammar& g, const std::string& text, size_t every, bool complete = true) {
    auto a = std::make_shared<const TokenAutomaton>(g, v.bytes);
    Matcher m(a);
    const std::vector<int32_t> toks = tokens_for(v, text);
    std::vector<uint32_t> mask(m.mask_words());
    std::string sofar;
    for (size_t k = 0; k <= toks.size(); ++k) {
        m.fill_mask(mask);
        if (k % every == 0 || k == toks.size()) {
            INFO("after " << k << " tokens: '" << sofar << "'");
            REQUIRE(allowed_ids(mask, v.bytes->n_vocab()) == oracle(g, *v.bytes, sofar));
        }
        if (k == toks.size()) break;
        INFO("token " << toks[k] << " '" << v.bytes->bytes(toks[k]) << "' after '" << sofar << "'");
        REQUIRE(bit(mask, toks[k]));
        REQUIRE(m.advance(toks[k]));
        sofar += v.bytes->bytes(toks[k]);
    }
    REQUIRE(sofar == text);
    REQUIRE(m.can_end());
    REQUIRE(m.is_done() == complete);  // nothing may follow a JSON value
    REQUIRE(m.advance(v.bytes->eog()[0]));
    CHECK(m.ended());
}

const char* kPerson =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},"age":{"type":"integer","minimum":0},
  "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"enum":["a","b c","ü"]}}},
  "required":["name","age"],"additionalProperties":false})";
const char* kTree =
    R"({"type":"object","properties":{"v":{"type":"number"},"kids":{"type":"array","items":{"$ref":"#"}}},"required":["v"]})";

}  // namespace

TEST_CASE("masks equal the per-token check along real outputs (SentencePiece with byte fallback)", "[grammar]") {
    const TestVocab v = load_test_vocab("llama-spm");
    follow(v, compile_json_schema(kPerson),
           R"({"name": "Zoë 😀 \"Q\"", "age": 41, "email": "zoe@example.org", "tags": ["b c", "ü"]})", 3);
    follow(v, compile_json_object(), "{\n  \"a\": [1, {\"b\": null}],\n  \"c\": \"日本\"\n}", 2);
    follow(v, compile_json_schema(kTree), R"({"v":1,"kids":[{"v":2.5,"kids":[]},{"v":-3}]})", 1);
    follow(v, compile_regex("[0-9]{3}-[A-Z]+( [a-z]+)?"), "123-ABC xyz", 1, false);
}

TEST_CASE("masks equal the per-token check along real outputs (byte-level BPE)", "[grammar]") {
    const TestVocab v = load_test_vocab("gpt-2");
    follow(v, compile_json_schema(kPerson),
           R"({"name":"Zoë 😀 \"Q\"","age":41,"email":"zoe@example.org","tags":["b c","ü"]})", 2);
    follow(v, compile_json_schema(kTree), R"({"v": 1, "kids": [{"v": 2.5, "kids": []}, {"v": -3}]})", 1);
    follow(v, compile_choice({"positive", "negative", "neutral"}), "neutral", 1);
}

TEST_CASE("byte-fallback tokens build a multi-byte character one byte at a time", "[grammar]") {
    const TestVocab v = load_test_vocab("llama-spm");
    auto byte_tok = [&](int b) {
        return v.tok->vocab().find("<0x" + std::string(1, "0123456789ABCDEF"[b >> 4]) + "0123456789ABCDEF"[b & 15] +
                                   ">");
    };
    // "😀" (F0 9F 98 80) is not a piece of the Llama-2 vocabulary: it is four byte tokens.
    const std::vector<int32_t> emoji = v.tok->encode("😀", false, false);
    REQUIRE(emoji.size() >= 4);
    const std::vector<int32_t> tail(emoji.end() - 4, emoji.end());
    REQUIRE(tail == std::vector<int32_t>{byte_tok(0xF0), byte_tok(0x9F), byte_tok(0x98), byte_tok(0x80)});

    auto a = std::make_shared<const TokenAutomaton>(compile_json_schema(R"({"type":"string"})"), v.bytes);
    Matcher m(a);
    std::vector<uint32_t> mask(m.mask_words());
    REQUIRE(m.advance(v.tok->vocab().find("\"")));
    REQUIRE(m.advance(byte_tok(0xF0)));
    m.fill_mask(mask);
    // After F0 only a continuation byte 90..BF may follow: exactly those 48 byte tokens.
    std::vector<int32_t> want;
    for (int b = 0x90; b <= 0xBF; ++b) want.push_back(byte_tok(b));
    std::sort(want.begin(), want.end());
    CHECK(allowed_ids(mask, v.bytes->n_vocab()) == want);
    CHECK_FALSE(m.advance(v.tok->vocab().find("\"")));  // the string cannot end mid-character
    REQUIRE(m.advance(byte_tok(0x9F)));
    REQUIRE(m.advance(byte_tok(0x98)));
    REQUIRE(m.advance(byte_tok(0x80)));
    m.fill_mask(mask);
    CHECK(bit(mask, v.tok->vocab().find("\"")));
    CHECK(bit(mask, v.tok->vocab().find("▁world")));
    CHECK_FALSE(bit(mask, v.bytes->eog()[0]));  // the string is still open
}

TEST_CASE("tokens that span a grammar boundary are allowed exactly when the whole token fits", "[grammar]") {
    const TestVocab v = load_test_vocab("gpt-2");
    const auto& vocab = v.tok->vocab();
    const int32_t quote_comma = vocab.find("\","), quote_brace = vocab.find("\"}"), colon_quote = vocab.find("\":\""),
                  brace_quote = vocab.find("{\"");
    REQUIRE(quote_comma >= 0);
    REQUIRE(quote_brace >= 0);
    REQUIRE(colon_quote >= 0);
    REQUIRE(brace_quote >= 0);
    auto a = std::make_shared<const TokenAutomaton>(
        compile_json_schema(
            R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a","b"],"additionalProperties":false})",
            JsonOptions{.compact = true}),
        v.bytes);
    Matcher m(a);
    std::vector<uint32_t> mask(m.mask_words());
    REQUIRE(m.advance(brace_quote));  // {"  : the object opens and the key starts
    REQUIRE(m.advance_bytes("a"));
    m.fill_mask(mask);
    CHECK(bit(mask, colon_quote));  // ":" closes the key, the colon, opens the value
    REQUIRE(m.advance(colon_quote));
    REQUIRE(m.advance_bytes("x"));
    m.fill_mask(mask);
    CHECK(bit(mask, quote_comma));        // ", closes the value and goes on to "b"
    CHECK_FALSE(bit(mask, quote_brace));  // "} would close the object before the required b
    REQUIRE(m.advance(quote_comma));
    REQUIRE(m.advance_bytes("\"b"));
    REQUIRE(m.advance(colon_quote));
    m.fill_mask(mask);
    CHECK(bit(mask, quote_brace));        // an empty value, then the end of the object
    CHECK_FALSE(bit(mask, quote_comma));  // no third property
    REQUIRE(m.advance(quote_brace));
    CHECK(m.is_done());
    m.fill_mask(mask);
    CHECK(allowed_ids(mask, v.bytes->n_vocab()) == v.bytes->eog());
}

TEST_CASE("end tokens only when complete; special tokens never; padded logits stay off", "[grammar]") {
    const TestVocab v = load_test_vocab("llama-spm", 32016);
    auto a = std::make_shared<const TokenAutomaton>(compile_regex("ab(c)?"), v.bytes);
    Matcher m(a);
    std::vector<uint32_t> mask(m.mask_words());
    REQUIRE(mask.size() == (32016 + 31) / 32);
    const int32_t eos = v.tok->vocab().eos, bos = v.tok->vocab().bos;
    CHECK_FALSE(m.advance(eos));
    m.fill_mask(mask);
    CHECK_FALSE(bit(mask, eos));
    CHECK_FALSE(bit(mask, bos));
    REQUIRE(m.advance_bytes("ab"));
    CHECK(m.can_end());
    CHECK_FALSE(m.is_done());  // "c" may still follow
    m.fill_mask(mask);
    CHECK(bit(mask, eos));
    CHECK(bit(mask, v.tok->vocab().find("c")));
    CHECK_FALSE(bit(mask, bos));
    for (int32_t id = 32000; id < 32016; ++id) CHECK_FALSE(bit(mask, id));
    CHECK_FALSE(m.advance(bos));
    CHECK_FALSE(m.advance(32005));
    REQUIRE(m.advance(eos));
    CHECK(m.ended());
    CHECK_FALSE(m.advance_bytes("c"));
}

TEST_CASE("rollback and replay rebuild the same state", "[grammar]") {
    const TestVocab v = load_test_vocab("gpt-2");
    auto a = std::make_shared<const TokenAutomaton>(compile_json_object(), v.bytes);
    const std::vector<int32_t> toks = v.tok->encode(R"({"k": [1, 2, {"x": "y"}], "z": {"w": []}})", false, false);
    Matcher m(a);
    std::vector<std::vector<uint32_t>> masks;
    std::vector<uint32_t> mask(m.mask_words());
    for (int32_t t : toks) {
        m.fill_mask(mask);
        masks.push_back(mask);
        REQUIRE(m.advance(t));
    }
    REQUIRE(m.is_done());
    // Back 7 tokens: the mask is the one seen then; forward again reaches the end again.
    m.rollback(7);
    CHECK(m.n_tokens() == toks.size() - 7);
    m.fill_mask(mask);
    CHECK(mask == masks[toks.size() - 7]);
    for (size_t k = toks.size() - 7; k < toks.size(); ++k) REQUIRE(m.advance(toks[k]));
    CHECK(m.is_done());
    // A preempted request: a new matcher replays the first 10 tokens.
    Matcher r(a);
    REQUIRE(r.replay(std::span<const int32_t>(toks.data(), 10)));
    r.fill_mask(mask);
    CHECK(mask == masks[10]);
    // Replay stops at the first token that does not fit.
    std::vector<int32_t> bad(toks.begin(), toks.begin() + 3);
    bad.push_back(v.tok->vocab().find("}"));
    bad.push_back(toks[3]);
    CHECK_FALSE(r.replay(bad));
    CHECK(r.n_tokens() == 3);
    r.reset();
    CHECK(r.n_tokens() == 0);
    r.fill_mask(mask);
    CHECK(mask == masks[0]);
}

TEST_CASE("matchers on one automaton can run on several threads", "[grammar]") {
    const TestVocab v = load_test_vocab("gpt-2");
    auto a = std::make_shared<const TokenAutomaton>(compile_json_schema(kPerson), v.bytes);
    const std::vector<int32_t> toks = v.tok->encode(R"({"name": "n", "age": 7, "tags": ["a"]})", false, false);
    auto run = [&](std::vector<std::vector<uint32_t>>& out) {
        Matcher m(a);
        std::vector<uint32_t> mask(m.mask_words());
        for (int32_t t : toks) {
            m.fill_mask(mask);
            out.push_back(mask);
            if (!m.advance(t)) return;
        }
    };
    std::vector<std::vector<uint32_t>> x, y;
    std::thread t1([&] { run(x); }), t2([&] { run(y); });
    t1.join();
    t2.join();
    REQUIRE(x.size() == toks.size());
    CHECK(x == y);
}
