// The CPU engine on the shared random-weight models of architectures beyond the llama
// family, against their float64 references (shared/reference64/arch/<model>.json, an
// independent float64 pass; its README lists where implementations go wrong), teacher forced:
// the prompt is evaluated with prompt logprobs, then each reference greedy token is fed in
// turn, so that every position of the run is compared with the reference's own history:
//   - every prompt position's logprob of the prompt token, and every step's logprob of the
//     reference's greedy token, within 1e-4;
//   - the top 20 at every position (prompt and steps): a token in both lists within 1e-4, a
//     token in only one list within 1e-4 of the other list's 20th (ties at the cut);
//   - the engine's greedy token equals the reference's at every step (every reference gap is
//     at least 1.9e-3, so no position is a near-tie).
// An F32 engine agrees with these references to about 1e-5 (reference64/README.md).
#include <catch2/catch.hpp>

#include <rapidjson/document.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "backend_run.hpp"
#include "engine/backends/cpu/cpu_backend.hpp"
#include "test_paths.hpp"

using loom::test::shared_path;

namespace {

constexpr double kTol = 1e-4;

using Top = std::vector<std::pair<int32_t, double>>;

struct Position {
    int32_t id = -1;  // the scored token (prompt) or the greedy token (step)
    double logprob = 0;
    Top top;
};
struct Case {
    std::vector<int32_t> prompt_ids;
    std::vector<Position> prompt;  // positions 1 .. n-1
    std::vector<Position> steps;
};

Top read_top(const rapidjson::Value& v) {
    Top t;
    for (const auto& p : v.GetArray()) t.emplace_back(p[0].GetInt(), p[1].GetDouble());
    return t;
}

std::vector<Case> load(const std::string& rel) {
    std::ifstream in(shared_path(rel));
    REQUIRE(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    rapidjson::Document d;
    d.Parse(ss.str().c_str());
    REQUIRE(!d.HasParseError());
    std::vector<Case> out;
    for (const auto& c : d["cases"].GetArray()) {
        Case k;
        for (const auto& v : c["prompt_ids"].GetArray()) k.prompt_ids.push_back(v.GetInt());
        for (const auto& s : c["prompt_scores"].GetArray())
            k.prompt.push_back({s["id"].GetInt(), s["logprob"].GetDouble(), read_top(s["top"])});
        for (const auto& s : c["steps"].GetArray())
            k.steps.push_back({s["id"].GetInt(), s["logprob"].GetDouble(), read_top(s["top"])});
        out.push_back(std::move(k));
    }
    return out;
}

// Compares one position; returns the largest |logprob difference| seen there.
double compare(const Position& want, const loom::engine::SampleResult& got) {
    double worst = std::abs(got.logprob - want.logprob);
    INFO("token " << want.id << ": loom " << got.logprob << ", reference " << want.logprob);
    CHECK(worst <= kTol);
    REQUIRE(got.top.size() == want.top.size());
    std::map<int32_t, double> mine, theirs(want.top.begin(), want.top.end());
    for (const auto& [id, lp] : got.top) mine[id] = lp;
    const double my_last = got.top.back().second, their_last = want.top.back().second;
    for (const auto& [id, lp] : want.top) {
        if (auto it = mine.find(id); it != mine.end()) {
            worst = std::max(worst, std::abs(it->second - lp));
            INFO("top-20 token " << id << ": loom " << it->second << ", reference " << lp);
            CHECK(std::abs(it->second - lp) <= kTol);
        } else {
            INFO("reference top-20 token " << id << " (" << lp << ") is not in loom's");
            CHECK(lp <= my_last + kTol);
        }
    }
    for (const auto& [id, lp] : got.top)
        if (!theirs.count(id)) {
            INFO("loom's top-20 token " << id << " (" << lp << ") is not in the reference's");
            CHECK(lp <= their_last + kTol);
        }
    return worst;
}

// Runs every case of reference `ref` on model `model` with the CPU engine at context `n_ctx`.
void check_arch(const std::string& model, const std::string& ref, int32_t n_ctx = 0) {
    const auto cases = load("reference64/arch/" + ref);
    auto backend = loom::cpu::make_cpu_backend(shared_path("models/arch/" + model), {2, n_ctx});
    loom::engine::SamplingParams sp;
    sp.temperature = 0;
    sp.n_logprobs = 20;
    double worst = 0;
    int positions = 0;
    for (size_t c = 0; c < cases.size(); ++c) {
        const Case& k = cases[c];
        INFO(model << " case " << c);
        loom::test::OneSequence seq(*backend, sp, k.prompt_ids);
        std::vector<loom::engine::SampleResult> scores;
        for (size_t s = 0; s < k.steps.size(); ++s) {
            INFO("step " << s);
            const auto got = s == 0 ? seq.eval(k.prompt_ids, true, 0.5, 20, &scores)
                                    : seq.eval(std::vector<int32_t>{k.steps[s - 1].id}, true, 0.5);
            if (s == 0) {
                REQUIRE(scores.size() == k.prompt.size());
                for (size_t i = 0; i < scores.size(); ++i) {
                    INFO("prompt position " << i + 1);
                    CHECK(scores[i].token == k.prompt[i].id);
                    worst = std::max(worst, compare(k.prompt[i], scores[i]));
                    ++positions;
                }
            }
            CHECK(got.token == k.steps[s].id);
            worst = std::max(worst, compare(k.steps[s], got));
            ++positions;
        }
    }
    std::printf("%-22s %-30s %4d positions, max |dlogprob| %.2e\n", model.c_str(), ref.c_str(), positions, worst);
    CHECK(positions >= 141);  // 3 cases: 21 prompt positions and 120 steps
}

}  // namespace

TEST_CASE("a declared sliding window is applied (llama-swa)") {
    check_arch("llama-swa-f32.gguf", "llama-swa-f32.json");
}

TEST_CASE("YaRN RoPE scaling, llama and qwen2") {
    check_arch("llama-yarn-f32.gguf", "llama-yarn-f32.json");
    check_arch("qwen2-yarn-f32.gguf", "qwen2-yarn-f32.json");
}

TEST_CASE("gemma2: soft-caps, GeGLU, pre and post norms, alternating windows") {
    check_arch("gemma2-f32.gguf", "gemma2-f32.json");
}

TEST_CASE("gemma3: q/k norms, 5 local : 1 global layers with their own RoPE") {
    check_arch("gemma3-f32.gguf", "gemma3-f32.json");
}

TEST_CASE("phi3: fused QKV and gate/up; LongRoPE short factors up to the original context, long above") {
    check_arch("phi3-f32.gguf", "phi3-f32.json", 4096);
    check_arch("phi3-f32.gguf", "variants/phi3-f32-longrope.json", 8192);
}

TEST_CASE("qwen3moe: 8 experts, top 2 renormalised, q/k norms (F32 and Q8_0)") {
    check_arch("qwen3moe-f32.gguf", "qwen3moe-f32.json");
    check_arch("qwen3moe-q8_0.gguf", "qwen3moe-q8_0.json");
}

TEST_CASE("llama with experts (Mixtral): softmax over 4 experts, top 2 renormalised (F32 and Q8_0)") {
    check_arch("llama-moe-f32.gguf", "llama-moe-f32.json");
    check_arch("llama-moe-q8_0.gguf", "llama-moe-q8_0.json");
}

TEST_CASE("gpt-oss: attention sinks, alternating windows, YaRN, top-k-then-softmax routing, clamped SwiGLU, MXFP4") {
    check_arch("gpt-oss-f32.gguf", "gpt-oss-f32.json");
    check_arch("gpt-oss-mxfp4.gguf", "gpt-oss-mxfp4.json");
}

TEST_CASE("a mixture's step is batch invariant: prompts batched together score as each alone, bit for bit") {
    // Three prompts of the reference in one step (their tokens grouped by expert across
    // sequences) against each prompt in a step of its own, on each mixture.
    for (const char* model : {"qwen3moe-q8_0.gguf", "llama-moe-f32.gguf", "gpt-oss-mxfp4.gguf"}) {
        INFO(model);
        const std::string ref = std::string(model).replace(std::string(model).find(".gguf"), 5, ".json");
        const auto cases = load("reference64/arch/" + ref);
        auto backend = loom::cpu::make_cpu_backend(shared_path("models/arch/" + std::string(model)), {2, 256});
        loom::engine::SamplingParams sp;
        sp.temperature = 0;
        std::vector<std::vector<loom::engine::SampleResult>> alone;
        for (const Case& k : cases) {
            loom::test::OneSequence seq(*backend, sp, k.prompt_ids);
            std::vector<loom::engine::SampleResult> scores;
            seq.eval(k.prompt_ids, false, 0.5, 5, &scores);
            alone.push_back(scores);
        }
        loom::engine::StepPlan plan;
        std::vector<std::vector<int32_t>> tables(cases.size());
        for (size_t c = 0; c < cases.size(); ++c) {
            backend->open_slot(static_cast<int32_t>(c), sp, cases[c].prompt_ids, {});
            for (int32_t b = 0; b < 16; ++b) tables[c].push_back(static_cast<int32_t>(c) * 16 + b);
            loom::engine::StepRow r;
            r.slot = static_cast<int32_t>(c);
            r.tokens = cases[c].prompt_ids;
            r.blocks = tables[c];
            r.prompt_k = 5;
            r.targets = std::span<const int32_t>(cases[c].prompt_ids).subspan(1);
            plan.rows.push_back(r);
        }
        loom::engine::StepOutput out;
        backend->step(plan, out);
        for (size_t c = 0; c < cases.size(); ++c) {
            backend->close_slot(static_cast<int32_t>(c));
            REQUIRE(out.prompt_scores.at(c).size() == alone[c].size());
            for (size_t i = 0; i < alone[c].size(); ++i) {
                INFO("case " << c << " position " << i + 1);
                CHECK(out.prompt_scores[c][i].logprob == alone[c][i].logprob);
                CHECK(out.prompt_scores[c][i].top == alone[c][i].top);
            }
        }
    }
}
