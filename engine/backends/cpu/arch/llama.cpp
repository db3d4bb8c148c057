// The llama family on the CPU: llama, mistral, qwen2 (q/k/v biases) and qwen3 (per-head
// q/k RMSNorm), with the weights bound by engine/llama_weights.hpp (shared with the GPU
// backend) and the common hyperparameters of model::HParams.
//
// Source: the Llama architecture (Touvron et al. 2023): pre-norm RMSNorm, rotary position
// embeddings (pairs (2i, 2i+1); qwen2/qwen3 rotate (i, i + d/2), "NEOX" order) with linear,
// YaRN or Llama 3.1 rope_freqs scaling (engine/rope_angles.hpp), grouped-query attention over
// the paged KV cache, with the sliding window a file declares (`<arch>.attention.sliding_window`,
// Mistral 7B, Jiang et al. 2023: every layer), and a SwiGLU feed-forward (Shazeer 2020); the
// Qwen2/Qwen3 technical reports for the biases and QK-norm. llama.cpp's src/models/llama.cpp
// read for the GGUF conventions (it ignores a llama file's declared window; loom applies it).
#include <algorithm>
#include <cmath>

#include "engine/backends/cpu/architecture.hpp"
#include "engine/backends/cpu/blocks.hpp"
#include "engine/backends/cpu/matvec.hpp"
#include "engine/llama_weights.hpp"

namespace loom::cpu {
namespace {

using engine::LayerWeights;
using engine::LlamaWeights;

class Llama final : public CpuArchitecture {
public:
    Llama(const model::GgufFile& f, Compute& compute)
        : w_(LlamaWeights::bind(f, {"the CPU backend", can_dot})),
          c_(compute),
          rope_(w_.hp.head_dim, engine::RopeSpec::from_hparams(w_.hp, w_.rope_freqs), w_.neox_rope) {}

    const model::HParams& hparams() const override { return w_.hp; }

    void forward(const Batch& batch, std::vector<float>& x) override {
        const auto& hp = w_.hp;
        const int64_t T = batch.size(), d = hp.n_embd, hd = hp.head_dim;
        const int64_t nq = int64_t{hp.n_head} * hd, nkv = int64_t{hp.n_head_kv} * hd;
        x.resize(static_cast<size_t>(T * d));
        xb_.resize(static_cast<size_t>(T * std::max(d, nq)));
        q_.resize(static_cast<size_t>(T * nq));
        k_.resize(static_cast<size_t>(T * nkv));
        v_.resize(static_cast<size_t>(T * nkv));
        att_.resize(static_cast<size_t>(T * nq));
        rope_.prepare(batch.pos);
        embed(w_.tok_embd, batch.tokens, 1.0f, x.data());
        AttnSpec spec;
        spec.n_head = hp.n_head;
        spec.n_head_kv = hp.n_head_kv;
        spec.head_dim = hd;
        spec.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        spec.window = hp.sliding_window;
        for (size_t l = 0; l < w_.layers.size(); ++l) {
            const LayerWeights& L = w_.layers[l];
            const auto layer = static_cast<int64_t>(l);
            // Attention block.
            rmsnorm_rows(xb_.data(), x.data(), L.attn_norm, T, d, hp.rms_eps);
            c_.matmul({{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xb_.data(), T);
            add_bias(q_.data(), L.bq, T);
            add_bias(k_.data(), L.bk, T);
            add_bias(v_.data(), L.bv, T);
            head_rmsnorm(q_.data(), T * hp.n_head, hd, L.q_norm, hp.rms_eps);
            head_rmsnorm(k_.data(), T * hp.n_head_kv, hd, L.k_norm, hp.rms_eps);
            rope_store_kv(batch, layer, rope_, q_.data(), hp.n_head, k_.data(), v_.data(), hp.n_head_kv, hd);
            attention(c_, batch, layer, spec, q_.data(), att_.data());
            c_.matmul({{&L.wo, xb_.data()}}, att_.data(), T);
            add_rows(x.data(), xb_.data(), T * d);
            // Feed-forward block.
            rmsnorm_rows(xb_.data(), x.data(), L.ffn_norm, T, d, hp.rms_eps);
            ffn(L, xb_.data(), T);
            add_rows(x.data(), xb_.data(), T * d);
        }
    }

    void logits(const float* x, int64_t n, float* out) override {
        xn_.resize(static_cast<size_t>(n * w_.hp.n_embd));
        rmsnorm_rows(xn_.data(), x, w_.output_norm, n, w_.hp.n_embd, w_.hp.rms_eps);
        c_.matmul({{&w_.output, out}}, xn_.data(), n);
    }

private:
    // The feed-forward step: xb [T x n_embd] (normalised) becomes down(silu(gate xb) * up xb).
    void ffn(const LayerWeights& L, float* xb, int64_t T) {
        const int64_t ff = w_.hp.n_ff;
        g_.resize(static_cast<size_t>(T * ff));
        u_.resize(static_cast<size_t>(T * ff));
        c_.matmul({{&L.gate, g_.data()}, {&L.up, u_.data()}}, xb, T);
        swiglu(g_.data(), u_.data(), T * ff);
        c_.matmul({{&L.down, xb}}, g_.data(), T);
    }

    LlamaWeights w_;
    Compute& c_;
    Rope rope_;
    std::vector<float> xb_, q_, k_, v_, att_, g_, u_, xn_;
};

}  // namespace

std::unique_ptr<CpuArchitecture> make_llama(const model::GgufFile& f, Compute& compute) {
    return std::make_unique<Llama>(f, compute);
}

}  // namespace loom::cpu
