// The llama family on the CPU: llama, mistral, qwen2 (q/k/v biases) and qwen3 (per-head
// q/k RMSNorm), with the weights bound by engine/llama_weights.hpp (shared with the GPU
// backend) and the common hyperparameters of model::HParams; and its mixtures of experts,
// whose FFN step is moe.hpp's: llama with expert_count (Mixtral: softmax over all experts,
// top k renormalised), qwen3moe (as qwen3, top k renormalised) and qwen2moe (as qwen2, top k
// not renormalised, plus the shared expert under its sigmoid gate).
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
#include "engine/backends/cpu/moe.hpp"
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
          rope_(w_.hp.head_dim, engine::RopeSpec::from_hparams(w_.hp, w_.rope_freqs), w_.neox_rope) {
        route_.rule = RouteSpec::SoftmaxTopK;
        route_.k = w_.hp.n_expert_used;
        route_.renormalise = w_.norm_topk;
    }

    const model::HParams& hparams() const override { return w_.hp; }

    void forward(const Batch& batch, std::vector<float>& x) override {
        const auto& hp = w_.hp;
        const int64_t T = batch.size(), d = hp.n_embd, hd = hp.head_dim;
        b_.resize(hp, T, x);
        rope_.prepare(batch.pos);
        embed(w_.tok_embd, batch.tokens, 1.0f, x.data());
        AttnSpec spec = AttnSpec::of(hp);
        spec.window = hp.sliding_window;
        for (size_t l = 0; l < w_.layers.size(); ++l) {
            const LayerWeights& L = w_.layers[l];
            const auto layer = static_cast<int64_t>(l);
            // Attention block.
            rmsnorm_rows(b_.xb.data(), x.data(), L.attn_norm, T, d, hp.rms_eps);
            c_.matmul({{&L.wq, b_.q.data()}, {&L.wk, b_.k.data()}, {&L.wv, b_.v.data()}}, b_.xb.data(), T);
            add_bias(b_.q.data(), L.bq, T);
            add_bias(b_.k.data(), L.bk, T);
            add_bias(b_.v.data(), L.bv, T);
            head_rmsnorm(b_.q.data(), T * hp.n_head, hd, L.q_norm, hp.rms_eps);
            head_rmsnorm(b_.k.data(), T * hp.n_head_kv, hd, L.k_norm, hp.rms_eps);
            rope_store_kv(batch, layer, rope_, b_.q.data(), hp.n_head, b_.k.data(), b_.v.data(), hp.n_head_kv, hd);
            attention(c_, batch, layer, spec, b_.q.data(), b_.att.data());
            c_.matmul({{&L.wo, b_.xb.data()}}, b_.att.data(), T);
            add_rows(x.data(), b_.xb.data(), T * d);
            // Feed-forward block.
            rmsnorm_rows(b_.xb.data(), x.data(), L.ffn_norm, T, d, hp.rms_eps);
            ffn(L, b_.xb.data(), T);
            add_rows(x.data(), b_.xb.data(), T * d);
        }
    }

    void logits(const float* x, int64_t n, float* out) override {
        output_logits(c_, x, n, w_.output_norm, w_.hp.rms_eps, w_.output, xn_, out);
    }

private:
    // The feed-forward step: xb [T x n_embd] (normalised) becomes down(silu(gate xb) * up xb),
    // or the mixture of such experts (moe.hpp).
    void ffn(const LayerWeights& L, float* xb, int64_t T) {
        if (w_.hp.n_expert == 0) return gated_ffn(c_, L.gate, L.up, L.down, Gate::SiLU, xb, T, g_, u_);
        ExpertLayer e;
        e.router = &L.gate_inp;
        e.gate = L.gate_exps;
        e.up = L.up_exps;
        e.down = L.down_exps;
        if (!L.gate_inp_shexp.empty()) {
            e.shared_gate = &L.gate_shexp;
            e.shared_up = &L.up_shexp;
            e.shared_down = &L.down_shexp;
            e.shared_gate_inp = &L.gate_inp_shexp;
        }
        moe_.run(c_, e, route_, xb, T);
    }

    LlamaWeights w_;
    Compute& c_;
    Rope rope_;
    StepBuffers b_;
    RouteSpec route_;
    MoeFfn moe_;
    std::vector<float> g_, u_, xn_;
};

}  // namespace

std::unique_ptr<CpuArchitecture> make_llama(const model::GgufFile& f, Compute& compute) {
    return std::make_unique<Llama>(f, compute);
}

}  // namespace loom::cpu
