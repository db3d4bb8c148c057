// The scheduler against a fake backend (fake_backend.hpp): budget filling, chunked prefill,
// preemption and resume, prefix hits, cancellation, errors, and a property test of 10,000
// random request lifecycles. A request's lines must be byte-identical to those of the same
// request run alone, however it was batched, chunked, cached or preempted.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "engine/scheduler.hpp"
#include "fake_backend.hpp"

using loom::engine::Scheduler;
using loom::engine::SchedulerOptions;
using loom::engine::SeqRequest;
using loom::test::FakeBackend;
namespace proto = loom::protocol;

namespace {

SeqRequest req(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens, int logprobs = -1,
               std::optional<int> plp = std::nullopt) {
    SeqRequest r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.seed = std::hash<std::string>{}(id);
    r.params.n_logprobs = logprobs;
    r.prompt_logprobs = plp;
    r.ignore_eos = true;  // lengths below are exact; the eog test turns this off
    return r;
}

// "<c><i>" (spelled out: GCC 12 warns falsely on "s" + std::to_string(i), -Wrestrict).
std::string name(char c, int i) {
    std::string s(1, c);
    s += std::to_string(i);
    return s;
}

std::vector<int32_t> seq(int n, int base) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(3 + (base + i * 7) % 60);
    return v;
}

// Drives a scheduler over a fake backend and files every line under its request id.
struct Harness {
    FakeBackend backend;
    Scheduler sched;
    std::map<std::string, std::vector<std::string>> lines;
    std::map<std::string, int> terminal;  // DONE/ERR lines per id

    Harness(int64_t n_blocks, int32_t bt, int32_t n_ctx, SchedulerOptions o = {}, int32_t slots = 64)
        : backend(n_blocks, bt, n_ctx, slots), sched(backend, o) {}

    void file(const Scheduler::Lines& out) {
        for (const auto& l : out) {
            std::string text = proto::format(l);
            const auto sp1 = text.find(' '), sp2 = text.find(' ', sp1 + 1);
            const std::string id = text.substr(sp1 + 1, sp2 - sp1 - 1);
            if (text.rfind("DONE", 0) == 0 || text.rfind("ERR", 0) == 0) ++terminal[id];
            lines[id].push_back(std::move(text));
        }
    }
    void submit(SeqRequest r) {
        Scheduler::Lines out;
        sched.submit(std::move(r), out);
        file(out);
    }
    void cancel(const std::string& id) {
        Scheduler::Lines out;
        sched.cancel(id, out);
        file(out);
    }
    // One iteration; returns the plan's row count.
    size_t step() {
        Scheduler::Lines out;
        loom::engine::StepOutput res;
        const size_t n = sched.run_step(res, out);
        file(out);
        sched.kv_cache().check();
        REQUIRE(backend.open_slots() == sched.stats().running);
        return n;
    }
    void run() {
        for (int i = 0; i < 100000 && sched.has_work(); ++i) REQUIRE(step() > 0);
        REQUIRE_FALSE(sched.has_work());
    }
};

// The lines of `r` run alone on a roomy engine (cached_tokens stripped from DONE).
std::vector<std::string> alone(const SeqRequest& r, int32_t n_ctx = 256) {
    Harness h(1024, 4, n_ctx);
    h.submit(r);
    h.run();
    return h.lines[r.id];
}

std::vector<std::string> strip_cached(std::vector<std::string> v) {
    for (auto& l : v)
        if (auto p = l.find(" cached_tokens="); p != std::string::npos) l.erase(p);
    return v;
}

}  // namespace

TEST_CASE("a step fills its budget: decodes first, then prefill chunks first come first served") {
    Harness h(64, 4, 256, {8, 10});
    h.submit(req("a", seq(3, 1), 6));
    h.submit(req("b", seq(3, 2), 6));
    Scheduler::Lines out;
    {
        const auto& p = h.sched.schedule(out);
        REQUIRE(p.rows.size() == 2);
        CHECK(p.rows[0].tokens.size() == 3);
        CHECK(p.rows[0].sample);
        loom::engine::StepOutput res;
        h.backend.step(p, res);
        h.sched.complete(res, out);
    }
    h.file(out);
    h.submit(req("c", seq(20, 3), 2));
    h.submit(req("d", seq(5, 4), 2));
    std::vector<std::vector<size_t>> shapes;
    for (int i = 0; i < 3; ++i) {
        out.clear();
        const auto& p = h.sched.schedule(out);
        std::vector<size_t> shape;
        for (const auto& r : p.rows) shape.push_back(r.tokens.size());
        shapes.push_back(shape);
        if (i == 2) {
            CHECK(p.rows[2].sample);        // c's last chunk
            CHECK_FALSE(p.rows[3].sample);  // d's first
        } else {
            CHECK_FALSE(p.rows[2].sample);
        }
        loom::engine::StepOutput res;
        h.backend.step(p, res);
        h.sched.complete(res, out);
        h.file(out);
    }
    // a and b decode (1 each), c takes the rest of 10, then d starts in what c leaves.
    CHECK(shapes[0] == std::vector<size_t>{1, 1, 8});
    CHECK(shapes[1] == std::vector<size_t>{1, 1, 8});
    CHECK(shapes[2] == std::vector<size_t>{1, 1, 4, 4});
    h.run();
    for (const char* id : {"a", "b", "c", "d"}) {
        INFO(id);
        CHECK(h.terminal[id] == 1);
    }
    CHECK(h.lines["c"] == alone(req("c", seq(20, 3), 2)));
    CHECK(h.lines["d"] == alone(req("d", seq(5, 4), 2)));
}

TEST_CASE("no more sequences run than the budget has tokens, so every one decodes each step") {
    Harness h(256, 4, 256, {0, 6});
    CHECK(h.sched.max_running() == 6);
    CHECK(h.sched.max_batch_tokens() == 6);
    for (int i = 0; i < 10; ++i) h.submit(req(name('q', i), seq(1, i), 5));
    h.step();
    CHECK(h.sched.stats().running == 6);
    CHECK(h.sched.stats().waiting == 4);
    h.run();
    Harness big(256, 4, 256, {100, 5000});
    CHECK(big.sched.max_running() == 64);         // the fake backend's slots
    CHECK(big.sched.max_batch_tokens() == 4096);  // its max_step_tokens
}

TEST_CASE("a chunked prompt gives the lines of one pass, prompt logprobs included") {
    const auto r = req("p", seq(21, 5), 4, 2, 3);
    Harness h(64, 4, 256, {0, 8});
    h.submit(r);
    std::vector<size_t> chunks;
    Scheduler::Lines out;
    while (h.sched.has_work()) {
        out.clear();
        const auto& p = h.sched.schedule(out);
        for (const auto& row : p.rows) chunks.push_back(row.tokens.size());
        loom::engine::StepOutput res;
        h.backend.step(p, res);
        h.sched.complete(res, out);
        h.file(out);
    }
    CHECK(chunks == std::vector<size_t>{8, 8, 5, 1, 1, 1});
    const auto& got = h.lines["p"];
    REQUIRE(got.size() == 21 + 4 * 2 + 1);
    for (int i = 0; i < 21; ++i) CHECK(got[static_cast<size_t>(i)].rfind("PLP p " + std::to_string(i) + " ", 0) == 0);
    CHECK(got == alone(r));
    CHECK(got.back() == "DONE p length prompt_tokens=21 completion_tokens=4");
}

TEST_CASE("prompt-only requests, the end of the context and eog end with the right DONE") {
    Harness h(64, 4, 16);
    h.submit(req("zero", seq(5, 1), 0, -1, 0));
    h.submit(req("full", seq(16, 2), 4));
    h.submit(req("ctx", seq(10, 3), 100));
    h.run();
    const auto& zero = h.lines["zero"];
    REQUIRE(zero.size() == 6);
    CHECK(zero[0] == "PLP zero 0 -");
    for (int i = 1; i < 5; ++i)
        CHECK(zero[static_cast<size_t>(i)].rfind("PLP zero " + std::to_string(i) + " -", 0) == 0);
    CHECK(zero[5] == "DONE zero length prompt_tokens=5 completion_tokens=0");
    CHECK(h.lines["full"] == std::vector<std::string>{"DONE full length prompt_tokens=16 completion_tokens=0"});
    CHECK(h.lines["ctx"].back() == "DONE ctx length prompt_tokens=10 completion_tokens=6");
    // Some request meets eog (id 2) sooner or later; it is not sent as T.
    Harness e(256, 4, 256);
    for (int i = 0; i < 40; ++i) {
        auto r = req(name('s', i), seq(3, i), 60);
        r.ignore_eos = false;
        e.submit(r);
    }
    e.run();
    int stops = 0;
    for (const auto& [id, ls] : e.lines) {
        if (ls.back().find(" stop ") == std::string::npos) continue;
        ++stops;
        for (const auto& l : ls) CHECK(l != "T " + id + " 2");
    }
    CHECK(stops > 0);
}

TEST_CASE("preempted requests resume with the lines they would have had") {
    // 8 blocks of 4 tokens: three requests of 6 + 12 tokens cannot all hold their blocks.
    Harness h(8, 4, 32);
    std::vector<SeqRequest> rs = {req("x", seq(6, 1), 12, 3), req("y", seq(6, 2), 12, -1, 2),
                                  req("z", seq(6, 3), 12, 0)};
    rs[1].params.temperature = 0.7f;
    for (const auto& r : rs) h.submit(r);
    h.run();
    CHECK(h.sched.stats().preemptions > 0);
    for (const auto& r : rs) {
        INFO(r.id);
        CHECK(strip_cached(h.lines[r.id]) == alone(r));
        CHECK(h.terminal[r.id] == 1);
    }
    CHECK(h.sched.stats().kv.used_blocks == 0);
}

TEST_CASE("preemption in the middle of a chunked prompt with prompt logprobs sends no PLP twice") {
    Harness h(10, 4, 40, {0, 6});
    const auto a = req("a", seq(12, 1), 27), b = req("b", seq(24, 2), 3, 1, 1);
    h.submit(a);
    h.submit(b);
    h.run();
    CHECK(h.sched.stats().preemptions > 0);
    CHECK(strip_cached(h.lines["a"]) == alone(a, 40));
    CHECK(strip_cached(h.lines["b"]) == alone(b, 40));
}

TEST_CASE("a request sharing a cached prefix reuses its blocks and reports cached_tokens") {
    Harness h(64, 4, 256);
    const auto base = seq(14, 9);
    h.submit(req("a", base, 3));
    h.run();
    auto pb = std::vector<int32_t>(base.begin(), base.begin() + 12);
    for (int t : seq(5, 30)) pb.push_back(t);
    const auto b = req("b", pb, 3, 2);
    h.submit(b);
    h.run();
    CHECK(h.lines["b"].back() == "DONE b length prompt_tokens=17 completion_tokens=3 cached_tokens=12");
    CHECK(strip_cached(h.lines["b"]) == alone(b));
    // The whole prompt cached: the last block is computed again (its logits are needed).
    const auto c = req("c", std::vector<int32_t>(base.begin(), base.begin() + 12), 2);
    h.submit(c);
    h.run();
    CHECK(h.lines["c"].back() == "DONE c length prompt_tokens=12 completion_tokens=2 cached_tokens=8");
    CHECK(strip_cached(h.lines["c"]) == alone(c));
    // Prompt logprobs need every position: no reuse, every PLP line.
    const auto d = req("d", base, 1, -1, 2);
    h.submit(d);
    h.run();
    CHECK(h.lines["d"].back() == "DONE d length prompt_tokens=14 completion_tokens=1");
    CHECK(h.lines["d"] == alone(d));
    const auto s = h.sched.stats();
    CHECK(s.prefix_query_tokens == 14 + 17 + 12);  // d did not look
    CHECK(s.prefix_hit_tokens == 20);
}

TEST_CASE("cancel ends a request at once and frees its blocks") {
    Harness h(64, 4, 256, {1, 64});
    h.submit(req("run", seq(9, 1), 50));
    h.submit(req("wait", seq(9, 2), 50));
    h.step();
    h.step();
    CHECK(h.sched.stats().kv.used_blocks > 0);
    h.cancel("run");
    CHECK(h.lines["run"].back() == "DONE run cancelled prompt_tokens=9 completion_tokens=2");
    CHECK(h.sched.stats().kv.used_blocks == 0);
    CHECK(h.backend.open_slots() == 0);
    h.cancel("wait");
    CHECK(h.lines["wait"] == std::vector<std::string>{"DONE wait cancelled prompt_tokens=9 completion_tokens=0"});
    h.cancel("wait");  // already ended: ignored
    h.cancel("never");
    CHECK(h.lines["wait"].size() == 1);
    CHECK(h.lines.count("never") == 0);
    CHECK_FALSE(h.sched.has_work());
}

TEST_CASE("a failing row ends only its request; a failing step ends the requests in it") {
    Harness h(64, 4, 256);
    h.backend.nan_token = 63;
    h.submit(req("ok", seq(4, 1), 5));
    h.submit(req("bad", {5, 63, 7}, 5));
    h.run();
    CHECK(h.lines["bad"] == std::vector<std::string>{"ERR bad sampling failed: the model produced NaN logits"});
    CHECK(h.lines["ok"] == alone(req("ok", seq(4, 1), 5)));

    Harness t(64, 4, 256, {1, 64});
    t.submit(req("first", seq(4, 1), 5));
    t.submit(req("second", seq(4, 2), 5));
    t.backend.throw_next = true;
    t.step();
    CHECK(t.lines["first"] == std::vector<std::string>{"ERR first request failed: device lost"});
    CHECK(t.sched.stats().kv.used_blocks == 0);
    t.run();
    CHECK(t.lines["second"] == alone(req("second", seq(4, 2), 5)));
}

TEST_CASE("invalid requests get ERR at submit") {
    Harness h(4, 4, 256);
    h.submit(req("a", {1, 64}, 1));
    auto r = req("b", {1}, 1);
    r.params.allowed = {1, 99};
    h.submit(r);
    r = req("c", {1}, 1);
    r.params.logit_bias = {{-1, 1.0f}};
    h.submit(r);
    h.submit(req("d", seq(17, 1), 1));  // the pool holds 16 tokens, so the context is 16
    h.submit(req("e", {1}, 1));
    h.submit(req("e", {1}, 1));
    CHECK(h.lines["a"] == std::vector<std::string>{"ERR a prompt token id out of range 0..63"});
    CHECK(h.lines["b"] == std::vector<std::string>{"ERR b allowed token id out of range 0..63"});
    CHECK(h.lines["c"] == std::vector<std::string>{"ERR c logit_bias token id out of range"});
    CHECK(h.lines["d"] == std::vector<std::string>{"ERR d prompt of 17 tokens exceeds the context of 16"});
    CHECK(h.lines["e"] == std::vector<std::string>{"ERR e request id is already in use"});
    h.run();
    CHECK(h.terminal["e"] == 2);
}

TEST_CASE("10,000 random request lifecycles end with every block free and lines as if alone") {
    std::mt19937 rng(20261201);
    constexpr int32_t kCtx = 96;
    Harness h(40, 4, kCtx, {12, 24}, 16);
    std::map<std::string, SeqRequest> sent;
    std::vector<std::string> live;
    std::vector<std::vector<int32_t>> families;
    for (int f = 0; f < 4; ++f) families.push_back(seq(40, 11 * f + 1));
    int next = 0, cancelled = 0;
    while (next < 10000 || h.sched.has_work()) {
        // Arrivals: 0-3 per step while requests remain.
        for (int k = static_cast<int>(rng() % 4); k > 0 && next < 10000; --k) {
            std::vector<int32_t> prompt;
            const int n = 1 + static_cast<int>(rng() % 40);
            const auto& fam = families[rng() % families.size()];
            const int shared = static_cast<int>(rng() % 41);
            for (int i = 0; i < n; ++i)
                prompt.push_back(i < shared ? fam[static_cast<size_t>(i)] : 3 + static_cast<int32_t>(rng() % 60));
            const int64_t max_tokens = static_cast<int64_t>(rng() % 30);
            const int lp = static_cast<int>(rng() % 3) - 1;
            std::optional<int> plp;
            if (rng() % 8 == 0) plp = static_cast<int>(rng() % 2);
            auto r = req(name('r', next++), prompt, max_tokens, lp, plp);
            r.ignore_eos = rng() % 2 == 0;
            if (rng() % 3 == 0) r.params.temperature = 0.5f;
            sent[r.id] = r;
            live.push_back(r.id);
            h.submit(r);
        }
        // Cancels: now and then, a live request (waiting, running or preempted).
        if (next % 64 == 0)
            live.erase(std::remove_if(live.begin(), live.end(),
                                      [&](const std::string& id) { return h.terminal.count(id) > 0; }),
                       live.end());
        if (!live.empty() && rng() % 6 == 0) {
            const size_t i = rng() % live.size();
            if (!h.terminal.count(live[i])) ++cancelled;
            h.cancel(live[i]);
            live.erase(live.begin() + static_cast<ptrdiff_t>(i));
        }
        if (h.sched.has_work()) REQUIRE(h.step() > 0);
    }
    const auto s = h.sched.stats();
    CHECK(s.kv.used_blocks == 0);
    CHECK(h.sched.kv_cache().free_blocks() == 40);
    CHECK(h.backend.open_slots() == 0);
    CHECK(s.preemptions > 100);
    CHECK(s.prefix_hit_tokens > 1000);
    CHECK(cancelled > 100);
    int compared = 0;
    for (const auto& [id, r] : sent) {
        INFO(id);
        REQUIRE(h.terminal[id] == 1);
        const auto& got = h.lines[id];
        if (got.back().find(" cancelled ") != std::string::npos) continue;
        if (std::stoi(id.substr(1)) % 20 != 0) continue;  // every 20th against a run alone
        CHECK(strip_cached(got) == alone(r, kCtx));
        ++compared;
    }
    CHECK(compared > 300);
}
