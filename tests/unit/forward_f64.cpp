// The CPU engine's logprobs against an independent float64 forward pass.
//
// The float64 pass (models_f64.hpp) is written from the architecture directly (naive
// loops, double everywhere, KV kept as full history) and shares no code with the
// backend except the GGUF reader and the row dequantizer. The CPU backend computes in
// F32, so the two must agree to about 1e-5 in logprob. This is the test that says
// loom's logprobs are the model's mathematics; models_reference.cpp compares with the
// shared reference, which rounds attention and activations and is therefore only good
// to its own rounding error.
//
// Architectures are proven on models generated here: by the loom-make-model binary
// beside this test (llama, mistral, qwen2 with attention biases, qwen3 with QK-norm,
// tied embeddings) and, for what that tool does not write, by model/gguf_writer
// (models_arch.hpp: Llama 3.1's rope_freqs.weight, linear RoPE scaling, partial
// rotary dims, a head size other than n_embd / n_head), all with F32 weights so the
// comparison is tight. loom-make-model's files in each IQ1/IQ2/IQ3 type prove those decoders
// and dot kernels in a whole forward pass.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "backend_run.hpp"
#include "engine/backends/cpu/cpu_backend.hpp"
#include "model/gguf/ggml_types.hpp"
#include "model/gguf/gguf.hpp"
#include "model/gguf/hparams.hpp"
#include "models_arch.hpp"
#include "models_f64.hpp"
#include "test_paths.hpp"

using loom::model::GgufFile;
using loom::test::F64Model;

namespace {

// Greedy-decodes `n_gen` tokens after `prompt` with the CPU backend (at `threads`) and
// returns the largest |logprob - float64| over each step's top-20 and over the prompt
// logprobs. Also checks that the top 20 are the float64 distribution's 20 largest.
double engine_vs_f64(const std::string& path, const std::vector<int32_t>& prompt, int n_gen, int threads = 2) {
    const auto file = GgufFile::open(path);
    F64Model ref(file);
    auto backend = loom::cpu::make_cpu_backend(path, {threads, 0});
    loom::engine::SamplingParams sp;
    sp.temperature = 0;
    sp.n_logprobs = 20;
    loom::test::OneSequence s(*backend, sp, prompt);
    std::vector<loom::engine::SampleResult> plp;
    std::vector<int32_t> seq = prompt;
    std::vector<loom::engine::SampleResult> got;
    for (int step = 0; step < n_gen; ++step) {
        got.push_back(step == 0 ? s.eval(prompt, true, 0.5, 5, &plp)
                                : s.eval(std::vector<int32_t>{got.back().token}, true, 0.5));
        seq.push_back(got.back().token);
    }
    const auto want = ref.run(seq, 1);  // row k: distribution of the token at position k + 1
    double worst = 0;
    REQUIRE(plp.size() == prompt.size() - 1);
    for (size_t i = 0; i < plp.size(); ++i)
        worst = std::max(worst, std::abs(plp[i].logprob - want[i][static_cast<size_t>(prompt[i + 1])]));
    for (size_t k = 0; k < got.size(); ++k) {
        const auto& row = want[prompt.size() - 1 + k];
        REQUIRE(got[k].top.size() == 20);
        for (const auto& [id, lp] : got[k].top) worst = std::max(worst, std::abs(lp - row[static_cast<size_t>(id)]));
        std::vector<double> sorted = row;
        std::nth_element(sorted.begin(), sorted.begin() + 19, sorted.end(), std::greater<>());
        CHECK(got[k].top.back().second >= sorted[19] - 1e-4);
    }
    return worst;
}

const std::vector<int32_t> kStoriesPrompt = {1, 403, 407, 261, 378};  // "Once upon a time"

// The generated models' logits have a standard deviation of about 3, so their top-20
// logprobs reach -15 and below, where F32 (ulp 1e-6 at 16) accumulated over the layers
// gives differences of 1e-5; real models' logprobs stay within 1e-5 (see above).
constexpr double kGeneratedTol = 3e-5;

}  // namespace

TEST_CASE("CPU engine logprobs equal a float64 forward pass within 1e-5 (stories260K)") {
    const double d = engine_vs_f64(loom::test::shared_path("models/stories260K.gguf"), kStoriesPrompt, 12);
    INFO("largest |logprob - float64| = " << d);
    CHECK(d < 1e-5);
}

TEST_CASE("every shared model and weight type equals the float64 pass on its own weights") {
    // Quantized weights enter both passes as the same dequantized values; the engine
    // multiplies them with F32 activations, the float64 pass in double.
    std::vector<std::string> files = {"models/llama-2-tiny-random.gguf", "models/TinyStories-656K-Q8_0.gguf",
                                      "models/TinyStories-656K-Q3_K_M.gguf",
                                      "models/legacy/tinyllamas-stories-260k-f32.gguf"};
    for (const char* t : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "iq4_xs", "q2_k",
                          "q3_k", "q4_k", "q5_k", "q6_k", "q4_k_m"})
        files.push_back(std::string("models/wide/stories260K-wide-") + t + ".gguf");
    for (const auto& f : files) {
        const double d = engine_vs_f64(loom::test::shared_path(f), {1, 403, 407, 261, 378}, 8);
        INFO(f << ": largest |logprob - float64| = " << d);
        CHECK(d < 2e-5);
    }
}

TEST_CASE("a random model of each IQ1/IQ2/IQ3 type from loom-make-model equals the float64 pass") {
    // Every matrix in the type (rows of 256 and 512: whole blocks, no fallback), decoded by
    // the engine's fused dot kernels and by model::dequantize_row for the float64 pass.
    loom::test::TempDir dir;
    for (const char* t : {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s"}) {
        const std::string path = dir.path + "/" + t + ".gguf";
        const std::string cmd = loom::test::sibling_binary("loom-make-model") + " --out " + path +
                                " --layers 2 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --vocab 300 --ctx 128 --type " +
                                t + " --threads 2 --seed 3 > /dev/null";
        REQUIRE(std::system(cmd.c_str()) == 0);
        const auto f = GgufFile::open(path);
        for (const char* name : {"token_embd.weight", "output.weight", "blk.1.attn_k.weight", "blk.1.ffn_down.weight"})
            CHECK(loom::model::type_name(f.tensor(name)->type) == t);
        const double d = engine_vs_f64(path, {1, 40, 41, 42, 43, 44, 45}, 10);
        INFO(path << ": largest |logprob - float64| = " << d);
        CHECK(d < kGeneratedTol);  // issue 39 asks for 1e-4; measured 1.5e-6 to 2.3e-6
    }
}

TEST_CASE("llama-family architectures from loom-make-model equal the float64 pass") {
    loom::test::TempDir dir;
    struct Variant {
        const char* arch;
        bool tied;
    };
    for (const Variant v : {Variant{"llama", false}, Variant{"mistral", false}, Variant{"qwen2", false},
                            Variant{"qwen3", false}, Variant{"llama", true}, Variant{"qwen2", true}}) {
        const std::string path = dir.path + "/" + v.arch + (v.tied ? "-tied" : "") + ".gguf";
        std::string cmd = loom::test::sibling_binary("loom-make-model") + " --out " + path + " --arch " + v.arch +
                          " --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 300 --ctx 128 --type f32 "
                          "--threads 1 --seed 7" +
                          (v.tied ? " --tied" : "") + " > /dev/null";
        REQUIRE(std::system(cmd.c_str()) == 0);
        const auto f = GgufFile::open(path);
        CHECK((f.tensor("output.weight") == nullptr) == v.tied);
        CHECK((f.tensor("blk.0.attn_q.bias") != nullptr) == (std::string(v.arch) == "qwen2"));
        CHECK((f.tensor("blk.0.attn_q_norm.weight") != nullptr) == (std::string(v.arch) == "qwen3"));
        const double d = engine_vs_f64(path, {1, 40, 41, 42, 43, 44, 45}, 10);
        INFO(path << ": largest |logprob - float64| = " << d);
        CHECK(d < kGeneratedTol);
    }
}

TEST_CASE("each architecture feature is computed as the float64 pass computes it, and matters") {
    // For each feature: the engine equals the float64 pass on a model with it, and the
    // same model without it gives clearly different logprobs (so the test can see it).
    loom::test::TempDir dir;
    const std::vector<int32_t> prompt = {1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50};
    using loom::test::ArchSpec;
    struct Case {
        const char* name;
        ArchSpec with, without;
    };
    ArchSpec base;  // llama, untied, no extras
    std::vector<Case> cases;
    auto variant = [&](const char* name, auto edit) {
        ArchSpec w = base;
        edit(w);
        cases.push_back({name, w, base});
    };
    variant("rope_freqs.weight (Llama 3.1)", [](ArchSpec& s) { s.rope_freqs = true; });
    variant("linear RoPE scaling", [](ArchSpec& s) { s.linear_scale = 4.0; });
    variant("legacy rope.scale_linear key", [](ArchSpec& s) { s.legacy_scale_key = 2.0; });
    variant("partial rotary dims", [](ArchSpec& s) { s.rope_dim = 8; });
    variant("head size != n_embd / n_head", [](ArchSpec& s) { s.head_dim = 24; });
    variant("tied embeddings", [](ArchSpec& s) { s.tied = true; });
    variant("qwen2 biases + NEOX RoPE", [](ArchSpec& s) { s.arch = "qwen2", s.biases = true; });
    variant("qwen3 QK-norm + NEOX RoPE", [](ArchSpec& s) { s.arch = "qwen3", s.qk_norm = true; });
    variant("mistral", [](ArchSpec& s) { s.arch = "mistral"; });
    for (auto& c : cases) {
        INFO(c.name);
        const std::string pw = dir.path + "/with.gguf", po = dir.path + "/without.gguf";
        loom::test::write_arch_model(c.with, pw);
        loom::test::write_arch_model(c.without, po);
        const double d = engine_vs_f64(pw, prompt, 6);
        INFO("largest |logprob - float64| = " << d);
        CHECK(d < kGeneratedTol);
        // The feature's effect on the float64 logprobs of the prompt.
        const auto fw = GgufFile::open(pw), fo = GgufFile::open(po);
        const auto rw = F64Model(fw).run(prompt, 1), ro = F64Model(fo).run(prompt, 1);
        double effect = 0;
        for (size_t k = 0; k < rw.size(); ++k)
            for (size_t i = 0; i < rw[k].size(); ++i) effect = std::max(effect, std::abs(rw[k][i] - ro[k][i]));
        INFO("effect of the feature: " << effect);
        if (std::string(c.name) != "mistral") CHECK(effect > 1e-2);  // mistral is llama's math under another name
    }
}

TEST_CASE("threads do not change the result: 1 and 3 threads give identical logprobs") {
    loom::test::TempDir dir;
    const std::string p = dir.path + "/m.gguf";
    loom::test::ArchSpec s;
    s.arch = "qwen2", s.biases = true;
    loom::test::write_arch_model(s, p);
    const std::vector<int32_t> prompt = {1, 40, 41, 42, 43, 44, 45, 46, 47};
    CHECK(engine_vs_f64(p, prompt, 6, 1) == engine_vs_f64(p, prompt, 6, 3));
}
