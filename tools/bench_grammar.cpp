// loom-bench-grammar: compile time and per-token mask time of loom's grammar engine.
//
// For a few common constraints (any JSON object, a flat strict schema, a nested schema with
// $defs and formats, a tool call, a recursive schema, a regex) it measures
//  - compile: constraint text -> Grammar, and the automaton's state count;
//  - the mask along real generations: each example output is tokenized with the first
//    vocabulary's tokenizer, then Matcher::fill_mask() is timed before every token (and
//    the end token) and the token is checked to be allowed. "cold" is the first pass over
//    a fresh TokenAutomaton (each state's first mask includes its trie walk); "warm" are
//    later passes with new matchers on the same automaton (as for later requests);
//  - precompute: classifying every state of a fresh automaton.
// Times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time.
// Every figure is the best of --rounds rounds (default 5), each on a fresh automaton, so that
// other processes on a shared machine disturb it least; "warm" pools --runs passes per round.
// The vocabulary is the first file's tokens (ids kept), then the tokens of the --extra
// files whose bytes are new, until --n-vocab tokens (default: all of them): the shared
// test vocabularies have no Llama-3-size (128256) one, so one is assembled.
//
// Usage: loom-bench-grammar --vocab A.gguf [--extra B.gguf ...] [--n-vocab N] [--runs R] [--rounds N] [--only NAME]
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "grammar/compile.hpp"
#include "grammar/matcher.hpp"
#include "model/gguf/gguf.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace {

using namespace loom::grammar;

// This thread's CPU time: on a machine shared with other jobs, wall time would count the
// time the thread waits for a core. (The clock read itself costs about 0.1 us.)
struct Clock {
    using time_point = double;  // microseconds
    static time_point now() {
        timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
    }
};

double us_since(Clock::time_point t0) { return Clock::now() - t0; }

struct Case {
    const char* name;
    Constraint c;
    std::vector<std::string> outputs;
};

Constraint schema(const char* text) {
    Constraint c;
    c.kind = Constraint::Kind::JsonSchema;
    c.text = text;
    return c;
}

std::vector<Case> cases() {
    std::vector<Case> v;
    Constraint obj;
    obj.kind = Constraint::Kind::JsonObject;
    v.push_back(
        {"json_object",
         obj,
         {R"({"name": "Ada Lovelace", "born": 1815, "fields": ["mathematics", "computing"], "notes": {"first program": true, "machine": "Analytical Engine"}})",
          "{\n  \"city\": \"Paris\",\n  \"population\": 2102650,\n  \"districts\": [1, 2, 3, 4],\n  \"mayor\": null\n}",
          R"({"a":{"b":{"c":[{"d":1.5e3},{"e":-2}]}},"f":"tab\there"})"}});
    v.push_back(
        {"flat",
         schema(
             R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
        "email":{"type":"string","format":"email"},"role":{"enum":["admin","editor","viewer"]},"active":{"type":"boolean"}},
        "required":["name","age","email","role","active"],"additionalProperties":false})"),
         {R"({"name": "Grace Hopper", "age": 85, "email": "grace@navy.mil", "role": "admin", "active": true})",
          R"({"name":"Linus","age":54,"email":"torvalds@linux-foundation.org","role":"viewer","active":false})",
          "{\n  \"name\": \"Margaret Hamilton\",\n  \"age\": 88,\n  \"email\": \"mh@example.com\",\n  \"role\": "
          "\"editor\",\n  \"active\": true\n}"}});
    v.push_back(
        {"nested",
         schema(
             R"({"$defs":{"item":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
        "qty":{"type":"integer","minimum":1},"price":{"type":"number","minimum":0}},"required":["sku","qty","price"],"additionalProperties":false}},
        "type":"object","properties":{"id":{"type":"string","format":"uuid"},"items":{"type":"array","items":{"$ref":"#/$defs/item"},"minItems":1},
        "created":{"type":"string","format":"date-time"},"notes":{"type":["string","null"]}},"required":["id","items","created","notes"],"additionalProperties":false})"),
         {R"({"id": "3f2b8c1e-9d4a-4b7e-8f21-6a5c0d9e7b13", "items": [{"sku": "ABC-1234", "qty": 2, "price": 9.99}, {"sku": "XYZ-0001", "qty": 1, "price": 120}], "created": "2024-06-01T12:30:00Z", "notes": "leave at the door"})",
          R"({"id":"00000000-0000-4000-8000-000000000000","items":[{"sku":"QQQ-9999","qty":10,"price":0.5}],"created":"2023-12-31T23:59:59+01:00","notes":null})"}});
    v.push_back(
        {"tool_call",
         schema(R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",
        "properties":{"location":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},
        "required":["location","unit","days"],"additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false})"),
         {R"({"name": "get_weather", "arguments": {"location": "San Francisco, CA", "unit": "fahrenheit", "days": 3}})",
          R"({"name":"get_weather","arguments":{"location":"Zürich","unit":"celsius","days":14}})"}});
    v.push_back(
        {"recursive",
         schema(
             R"({"$defs":{"node":{"type":"object","properties":{"text":{"type":"string"},"replies":{"type":"array","items":{"$ref":"#/$defs/node"}}},
        "required":["text","replies"],"additionalProperties":false}},"$ref":"#/$defs/node"})"),
         {R"({"text": "root", "replies": [{"text": "a", "replies": [{"text": "a1", "replies": []}]}, {"text": "b", "replies": []}]})",
          R"({"text":"only","replies":[]})"}});
    Constraint re;
    re.kind = Constraint::Kind::Regex;
    re.text = R"(\+?[0-9]{1,3}[ -]?\(?[0-9]{3}\)?[ -]?[0-9]{3}[ -]?[0-9]{4})";
    v.push_back({"regex_phone", re, {"+1 (415) 555-0132", "044-123-456-7890"}});
    return v;
}

double pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
    return v[k];
}

// One pass over every output: mask times in microseconds; exits on a disallowed token.
std::vector<double> run_pass(const std::shared_ptr<const TokenAutomaton>& a,
                             const std::vector<std::vector<int32_t>>& outputs, int32_t eog, const char* name) {
    std::vector<double> t;
    std::vector<uint32_t> mask(a->vocab().mask_words());
    for (const auto& toks : outputs) {
        Matcher m(a);
        for (size_t k = 0; k <= toks.size(); ++k) {
            const int32_t tok = k < toks.size() ? toks[k] : eog;
            const auto t0 = Clock::now();
            m.fill_mask(mask);
            t.push_back(us_since(t0));
            if (!(mask[static_cast<size_t>(tok) >> 5] >> (tok & 31) & 1u) || !m.advance(tok)) {
                std::fprintf(stderr, "%s: token %d (step %zu) is not allowed\n", name, tok, k);
                std::exit(1);
            }
        }
    }
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    std::string vocab_path;
    std::vector<std::string> extra;
    long n_vocab = -1;
    int runs = 20;
    int rounds = 5;
    std::string only;
    for (int k = 1; k < argc; ++k) {
        const std::string a = argv[k];
        auto next = [&]() -> std::string {
            if (k + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++k];
        };
        if (a == "--vocab") vocab_path = next();
        else if (a == "--extra") extra.push_back(next());
        else if (a == "--n-vocab") n_vocab = std::stol(next());
        else if (a == "--runs") runs = std::stoi(next());
        else if (a == "--only") only = next();
        else if (a == "--rounds") rounds = std::stoi(next());
        else {
            std::fprintf(stderr,
                         "usage: loom-bench-grammar --vocab A.gguf [--extra B.gguf ...] [--n-vocab N] [--runs R] "
                         "[--rounds N] [--only NAME]\n");
            return 2;
        }
    }
    if (vocab_path.empty()) {
        std::fprintf(stderr,
                     "usage: loom-bench-grammar --vocab A.gguf [--extra B.gguf ...] [--n-vocab N] [--runs R] [--rounds "
                     "N] [--only NAME]\n");
        return 2;
    }
    const auto tok = loom::model::Tokenizer::from_gguf(loom::model::GgufFile::open(vocab_path));
    std::vector<std::string> bytes;
    std::set<std::string> seen;
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
        bytes.push_back(tok->token_bytes(id));
        seen.insert(bytes.back());
    }
    for (const std::string& path : extra) {
        const auto t2 = loom::model::Tokenizer::from_gguf(loom::model::GgufFile::open(path));
        for (int32_t id = 0; id < t2->n_vocab() && (n_vocab < 0 || static_cast<long>(bytes.size()) < n_vocab); ++id) {
            const std::string& b = t2->token_bytes(id);
            if (!b.empty() && seen.insert(b).second) bytes.push_back(b);
        }
    }
    if (n_vocab > 0 && static_cast<long>(bytes.size()) > n_vocab) bytes.resize(static_cast<size_t>(n_vocab));
    std::vector<int32_t> eog(tok->vocab().eog.begin(), tok->vocab().eog.end());
    if (eog.empty()) {
        std::fprintf(stderr, "the vocabulary has no end-of-generation id\n");
        return 1;
    }
    auto t0 = Clock::now();
    auto vocab = std::make_shared<const VocabBytes>(bytes, eog);
    std::printf("vocabulary: %zu tokens (%zu trie nodes), built in %.1f ms\n\n", bytes.size(), vocab->trie().n_nodes(),
                us_since(t0) / 1000);
    std::printf(
        "| constraint | compile ms | states | cold median / p99 / max us | warm median / p99 us | tokens | precompute "
        "ms |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const Case& c : cases()) {
        if (!only.empty() && only != c.name) continue;
        std::vector<double> compile_ms;
        Grammar g = compile(c.c);
        for (int k = 0; k < 5; ++k) {
            t0 = Clock::now();
            g = compile(c.c);
            compile_ms.push_back(us_since(t0) / 1000);
        }
        std::vector<std::vector<int32_t>> outputs;
        size_t n_tok = 0;
        for (const std::string& o : c.outputs) {
            outputs.push_back(tok->encode(o, false, false));
            n_tok += outputs.back().size() + 1;
        }
        // The machine may be shared: every figure is the best of `rounds` independent rounds
        // (a fresh automaton each), so that other processes disturb it least.
        double cold_med = 1e300, cold_p99 = 1e300, cold_max = 1e300, warm_med = 1e300, warm_p99 = 1e300, pre_ms = 1e300;
        for (int round = 0; round < rounds; ++round) {
            auto a = std::make_shared<const TokenAutomaton>(g, vocab);
            const std::vector<double> cold = run_pass(a, outputs, eog[0], c.name);
            std::vector<double> warm;
            for (int r = 0; r < runs; ++r) {
                auto w = run_pass(a, outputs, eog[0], c.name);
                warm.insert(warm.end(), w.begin(), w.end());
            }
            cold_med = std::min(cold_med, pct(cold, 0.5));
            cold_p99 = std::min(cold_p99, pct(cold, 0.99));
            cold_max = std::min(cold_max, pct(cold, 1.0));
            warm_med = std::min(warm_med, pct(warm, 0.5));
            warm_p99 = std::min(warm_p99, pct(warm, 0.99));
            auto fresh = std::make_shared<const TokenAutomaton>(g, vocab);
            t0 = Clock::now();
            fresh->precompute();
            pre_ms = std::min(pre_ms, us_since(t0) / 1000);
        }
        std::printf("| %s | %.2f | %zu | %.1f / %.0f / %.0f | %.2f / %.1f | %zu | %.0f |\n", c.name,
                    *std::min_element(compile_ms.begin(), compile_ms.end()), g.n_states(), cold_med, cold_p99, cold_max,
                    warm_med, warm_p99, n_tok, pre_ms);
    }
    return 0;
}
