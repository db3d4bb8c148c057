// OutputSplitter: logprob entries follow the text into content, reasoning and each
// tool call's name and arguments, so that every part's entries, joined, spell its
// text; tokens that straddle a part boundary are split; marker tokens belong to no
// part; pushed token by token, the deltas join to what one push gives.
#include <catch2/catch.hpp>

#include <random>

#include "gateway/output_split.hpp"

using namespace loom;
using namespace loom::gateway;

namespace {

// A vocabulary whose ids 3.. are the given special (control) tokens.
std::unique_ptr<model::Tokenizer> marker_vocab(const std::vector<std::string>& specials) {
    model::Vocab v;
    v.kind = model::VocabKind::Spm;
    v.model = "llama";
    auto add = [&](const std::string& t, model::TokenType ty) {
        v.tokens.push_back(t);
        v.types.push_back(ty);
        v.scores.push_back(0);
    };
    add("<unk>", model::TokenType::Unknown);
    add("<s>", model::TokenType::Control);
    add("</s>", model::TokenType::Control);
    for (const auto& s : specials) add(s, model::TokenType::Control);
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", model::TokenType::Byte);
    for (int32_t id = 0; id < v.size(); ++id) v.token_to_id[v.tokens[static_cast<size_t>(id)]] = id;
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    return model::Tokenizer::from_vocab(std::move(v));
}

// `text` as logprob entries: each special token of the vocabulary that occurs in it is
// one entry with no bytes (as chat gives them); the rest is cut into pieces of 1..5
// bytes at random (across characters and marker texts). Logprobs number the entries.
std::vector<LogprobEntry> tokenize(const model::Tokenizer& tok, const std::string& text, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<LogprobEntry> out;
    size_t i = 0;
    auto entry = [&](int32_t id, std::string bytes, bool special) {
        LogprobEntry e;
        e.token = id;
        e.bytes = std::move(bytes);
        e.special = special;
        e.logprob = -0.125f * static_cast<float>(out.size() + 1);
        e.top = {{id, e.logprob}};
        out.push_back(std::move(e));
    };
    while (i < text.size()) {
        int32_t special = -1;
        for (int32_t id = 3; id < tok.n_vocab(); ++id)
            if (tok.vocab().is_special(id) && text.compare(i, tok.vocab().tokens[static_cast<size_t>(id)].size(),
                                                           tok.vocab().tokens[static_cast<size_t>(id)]) == 0) {
                special = id;
                break;
            }
        if (special >= 0) {
            entry(special, "", true);
            i += tok.vocab().tokens[static_cast<size_t>(special)].size();
            continue;
        }
        size_t n = 1 + rng() % 5;
        // Stop a piece before a special token's text.
        for (size_t k = 1; k < n && i + k < text.size(); ++k)
            if (text[i + k] == '<' && text.compare(i + k, 2, "<|") == 0) n = k;
        n = std::min(n, text.size() - i);
        entry(1000 + static_cast<int32_t>(out.size()), text.substr(i, n), false);
        i += n;
    }
    return out;
}

std::string joined(const std::vector<LogprobEntry>& es) {
    std::string s;
    for (const auto& e : es) s += e.bytes;
    return s;
}

struct Result {
    std::string content, reasoning;
    std::vector<LogprobEntry> content_e, reasoning_e;
    struct Call {
        std::string id, name, arguments;
        std::vector<LogprobEntry> name_e, args_e;
    };
    std::vector<Call> calls;
    int header_deltas = 0;
};

void add(Result& r, SplitDelta d) {
    CHECK(joined(d.content_entries) == d.content);
    CHECK(joined(d.reasoning_entries) == d.reasoning);
    r.content += d.content;
    r.reasoning += d.reasoning;
    r.content_e.insert(r.content_e.end(), d.content_entries.begin(), d.content_entries.end());
    r.reasoning_e.insert(r.reasoning_e.end(), d.reasoning_entries.begin(), d.reasoning_entries.end());
    for (auto& c : d.calls) {
        CHECK(joined(c.arg_entries) == c.arguments);
        if (c.header) {
            ++r.header_deltas;
            REQUIRE(c.index == static_cast<int>(r.calls.size()));  // headers come in order, once
            CHECK(c.arguments.empty());                            // the header has no arguments
            r.calls.push_back({c.id, c.name, "", {}, {}});
        }
        REQUIRE(c.index < static_cast<int>(r.calls.size()));  // nothing before its header
        auto& call = r.calls[static_cast<size_t>(c.index)];
        call.arguments += c.arguments;
        call.name_e.insert(call.name_e.end(), c.name_entries.begin(), c.name_entries.end());
        call.args_e.insert(call.args_e.end(), c.arg_entries.begin(), c.arg_entries.end());
    }
}

bool same(const std::vector<LogprobEntry>& a, const std::vector<LogprobEntry>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].token != b[i].token || a[i].bytes != b[i].bytes || a[i].logprob != b[i].logprob ||
            a[i].special != b[i].special || a[i].top.size() != b[i].top.size())
            return false;
    return true;
}

// Splits `text` (tokenized with `seed`) once in one push and once token by token;
// requires the two to agree and every part's entries to spell it; returns the first.
Result split_both(const model::Tokenizer& tok, const OutputOptions& o, const std::string& text, unsigned seed) {
    const auto entries = tokenize(tok, text, seed);
    int n = 0;
    auto ids = [&n] { return "call_" + std::to_string(n++); };
    Result whole, streamed;
    {
        OutputSplitter s(tok, make_output_parser(o), ids);
        add(whole, s.push(Released{joined(entries), entries}));
        add(whole, s.finish());
    }
    n = 0;
    {
        OutputSplitter s(tok, make_output_parser(o), ids);
        for (const auto& e : entries) add(streamed, s.push(Released{e.bytes, {e}}));
        add(streamed, s.finish());
    }
    CHECK(streamed.content == whole.content);
    CHECK(streamed.reasoning == whole.reasoning);
    CHECK(same(streamed.content_e, whole.content_e));
    CHECK(same(streamed.reasoning_e, whole.reasoning_e));
    REQUIRE(streamed.calls.size() == whole.calls.size());
    for (size_t i = 0; i < whole.calls.size(); ++i) {
        const auto &a = whole.calls[i], &b = streamed.calls[i];
        CHECK(a.id == b.id);
        CHECK(a.name == b.name);
        CHECK(a.arguments == b.arguments);
        CHECK(same(a.name_e, b.name_e));
        CHECK(same(a.args_e, b.args_e));
        CHECK(joined(a.name_e) == a.name);
        CHECK(joined(a.args_e) == a.arguments);
    }
    CHECK(joined(whole.content_e) == whole.content);
    CHECK(joined(whole.reasoning_e) == whole.reasoning);
    CHECK(streamed.header_deltas == static_cast<int>(streamed.calls.size()));
    return whole;
}

OutputOptions hermes_with_think() {
    OutputOptions o;
    o.tools = ToolFamily::Hermes;
    o.calls = true;
    o.reasoning = ReasoningFamily::Think;
    return o;
}

}  // namespace

TEST_CASE("split: text markers cut across tokens; entries spell every part") {
    auto tok = marker_vocab({"<|im_end|>"});
    const std::string text =
        "<think>\nIl fait beau? Vérifions 中文.\n</think>\n\nJe vérifie.\n<tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Zürich\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
        "{}}\n</tool_call>";
    for (unsigned seed = 1; seed <= 40; ++seed) {
        INFO("seed " << seed);
        const Result r = split_both(*tok, hermes_with_think(), text, seed);
        CHECK(r.reasoning == "Il fait beau? Vérifions 中文.");
        CHECK(r.content == "Je vérifie.");
        REQUIRE(r.calls.size() == 2);
        CHECK(r.calls[0].name == "get_weather");
        CHECK(r.calls[0].arguments == "{\"city\": \"Zürich\"}");
        CHECK(r.calls[1].name == "get_time");
        CHECK(r.calls[1].arguments == "{}");
        CHECK(r.calls[0].id == "call_0");
        CHECK(r.calls[1].id == "call_1");
    }
}

TEST_CASE("split: a token straddling two parts is split, with its logprob in both") {
    auto tok = marker_vocab({});
    OutputSplitter s(*tok, make_output_parser(hermes_with_think()), [] { return std::string("id"); });
    // One token holds the end of the reasoning, the close marker and the content start.
    std::vector<LogprobEntry> es(3);
    es[0].token = 1000, es[0].bytes = "<think>Hm", es[0].logprob = -1;
    es[1].token = 1001, es[1].bytes = "m.</think>Yes", es[1].logprob = -2;
    es[2].token = 1002, es[2].bytes = ", sir", es[2].logprob = -3;
    Result r;
    add(r, s.push(Released{"<think>Hmm.</think>Yes, sir", es}));
    add(r, s.finish());
    CHECK(r.reasoning == "Hmm.");
    CHECK(r.content == "Yes, sir");
    REQUIRE(r.reasoning_e.size() == 2);
    CHECK(r.reasoning_e[0].bytes == "Hm");
    CHECK(r.reasoning_e[1].bytes == "m.");
    CHECK(r.reasoning_e[1].logprob == -2);
    REQUIRE(r.content_e.size() == 2);
    CHECK(r.content_e[0].bytes == "Yes");
    CHECK(r.content_e[0].token == 1001);
    CHECK(r.content_e[0].logprob == -2);
}

TEST_CASE("split: harmony control tokens are markers; other special tokens stay where they stand") {
    auto tok = marker_vocab({"<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|call|>", "<|constrain|>",
                             "<|return|>", "<|im_end|>"});
    OutputOptions o;
    o.tools = ToolFamily::GptOss;
    o.reasoning = ReasoningFamily::GptOss;
    o.calls = true;
    const std::string text =
        "<|channel|>analysis<|message|>Weather: use the tool.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";
    for (unsigned seed = 1; seed <= 20; ++seed) {
        const Result r = split_both(*tok, o, text, seed);
        CHECK(r.reasoning == "Weather: use the tool.");
        CHECK(r.content.empty());
        REQUIRE(r.calls.size() == 1);
        CHECK(r.calls[0].name == "get_weather");
        CHECK(r.calls[0].arguments == "{\"city\":\"Paris\"}");
        for (const auto* list : {&r.reasoning_e, &r.calls[0].name_e, &r.calls[0].args_e})
            for (const auto& e : *list) CHECK_FALSE(e.special);  // the control tokens went to no part
    }
    // A special token that is no marker of the format adds no text and stays in its part.
    const Result r = split_both(*tok, o, "<|channel|>final<|message|>Hi<|im_end|> there", 3);
    CHECK(r.content == "Hi there");
    bool seen = false;
    for (const auto& e : r.content_e) seen = seen || (e.special && e.bytes.empty());
    CHECK(seen);
}

TEST_CASE("split: without a parser everything is content; finish_reason") {
    auto tok = marker_vocab({});
    OutputSplitter plain(*tok, nullptr, [] { return std::string(); });
    std::vector<LogprobEntry> es(1);
    es[0].bytes = "<tool_call>{}";
    const SplitDelta d = plain.push(Released{"<tool_call>{}", es});
    CHECK(d.content == "<tool_call>{}");
    CHECK(plain.finish_reason("stop") == "stop");

    OutputSplitter s(*tok, make_output_parser(hermes_with_think()), [] { return std::string("x"); });
    es[0].bytes = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    s.push(Released{es[0].bytes, es});
    s.finish();
    CHECK(s.calls() == 1);
    CHECK(s.finish_reason("stop") == "tool_calls");
    CHECK(s.finish_reason("cancelled") == "tool_calls");
    CHECK(s.finish_reason("length") == "length");
}
