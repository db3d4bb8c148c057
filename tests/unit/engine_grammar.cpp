// Grammar-constrained decoding in the engine: the sampler's token mask (raw logprobs stay the
// model's, processed ones renormalise over the allowed set), and the scheduler with the real
// CPU backend on stories260K (masks each draw, advances the matcher, ends with `stop` when the
// grammar allows nothing more, ERR for a grammar that does not compile, no effect on requests
// without one), and the order of a two-phase step: the masks are written after begin_step and
// before finish_step. docs/protocol.md, "Grammars".
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>

#include <rapidjson/document.h>

#include "engine/backends/cpu/cpu_backend.hpp"
#include "engine/sampler.hpp"
#include "engine/scheduler.hpp"
#include "engine/serve.hpp"
#include "grammar/compile.hpp"
#include "grammar/matcher.hpp"
#include "test_paths.hpp"

using namespace loom;
namespace proto = loom::protocol;

namespace {

std::vector<uint32_t> mask_of(std::initializer_list<int32_t> ids, int32_t n_vocab) {
    std::vector<uint32_t> m(static_cast<size_t>((n_vocab + 31) / 32), 0);
    for (int32_t id : ids) m[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    return m;
}

std::vector<float> random_logits(int32_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(rng);
    return v;
}

double log_softmax(const std::vector<float>& logits, int32_t id, const std::vector<int32_t>& over) {
    double m = -INFINITY, s = 0;
    for (int32_t i : over) m = std::max(m, static_cast<double>(logits[static_cast<size_t>(i)]));
    for (int32_t i : over) s += std::exp(static_cast<double>(logits[static_cast<size_t>(i)]) - m);
    return logits[static_cast<size_t>(id)] - m - std::log(s);
}

}  // namespace

TEST_CASE("a token mask: raw logprobs over the vocabulary, processed over the allowed set", "[engine][grammar]") {
    const int32_t n = 70;
    const auto logits = random_logits(n, 5);
    std::vector<int32_t> all(n), allowed = {3, 17, 40, 64, 69};
    for (int32_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
    const auto mask = mask_of({3, 17, 40, 64, 69}, n);
    engine::SamplerScratch scratch;
    engine::TokenHistory h;
    engine::SamplingParams p;
    p.n_logprobs = 8;

    for (double u : {0.0, 0.3, 0.7, 0.999}) {
        const auto raw = engine::sample_logits(logits, p, h, u, scratch, mask);
        CHECK(std::count(allowed.begin(), allowed.end(), raw.token) == 1);
        CHECK(raw.logprob == Approx(log_softmax(logits, raw.token, all)).margin(1e-5));
        REQUIRE(raw.top.size() == 8);  // the model's top 8 over all 70, allowed or not
        int outside = 0;
        for (const auto& [id, lp] : raw.top) {
            CHECK(lp == Approx(log_softmax(logits, id, all)).margin(1e-5));
            outside += std::count(allowed.begin(), allowed.end(), id) == 0;
        }
        CHECK(outside > 0);

        p.processed_logprobs = true;
        const auto proc = engine::sample_logits(logits, p, h, u, scratch, mask);
        p.processed_logprobs = false;
        CHECK(proc.token == raw.token);  // the mode changes the values, not the draw
        CHECK(proc.logprob == Approx(log_softmax(logits, proc.token, allowed)).margin(1e-5));
        REQUIRE(proc.top.size() == 5);  // the whole allowed set
        double sum = 0;
        for (const auto& [id, lp] : proc.top) {
            CHECK(std::count(allowed.begin(), allowed.end(), id) == 1);
            sum += std::exp(static_cast<double>(lp));
        }
        CHECK(sum == Approx(1.0).margin(1e-6));
    }

    // Greedy: the argmax among the allowed ids.
    p.temperature = 0;
    int32_t best = allowed[0];
    for (int32_t id : allowed)
        if (logits[static_cast<size_t>(id)] > logits[static_cast<size_t>(best)]) best = id;
    CHECK(engine::sample_logits(logits, p, h, 0.5, scratch, mask).token == best);

    // With `allowed` too: only ids both allow; none left is an error, not a guess.
    p.allowed = {17, 18, 19};
    CHECK(engine::sample_logits(logits, p, h, 0.5, scratch, mask).token == 17);
    p.allowed = {18, 19};
    CHECK_THROWS_AS(engine::sample_logits(logits, p, h, 0.5, scratch, mask), std::runtime_error);
    p.allowed.clear();
    CHECK_THROWS_AS(engine::sample_logits(logits, p, h, 0.5, scratch, std::vector<uint32_t>(1, ~0u)),
                    std::invalid_argument);  // 32 bits for 70 ids

    // An empty mask is no mask: the same result, bit for bit.
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    for (double u : {0.1, 0.6}) {
        const auto a = engine::sample_logits(logits, p, h, u, scratch);
        const auto b = engine::sample_logits(logits, p, h, u, scratch, {});
        CHECK(a.token == b.token);
        CHECK(a.logprob == b.logprob);
        CHECK(a.top == b.top);
    }
}

namespace {

// The CPU backend on stories260K and a scheduler over it; run() steps until nothing is left
// and files every line under its request id.
struct Engine {
    std::unique_ptr<engine::Backend> backend =
        cpu::make_cpu_backend(test::shared_path("models/stories260K.gguf"),
                              {.threads = 1, .n_ctx = 512, .kv_tokens = 4096, .max_step_tokens = 64, .max_slots = 8});
    engine::Scheduler sched{*backend, {}};
    std::map<std::string, std::vector<proto::EngineLine>> lines;

    void file(engine::Scheduler::Lines& out) {
        for (auto& l : out) {
            const std::string id = std::visit(
                [](const auto& x) {
                    if constexpr (requires { x.id; }) return std::string(x.id);
                    else return std::string("-");
                },
                l);
            lines[id].push_back(std::move(l));
        }
        out.clear();
    }
    void run() {
        engine::Scheduler::Lines out;
        engine::StepOutput result;
        for (int guard = 0; sched.has_work() && guard < 10000; ++guard) {
            sched.run_step(result, out);
            file(out);
        }
        REQUIRE_FALSE(sched.has_work());
    }
    void submit(engine::SeqRequest r) {
        engine::Scheduler::Lines out;
        sched.submit(std::move(r), out);
        file(out);
    }
    // The text of request `id`'s T lines.
    std::string text(const std::string& id) const {
        std::string s;
        for (const auto& l : lines.at(id))
            if (const auto* t = std::get_if<proto::Token>(&l)) s += backend->info().vocab_bytes->bytes(t->token);
        return s;
    }
    const proto::EngineLine& last(const std::string& id) const { return lines.at(id).back(); }
};

engine::SeqRequest request(const std::string& id, std::optional<proto::GrammarSpec> g, uint64_t seed,
                           int64_t max_tokens = 300) {
    engine::SeqRequest r;
    r.id = id;
    r.prompt = {1, 403, 407, 261, 378};  // "Once upon a time"
    r.max_tokens = max_tokens;
    r.seed = seed;
    r.params.n_logprobs = 20;
    r.grammar = std::move(g);
    return r;
}

// "s<seed>" (spelled out: GCC 12 warns falsely on "s" + std::to_string(i), -Wrestrict).
std::string name(uint64_t seed) {
    std::string s(1, 's');
    s += std::to_string(seed);
    return s;
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},)"
                      R"("age":{"type":"integer","minimum":0,"maximum":99},"pet":{"enum":["cat","dog"]}},)"
                      R"("required":["name","age","pet"],"additionalProperties":false})";

}  // namespace

TEST_CASE("the CPU engine announces grammar and enforces it on stories260K", "[engine][grammar]") {
    Engine e;
    REQUIRE(e.backend->info().vocab_bytes);
    const auto caps = engine::make_hello(e.sched.info(), {}).caps;
    CHECK(std::count(caps.begin(), caps.end(), std::string(proto::cap::kGrammar)) == 1);

    const grammar::Grammar schema = grammar::compile_json_schema(kSchema);
    for (uint64_t seed = 0; seed < 6; ++seed) {
        auto r = request(name(seed), proto::GrammarSpec{proto::grammar_kind::kJsonSchema, kSchema}, seed);
        r.params.processed_logprobs = seed % 2 == 1;
        e.submit(std::move(r));
    }
    e.submit(request("free", std::nullopt, 42, 40));
    e.submit(request("choice", proto::GrammarSpec{proto::grammar_kind::kChoice, R"(["yes","no","a little fox"])"}, 9));
    auto ie = request("ignore_eos", proto::GrammarSpec{proto::grammar_kind::kRegex, "[0-9]{2,4}"}, 3);
    ie.ignore_eos = true;
    e.submit(std::move(ie));
    e.submit(request("bad", proto::GrammarSpec{proto::grammar_kind::kJsonSchema, R"({"patternProperties":{}})"}, 1));
    e.submit(request("kind", proto::GrammarSpec{"lark", "start: x"}, 1));
    e.run();

    int whole_sets = 0;
    for (uint64_t seed = 0; seed < 6; ++seed) {
        const std::string id = name(seed);
        const std::string text = e.text(id);
        INFO(id << ": " << text);
        const auto* done = std::get_if<proto::Done>(&e.last(id));
        REQUIRE(done);
        CHECK(done->finish == "stop");  // the closing '}' allows nothing more
        CHECK(schema.accepts(text));
        rapidjson::Document d;
        d.Parse(text.data(), text.size());
        REQUIRE_FALSE(d.HasParseError());
        CHECK(d["age"].GetInt() <= 99);
        const std::string nm = d["name"].GetString();
        CHECK(std::count_if(nm.begin(), nm.end(), [](char c) {
                  return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
              }) <= 10);    // code points
        if (seed % 2 == 1)  // processed: a list shorter than 20 is the whole allowed set
            for (const auto& l : e.lines.at(id))
                if (const auto* lp = std::get_if<proto::Logprobs>(&l); lp && lp->top.size() < 20) {
                    double sum = 0;
                    for (const auto& t : lp->top) sum += std::exp(static_cast<double>(t.second));
                    CHECK(sum == Approx(1.0).margin(1e-5));
                    ++whole_sets;
                }
    }
    CHECK(whole_sets > 10);

    const std::string choice = e.text("choice");
    CHECK((choice == "yes" || choice == "no" || choice == "a little fox"));
    CHECK(std::get<proto::Done>(e.last("choice")).finish == "stop");
    // ignore_eos: the end id is masked out, so the digits go on to the grammar's end.
    CHECK(e.text("ignore_eos").size() == 4);
    CHECK(std::get<proto::Done>(e.last("ignore_eos")).finish == "stop");

    const auto& bad = std::get<proto::Error>(e.last("bad"));
    CHECK(bad.message ==
          "grammar does not compile: schema, keyword 'patternProperties': keyword 'patternProperties' "
          "is not supported");
    CHECK(e.lines.at("bad").size() == 1);
    CHECK(std::get<proto::Error>(e.last("kind"))
              .message.find("grammar does not compile: constraint: unknown kind 'lark'") == 0);

    // The unconstrained request beside them got exactly what it gets alone.
    Engine alone;
    alone.submit(request("free", std::nullopt, 42, 40));
    alone.run();
    REQUIRE(alone.lines.at("free").size() == e.lines.at("free").size());
    for (size_t i = 0; i < alone.lines.at("free").size(); ++i)
        CHECK(proto::format(alone.lines.at("free")[i]) == proto::format(e.lines.at("free")[i]));
}

TEST_CASE("a reasoning block: free text to the close marker, then the grammar", "[engine][grammar]") {
    // stories260K writes a story after "Once upon a time"; with "." as the close marker its
    // first sentence is the free "reasoning" and the JSON follows (grammar_reasoning=,
    // docs/protocol.md). With "," as the open marker too, the block is optional; the model
    // opens it (", there was ...").
    Engine e;
    const grammar::Grammar schema = grammar::compile_json_schema(kSchema);
    for (uint64_t seed = 0; seed < 4; ++seed)
        e.submit(request(
            name(seed), proto::GrammarSpec{proto::grammar_kind::kJsonSchema, kSchema, seed % 2 ? "," : "", "."}, seed));
    e.run();
    for (uint64_t seed = 0; seed < 4; ++seed) {
        const std::string id = name(seed), text = e.text(id);
        INFO(id << ": " << text);
        REQUIRE(std::get_if<proto::Done>(&e.last(id)));
        CHECK(std::get<proto::Done>(e.last(id)).finish == "stop");
        grammar::Constraint c = grammar::Constraint::from_source(proto::grammar_kind::kJsonSchema, kSchema);
        c.reasoning = {seed % 2 ? "," : "", "."};
        CHECK(grammar::compile(c).accepts(text));
        const size_t close = text.find('.');
        REQUIRE(close != std::string::npos);
        CHECK(close > 5);  // words went by before the close marker
        const size_t json = text.find('{', close);
        REQUIRE(json != std::string::npos);
        CHECK(json - close <= 3);  // at most two whitespace bytes after the marker
        CHECK(schema.accepts(text.substr(json)));
    }
}

namespace {

// Wraps the CPU backend in the two-phase step and records, for every row with a mask, its
// words as begin_step saw them and as finish_step saw them; step() must never be called.
class MaskProbe final : public engine::Backend {
public:
    explicit MaskProbe(std::unique_ptr<engine::Backend> inner) : inner_(std::move(inner)) {}
    const engine::ModelInfo& info() const override { return inner_->info(); }
    const engine::KvGeometry& kv() const override { return inner_->kv(); }
    void open_slot(int32_t slot, const engine::SamplingParams& params, std::span<const int32_t> prompt,
                   std::span<const int32_t> output) override {
        inner_->open_slot(slot, params, prompt, output);
    }
    void close_slot(int32_t slot) override { inner_->close_slot(slot); }
    void step(const engine::StepPlan&, engine::StepOutput&) override { ++direct_steps; }
    void begin_step(const engine::StepPlan& plan) override {
        events.push_back('b');
        at_begin = masks(plan);
    }
    void finish_step(const engine::StepPlan& plan, engine::StepOutput& out) override {
        events.push_back('f');
        const auto now = masks(plan);
        REQUIRE(now.size() == at_begin.size());
        for (size_t i = 0; i < now.size(); ++i) seen.push_back({at_begin[i], now[i]});
        inner_->step(plan, out);
    }

    struct Seen {
        std::vector<uint32_t> begin, finish;  // one masked row's words at begin_step, at finish_step
    };
    std::vector<Seen> seen;  // masked rows in step order
    std::string events;      // 'b' per begin_step, 'f' per finish_step
    int direct_steps = 0;

private:
    static std::vector<std::vector<uint32_t>> masks(const engine::StepPlan& plan) {
        std::vector<std::vector<uint32_t>> m;
        for (const auto& r : plan.rows)
            if (!r.mask.empty()) m.emplace_back(r.mask.begin(), r.mask.end());
        return m;
    }
    std::unique_ptr<engine::Backend> inner_;
    std::vector<std::vector<uint32_t>> at_begin;
};

}  // namespace

TEST_CASE("the scheduler builds the masks after begin_step and before finish_step", "[engine][grammar]") {
    auto cpu =
        cpu::make_cpu_backend(test::shared_path("models/stories260K.gguf"),
                              {.threads = 1, .n_ctx = 512, .kv_tokens = 4096, .max_step_tokens = 64, .max_slots = 8});
    MaskProbe probe(std::move(cpu));
    engine::Scheduler sched{probe, {}};
    // Letters and digits in turn: each draw's mask differs from the one before.
    const proto::GrammarSpec spec{proto::grammar_kind::kRegex, "[a-z][0-9][a-z][0-9]"};
    engine::Scheduler::Lines out;
    auto g = request("g", spec, 3);
    g.ignore_eos = true;
    sched.submit(std::move(g), out);
    sched.submit(request("free", std::nullopt, 42, 6), out);
    engine::StepOutput result;
    std::vector<int32_t> tokens;  // g's output
    for (int guard = 0; sched.has_work() && guard < 100; ++guard) {
        sched.run_step(result, out);
        for (const auto& l : out)
            if (const auto* t = std::get_if<proto::Token>(&l); t && t->id == "g") tokens.push_back(t->token);
        out.clear();
    }
    REQUIRE_FALSE(sched.has_work());
    CHECK(probe.direct_steps == 0);
    REQUIRE(probe.events.size() >= 2);
    for (size_t i = 0; i < probe.events.size(); ++i) CHECK(probe.events[i] == (i % 2 == 0 ? 'b' : 'f'));

    // Masked row k is g's draw after k output tokens: at finish_step its words are the grammar's
    // mask there (end ids cleared), at begin_step still those of draw k - 1 (zeros before the first).
    REQUIRE(probe.seen.size() == tokens.size());
    REQUIRE(tokens.size() >= 2);
    engine::ConstraintCompiler compiler(probe.info().vocab_bytes);
    grammar::Matcher m(compiler.compile(spec));
    std::vector<uint32_t> want(m.mask_words(), 0), before(m.mask_words(), 0);
    int changed = 0;
    for (size_t k = 0; k < tokens.size(); ++k) {
        INFO("draw " << k);
        m.fill_mask(want);
        for (int32_t id : probe.info().eog) want[static_cast<size_t>(id) >> 5] &= ~(1u << (id & 31));
        CHECK(probe.seen[k].begin == before);
        CHECK(probe.seen[k].finish == want);
        changed += probe.seen[k].begin != probe.seen[k].finish;
        before = want;
        REQUIRE(m.advance(tokens[k]));
    }
    CHECK(m.is_done());
    CHECK(changed >= 2);  // the first draw (zeros) and at least one later one
}
