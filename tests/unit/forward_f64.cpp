// The CPU engine's logprobs against an independent float64 forward pass.
//
// The float64 pass below is written from the Llama architecture directly (naive
// loops, double everywhere, KV kept as full history) and shares no code with the
// backend except the GGUF reader. The CPU backend computes in F32, so the two must
// agree to about 1e-5 in logprob. This is the test that says loom's logprobs are the
// model's mathematics; tests/e2e compare with the shared reference, which rounds
// attention to F16 and is therefore only good to about 1e-2.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/backends/cpu/cpu_backend.hpp"
#include "model/gguf.hpp"
#include "model/hparams.hpp"
#include "test_paths.hpp"

using loom::model::GgufFile;

namespace {

struct F64Model {
    loom::model::HParams hp;
    const GgufFile& f;
    explicit F64Model(const GgufFile& file) : hp(loom::model::HParams::from_gguf(file)), f(file) {}

    std::vector<double> w(const std::string& name) const {
        const auto* t = f.tensor(name);
        REQUIRE(t != nullptr);
        REQUIRE(t->type == 0);  // F32 only
        std::vector<double> out(t->n_elements());
        for (size_t i = 0; i < out.size(); ++i) {
            float v;
            std::memcpy(&v, t->data + 4 * i, 4);
            out[i] = v;
        }
        return out;
    }
    // y = W x, W stored [rows][cols].
    static std::vector<double> mv(const std::vector<double>& W, const std::vector<double>& x) {
        const size_t cols = x.size(), rows = W.size() / cols;
        std::vector<double> y(rows, 0.0);
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < cols; ++c) y[r] += W[r * cols + c] * x[c];
        return y;
    }
    std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& g) const {
        double ss = 0;
        for (double v : x) ss += v * v;
        const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + hp.rms_eps);
        std::vector<double> y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * g[i];
        return y;
    }
    void rope(std::vector<double>& v, int64_t pos) const {
        const int hd = hp.head_dim;
        for (size_t h = 0; h < v.size() / static_cast<size_t>(hd); ++h)
            for (int i = 0; i < hp.rope_dim / 2; ++i) {
                const double th = static_cast<double>(pos) * std::pow(static_cast<double>(hp.rope_base), -2.0 * i / hp.rope_dim);
                double& a = v[h * hd + 2 * i];
                double& b = v[h * hd + 2 * i + 1];
                const double x0 = a, x1 = b;
                a = x0 * std::cos(th) - x1 * std::sin(th);
                b = x0 * std::sin(th) + x1 * std::cos(th);
            }
    }

    // Log-softmax of the logits after each token of `seq` beyond the first `from`.
    std::vector<std::vector<double>> run(const std::vector<int32_t>& seq, size_t from) const {
        const int L = hp.n_layer, hd = hp.head_dim, H = hp.n_head, KV = hp.n_head_kv;
        const auto emb = w("token_embd.weight"), out_w = w("output.weight"), out_n = w("output_norm.weight");
        std::vector<std::vector<std::vector<double>>> K(L), V(L);
        std::vector<std::vector<double>> result;
        for (size_t p = 0; p < seq.size(); ++p) {
            std::vector<double> x(emb.begin() + seq[p] * hp.n_embd, emb.begin() + (seq[p] + 1) * hp.n_embd);
            for (int l = 0; l < L; ++l) {
                const std::string b = "blk." + std::to_string(l) + ".";
                auto xb = rms(x, w(b + "attn_norm.weight"));
                auto q = mv(w(b + "attn_q.weight"), xb), k = mv(w(b + "attn_k.weight"), xb), v = mv(w(b + "attn_v.weight"), xb);
                rope(q, static_cast<int64_t>(p));
                rope(k, static_cast<int64_t>(p));
                K[l].push_back(k);
                V[l].push_back(v);
                std::vector<double> att(q.size(), 0.0);
                for (int h = 0; h < H; ++h) {
                    const int kh = h / (H / KV);
                    std::vector<double> sc(p + 1);
                    double mx = -1e300;
                    for (size_t j = 0; j <= p; ++j) {
                        double s = 0;
                        for (int e = 0; e < hd; ++e) s += q[h * hd + e] * K[l][j][kh * hd + e];
                        sc[j] = s / std::sqrt(static_cast<double>(hd));
                        mx = std::max(mx, sc[j]);
                    }
                    double z = 0;
                    for (double& s : sc) z += (s = std::exp(s - mx));
                    for (size_t j = 0; j <= p; ++j)
                        for (int e = 0; e < hd; ++e) att[h * hd + e] += sc[j] / z * V[l][j][kh * hd + e];
                }
                auto o = mv(w(b + "attn_output.weight"), att);
                for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
                xb = rms(x, w(b + "ffn_norm.weight"));
                auto g = mv(w(b + "ffn_gate.weight"), xb), u = mv(w(b + "ffn_up.weight"), xb);
                for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
                auto d = mv(w(b + "ffn_down.weight"), g);
                for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
            }
            if (p + 1 < from) continue;
            auto logits = mv(out_w, rms(x, out_n));
            double mx = *std::max_element(logits.begin(), logits.end()), z = 0;
            for (double v : logits) z += std::exp(v - mx);
            for (double& v : logits) v -= mx + std::log(z);
            result.push_back(std::move(logits));
        }
        return result;
    }
};

}  // namespace

TEST_CASE("CPU engine logprobs equal a float64 forward pass within 1e-5 (stories260K)") {
    const std::string path = loom::test::shared_path("models/stories260K.gguf");
    const auto file = GgufFile::open(path);
    F64Model ref(file);
    auto backend = loom::cpu::make_cpu_backend(path, {2, 0});
    // Prompt "Once upon a time" and the first greedy tokens (shared/reference/stories260K.json).
    const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
    const std::vector<int32_t> gen = {432, 383, 286, 261, 376, 298, 315, 421};
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), gen.begin(), gen.end());
    const auto want = ref.run(seq, prompt.size());  // one row per position from the last prompt token

    auto s = backend->new_sequence(64);
    backend->eval(*s, prompt);
    loom::engine::SamplingParams sp;
    sp.temperature = 0;
    sp.n_logprobs = 20;
    loom::engine::TokenHistory hist;
    double worst = 0;
    for (size_t step = 0; step < gen.size(); ++step) {
        const auto r = backend->sample(*s, sp, hist, 0.5);
        REQUIRE(r.token == gen[step]);  // greedy follows the reference tokens
        REQUIRE(r.top.size() == 20);
        for (const auto& [id, lp] : r.top) worst = std::max(worst, std::abs(lp - want[step][static_cast<size_t>(id)]));
        // The top 20 are the 20 largest of the float64 distribution.
        std::vector<double> sorted = want[step];
        std::sort(sorted.rbegin(), sorted.rend());
        CHECK(r.top.back().second >= sorted[19] - 1e-5);
        backend->eval(*s, std::vector<int32_t>{gen[step]});
    }
    INFO("largest |logprob - float64| = " << worst);
    CHECK(worst < 1e-5);
}
