// The CPU engine against the independent float64 pass (models_f64.hpp) on random-weight
// files of the architectures and features beyond the llama family's core, written by
// loom-make-model: gemma2 and gemma3 (windowed local layers, soft-caps, post norms, GeGLU,
// gemma3's q/k norms and two RoPE bases with linear scaling), phi3 (fused projections,
// LongRoPE with the short and the long factors), and llama/qwen2 files that declare a
// sliding window or YaRN scaling. At every position of a 28-token run (a 14-token prompt
// scored in one step, then 14 tokens fed one at a time, decode): the logprob of the next token
// and the top 20 within 3e-5 of the float64 pass (forward_f64.cpp explains the bound for
// generated models). loom-make-model's small weights leave attention nearly uniform, so the
// window and YaRN are also checked on models_arch.hpp's files, where they change the float64
// logprobs by more than 1e-2 (so the comparison can see them). The mixtures of experts (qwen3moe,
// qwen2moe with its shared expert, Mixtral-style llama, gpt-oss in F32 and MXFP4, 8 to 16
// experts) are checked the same way.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "backend_run.hpp"
#include "engine/backends/cpu/cpu_backend.hpp"
#include "model/gguf/gguf.hpp"
#include "models_arch.hpp"
#include "models_f64.hpp"

using loom::model::GgufFile;
using loom::test::F64Model;

namespace {

constexpr double kTol = 3e-5;

// Largest |engine - float64| over every position's next-token logprob and top 20.
double engine_vs_f64(const std::string& path, int32_t n_ctx) {
    std::vector<int32_t> seq = {1};
    for (int32_t i = 0; i < 27; ++i) seq.push_back(300 + (i * 37) % 200);
    const size_t n_prompt = 14;
    const auto file = GgufFile::open(path);
    const auto want = F64Model(file, {}, n_ctx).run(seq, 1);  // row k: distribution of seq[k + 1]
    auto backend = loom::cpu::make_cpu_backend(path, {2, n_ctx});
    loom::engine::SamplingParams sp;
    sp.temperature = 0;
    sp.n_logprobs = 20;
    loom::test::OneSequence s(*backend, sp, std::span<const int32_t>(seq).first(n_prompt));
    std::vector<loom::engine::SampleResult> rows;
    s.eval(std::span<const int32_t>(seq).first(n_prompt), false, 0.5, 20, &rows);
    for (size_t i = n_prompt; i < seq.size(); ++i) {
        auto r = s.eval(std::span<const int32_t>(seq).subspan(i, 1), true, 0.5);
        // The sampled row gives the top 20; its logprob is of the greedy token, so take seq[i+1]'s.
        if (i + 1 < seq.size()) {
            const auto it = std::find_if(r.top.begin(), r.top.end(), [&](auto& p) { return p.first == seq[i + 1]; });
            r.token = seq[i + 1];
            r.logprob = it != r.top.end() ? it->second : NAN;
        }
        rows.push_back(std::move(r));
    }
    // Prompt rows 0..12 score seq[1..13]; decode row j (fed seq[14 + j]) predicts seq[15 + j].
    double worst = 0;
    REQUIRE(rows.size() == seq.size() - 1);
    for (size_t k = 0; k < rows.size(); ++k) {
        const auto& row = want[k < n_prompt - 1 ? k : k + 1];
        REQUIRE(rows[k].top.size() == 20);
        for (const auto& [id, lp] : rows[k].top) worst = std::max(worst, std::abs(lp - row[static_cast<size_t>(id)]));
        if (!std::isnan(rows[k].logprob) && k + 1 < rows.size())
            worst = std::max(worst, std::abs(rows[k].logprob - row[static_cast<size_t>(rows[k].token)]));
    }
    return worst;
}

void make(const std::string& path, const std::string& flags) {
    const std::string cmd = loom::test::sibling_binary("loom-make-model") + " --out " + path +
                            " --layers 6 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 512 --ctx 128 --type f32"
                            " --threads 1 --seed 11 " +
                            flags + " > /dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
}

}  // namespace

TEST_CASE("loom-make-model's gemma2, gemma3, phi3, windowed and YaRN files equal the float64 pass") {
    loom::test::TempDir dir;
    const std::pair<const char*, int32_t> variants[] = {
        {"--arch llama --sliding-window 4", 0},
        {"--arch llama --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 32", 0},
        {"--arch qwen2 --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 32", 0},
        {"--arch gemma2 --sliding-window 4", 0},
        {"--arch gemma3 --sliding-window 4 --rope-scaling linear --rope-factor 8", 0},
        {"--arch phi3", 32},   // short LongRoPE factors: context 32 = the original context
        {"--arch phi3", 128},  // long factors
    };
    for (const auto& [flags, n_ctx] : variants) {
        INFO(flags << ", context " << n_ctx);
        const std::string p = dir.path + "/m.gguf";
        make(p, flags);
        const double d = engine_vs_f64(p, n_ctx);
        INFO("largest |logprob - float64| = " << d);
        CHECK(d < kTol);
    }
}

TEST_CASE("loom-make-model's mixtures of experts (8 or more) equal the float64 pass") {
    loom::test::TempDir dir;
    for (const char* flags : {"--arch qwen3moe", "--arch qwen2moe --experts 8 --experts-used 3",
                              "--arch llama --experts 10 --experts-used 2", "--arch gpt-oss --sliding-window 4",
                              "--arch gpt-oss --sliding-window 4 --type mxfp4 --seed 12",
                              "--arch qwen3moe --type q8_0 --experts 16 --experts-used 4"}) {
        INFO(flags);
        const std::string p = dir.path + "/m.gguf";
        make(p, flags);
        const double d = engine_vs_f64(p, 0);
        INFO("largest |logprob - float64| = " << d);
        CHECK(d < kTol);
    }
}

TEST_CASE("a declared window and YaRN are computed as the float64 pass computes them, and matter") {
    // Weights with attention far from uniform (models_arch.hpp), so that RoPE and the window
    // move the logprobs; the engine equals the float64 pass with each feature.
    loom::test::TempDir dir;
    using loom::test::ArchSpec;
    ArchSpec base;
    base.layers = 3, base.vocab = 512;
    ArchSpec window = base, yarn = base, qwen_yarn = base, qwen = base;
    window.sliding_window = 4;
    yarn.yarn_factor = 4, yarn.yarn_orig_ctx = 16;
    qwen.arch = "qwen2", qwen.biases = true;
    qwen_yarn = qwen;
    qwen_yarn.yarn_factor = 4, qwen_yarn.yarn_orig_ctx = 16;
    const std::vector<int32_t> run = {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52};
    for (const auto& [name, with, without] : {std::tuple{"window 4", window, base}, std::tuple{"YaRN", yarn, base},
                                              std::tuple{"qwen2 YaRN", qwen_yarn, qwen}}) {
        INFO(name);
        const std::string pw = dir.path + "/with.gguf", po = dir.path + "/without.gguf";
        loom::test::write_arch_model(with, pw);
        loom::test::write_arch_model(without, po);
        const double d = engine_vs_f64(pw, 0);
        INFO("largest |logprob - float64| = " << d);
        CHECK(d < kTol);
        const auto fw = GgufFile::open(pw), fo = GgufFile::open(po);
        const auto rw = F64Model(fw).run(run, 1), ro = F64Model(fo).run(run, 1);
        double e = 0;
        for (size_t k = 0; k < rw.size(); ++k)
            for (size_t i = 0; i < rw[k].size(); ++i) e = std::max(e, std::abs(rw[k][i] - ro[k][i]));
        INFO("effect of the feature: " << e);
        CHECK(e > 1e-2);
    }
}
