// Helpers for the tool-call and reasoning parser tests: recorded assistant turns
// rendered through the real chat templates in shared/models/templates (with loom's
// Jinja renderer), and a runner that feeds a parser its text in any pieces.
#pragma once

#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "gateway/chat_prompt.hpp"
#include "gateway/output_split.hpp"
#include "gateway/span_parser.hpp"

namespace loom::test {

/// The text of shared/models/templates/<file>.
inline std::string template_text(const std::string& file) {
    std::ifstream f(std::string(LOOM_SHARED_DIR) + "/models/templates/" + file, std::ios::binary);
    REQUIRE(f.good());
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

/// Renders `messages_json` (and `tools_json`, "" for none) through template `file`
/// with bos/eos texts and chat_template_kwargs `kwargs_json` ("" for none).
inline std::string render(const std::string& file, const std::string& messages_json, const std::string& tools_json,
                          bool add_generation_prompt, const std::string& bos, const std::string& eos,
                          const std::string& kwargs_json = "") {
    model::Vocab v;
    v.tokens = {"<unk>", bos, eos};
    v.bos = 1;
    v.eos = 2;
    v.chat_template = template_text(file);
    gateway::ChatRenderer r(v);
    rapidjson::Document m, t, k;
    m.Parse(messages_json.c_str());
    REQUIRE_FALSE(m.HasParseError());
    if (!tools_json.empty()) {
        t.Parse(tools_json.c_str());
        REQUIRE_FALSE(t.HasParseError());
    }
    if (!kwargs_json.empty()) {
        k.Parse(kwargs_json.c_str());
        REQUIRE_FALSE(k.HasParseError());
    }
    return r.render(m, tools_json.empty() ? nullptr : &t, add_generation_prompt, kwargs_json.empty() ? nullptr : &k);
}

/// The text between the last `begin` before the last `end` and that `end`: an
/// assistant turn as its template renders it, i.e. what the model writes.
inline std::string between(const std::string& full, const std::string& begin, const std::string& end) {
    const size_t e = full.rfind(end);
    REQUIRE(e != std::string::npos);
    const size_t b = full.rfind(begin, e);
    REQUIRE(b != std::string::npos);
    return full.substr(b + begin.size(), e - b - begin.size());
}

/// A parsed output, from the spans: each part's text, the calls, and one label per
/// byte (c content, r reasoning, m marker, n name, a arguments, then the call index).
struct Parsed {
    struct Call {
        std::string name, name_text, arguments;
    };
    std::string content, reasoning, labels;
    std::vector<Call> calls;
};

/// The call a Name or Arguments span belongs to; REQUIREs that its CallStart came first.
inline Parsed::Call& started_call(Parsed& p, const gateway::Span& s) {
    REQUIRE(s.call >= 0);
    REQUIRE(s.call < static_cast<int>(p.calls.size()));
    return p.calls[static_cast<size_t>(s.call)];
}

inline Parsed collect(const std::string& text, const std::vector<gateway::Span>& spans) {
    using gateway::Part;
    Parsed p;
    size_t at = 0;
    for (const auto& s : spans) {
        if (s.part == Part::CallStart) {
            REQUIRE(s.call == static_cast<int>(p.calls.size()));
            p.calls.push_back({s.name, "", ""});
            continue;
        }
        REQUIRE(at + s.len <= text.size());
        const std::string piece = text.substr(at, s.len);
        char label = 'm';
        switch (s.part) {
            case Part::Content:
                p.content += piece;
                label = 'c';
                break;
            case Part::Reasoning:
                p.reasoning += piece;
                label = 'r';
                break;
            case Part::Name:
                started_call(p, s).name_text += piece;
                label = 'n';
                break;
            case Part::Arguments:
                started_call(p, s).arguments += piece;
                label = 'a';
                break;
            default: break;
        }
        for (size_t i = 0; i < s.len; ++i) {
            p.labels += label;
            if (label == 'n' || label == 'a') p.labels += static_cast<char>('0' + s.call);
        }
        at += s.len;
    }
    REQUIRE(at == text.size());  // spans cover the text exactly
    return p;
}

/// Runs a fresh parser from `make` over `text` fed in pieces cut at `cuts`, then ends it
/// (`by_length`: as max_tokens ends it, SpanParser::feed's `cut`).
template <class Make>
Parsed run_cut(Make make, const std::string& text, std::vector<size_t> cuts, bool by_length = false) {
    std::unique_ptr<gateway::SpanParser> p = make();
    std::vector<gateway::Span> spans;
    size_t at = 0;
    cuts.push_back(text.size());
    for (size_t c : cuts) {
        p->feed(std::string_view(text).substr(at, c - at), false, spans);
        at = c;
    }
    p->feed({}, true, spans, by_length);
    return collect(text, spans);
}

/// Parses `text` whole, and again byte by byte and in random pieces; requires the
/// three to decide every byte alike; returns the whole-text result. `by_length`: the
/// output ends as max_tokens ends it.
template <class Make>
Parsed parse_all_ways(Make make, const std::string& text, bool by_length = false) {
    const Parsed whole = run_cut(make, text, {}, by_length);
    std::vector<size_t> bytes;
    for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
    const Parsed by_byte = run_cut(make, text, bytes, by_length);
    CHECK(by_byte.labels == whole.labels);
    std::mt19937 rng(12345);
    for (int round = 0; round < 4; ++round) {
        std::vector<size_t> cuts;
        for (size_t i = 1; i < text.size(); ++i)
            if (rng() % 5 == 0) cuts.push_back(i);
        const Parsed random = run_cut(make, text, cuts, by_length);
        CHECK(random.labels == whole.labels);
        REQUIRE(random.calls.size() == whole.calls.size());
        for (size_t i = 0; i < whole.calls.size(); ++i) CHECK(random.calls[i].name == whole.calls[i].name);
    }
    for (const auto& c : whole.calls)
        if (!c.name_text.empty()) CHECK(c.name == c.name_text);
    return whole;
}

/// A parser factory for OutputOptions `o`.
inline auto maker(gateway::OutputOptions o) {
    return [o] { return gateway::make_output_parser(o); };
}

inline gateway::OutputOptions tools_of(gateway::ToolFamily f, bool parallel = true) {
    gateway::OutputOptions o;
    o.tools = f;
    o.calls = true;
    o.parallel = parallel;
    return o;
}

}  // namespace loom::test
