// Gemma 2 and Gemma 3 on the CPU (general.architecture gemma2, gemma3).
//
// The layer: x += post_attention_norm(attention(attn_norm(x))); x += post_ffw_norm(down(
// gelu(gate h) * up h)) with h = ffn_norm(x) (GeGLU, GELU in its tanh form as Gemma's
// hidden_activation gelu_pytorch_tanh: the exact erf moves logprobs by ~1e-3); every norm an
// RMSNorm whose weight is used as stored (Gemma's checkpoints hold w and compute with 1 + w;
// the GGUF conversion stores 1 + w). The embeddings are multiplied by sqrt(n_embd); RoPE
// rotates (i, i + d/2) pairs; the attention scale is 1/sqrt(head_dim), except for the 27B
// models (46 layers for Gemma 2, 62 for Gemma 3), scaled by 1/sqrt(n_embd / n_head) as
// their query_pre_attn_scalar says. Local (sliding-window) and global layers alternate:
// layer l is local when l % pattern < pattern - 1, pattern 2 for Gemma 2 and 6 for Gemma 3
// (`<arch>.attention.sliding_window_pattern` overrides it), window
// `<arch>.attention.sliding_window`.
//   gemma2: attention scores soft-capped at `gemma2.attn_logit_softcapping` (default 50)
//     and the logits at `gemma2.final_logit_softcapping` (default 30); one RoPE for all layers.
//   gemma3: per-head RMSNorm of q and k (attn_q_norm, attn_k_norm) before RoPE; local layers
//     rotate with base `gemma3.rope.freq_base_swa` (default 10000) and no scaling, global ones
//     with `rope.freq_base` and the file's rope scaling (linear x8 in the 4B..27B models); no
//     soft-caps unless the file declares them. Tied embeddings when output.weight is absent.
//
// Sources: "Gemma 2: Improving Open Language Models at a Practical Size" (Gemma Team 2024) and
// the Gemma 3 technical report (2025); GeGLU (Shazeer 2020); llama.cpp's src/models/gemma2 and
// gemma3 builders (read for the GGUF names and the 27B scale rule, not copied).
#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/backends/cpu/architecture.hpp"
#include "engine/backends/cpu/blocks.hpp"
#include "engine/backends/cpu/matvec.hpp"
#include "engine/tensor_bind.hpp"

namespace loom::cpu {
namespace {

using engine::bind_attention;
using engine::bind_matrix;
using engine::bind_vector;
using engine::Matrix;
using engine::need_tensor;

struct GemmaLayer {
    std::vector<float> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffw_norm;
    Matrix wq, wk, wv, wo, gate, up, down;
    bool local = false;  // a local layer: the window (if declared), Gemma 3's local RoPE
};

class Gemma final : public CpuArchitecture {
public:
    Gemma(const model::GgufFile& f, Compute& compute) : hp_(model::HParams::from_gguf(f)), c_(compute) {
        const std::string a = hp_.arch + ".";
        const bool g3 = hp_.arch == "gemma3";
        const engine::MatrixTypes types{"the CPU backend", can_dot};
        const int64_t d = hp_.n_embd, hd = hp_.head_dim;
        attn_softcap_ = static_cast<float>(f.get_float(a + "attn_logit_softcapping", g3 ? 0.0 : 50.0));
        final_softcap_ = static_cast<float>(f.get_float(a + "final_logit_softcapping", g3 ? 0.0 : 30.0));
        if (!(attn_softcap_ >= 0) || !(final_softcap_ >= 0))
            throw model::ModelError(a + "attn_logit_softcapping and final_logit_softcapping must not be negative");
        const int64_t pattern = f.get_int(a + "attention.sliding_window_pattern", g3 ? 6 : 2);
        if (pattern < 1) throw model::ModelError(a + "attention.sliding_window_pattern must be positive");
        const bool big = hp_.n_layer == (g3 ? 62 : 46);
        scale_ = 1.0f / std::sqrt(static_cast<float>(big ? hp_.n_embd / hp_.n_head : hd));

        io_ = engine::IoWeights::bind(f, hp_, types);
        for (int32_t l = 0; l < hp_.n_layer; ++l) {
            const std::string p = "blk." + std::to_string(l) + ".";
            GemmaLayer L;
            L.attn_norm = bind_vector(need_tensor(f, p + "attn_norm.weight"), d);
            bind_attention(f, p, hp_, types, L.wq, L.wk, L.wv, L.wo);
            if (g3) {
                L.q_norm = bind_vector(need_tensor(f, p + "attn_q_norm.weight"), hd);
                L.k_norm = bind_vector(need_tensor(f, p + "attn_k_norm.weight"), hd);
            }
            L.post_attn_norm = bind_vector(need_tensor(f, p + "post_attention_norm.weight"), d);
            L.ffn_norm = bind_vector(need_tensor(f, p + "ffn_norm.weight"), d);
            L.gate = bind_matrix(need_tensor(f, p + "ffn_gate.weight"), d, hp_.n_ff, types);
            L.up = bind_matrix(need_tensor(f, p + "ffn_up.weight"), d, hp_.n_ff, types);
            L.down = bind_matrix(need_tensor(f, p + "ffn_down.weight"), hp_.n_ff, d, types);
            L.post_ffw_norm = bind_vector(need_tensor(f, p + "post_ffw_norm.weight"), d);
            L.local = l % pattern < pattern - 1;
            layers_.push_back(std::move(L));
        }
        engine::RopeSpec global = engine::RopeSpec::from_hparams(hp_, {});
        engine::RopeSpec local = global;
        if (g3) {  // local layers: their own base, unscaled
            local = engine::RopeSpec{};
            local.rope_dim = hp_.rope_dim;
            local.base = f.get_float(a + "rope.freq_base_swa", 10000.0);
            if (!(local.base > 0)) throw model::ModelError(a + "rope.freq_base_swa must be a positive number");
        }
        rope_global_.emplace(hd, global, true);
        rope_local_.emplace(hd, local, true);
    }

    const model::HParams& hparams() const override { return hp_; }

    void forward(const Batch& batch, std::vector<float>& x) override {
        const int64_t T = batch.size(), d = hp_.n_embd, hd = hp_.head_dim;
        b_.resize(hp_, T, x);
        rope_global_->prepare(batch.pos);
        rope_local_->prepare(batch.pos);
        embed(io_.tok_embd, batch.tokens, std::sqrt(static_cast<float>(d)), x.data());
        AttnSpec spec = AttnSpec::of(hp_);
        spec.scale = scale_;
        spec.softcap = attn_softcap_;
        for (size_t l = 0; l < layers_.size(); ++l) {
            const GemmaLayer& L = layers_[l];
            const auto layer = static_cast<int64_t>(l);
            rmsnorm_rows(b_.xb.data(), x.data(), L.attn_norm, T, d, hp_.rms_eps);
            c_.matmul({{&L.wq, b_.q.data()}, {&L.wk, b_.k.data()}, {&L.wv, b_.v.data()}}, b_.xb.data(), T);
            head_rmsnorm(b_.q.data(), T * hp_.n_head, hd, L.q_norm, hp_.rms_eps);
            head_rmsnorm(b_.k.data(), T * hp_.n_head_kv, hd, L.k_norm, hp_.rms_eps);
            const Rope& rope = L.local ? *rope_local_ : *rope_global_;
            rope_store_kv(batch, layer, rope, b_.q.data(), hp_.n_head, b_.k.data(), b_.v.data(), hp_.n_head_kv, hd);
            spec.window = L.local ? hp_.sliding_window : 0;
            attention(c_, batch, layer, spec, b_.q.data(), b_.att.data());
            c_.matmul({{&L.wo, b_.xb.data()}}, b_.att.data(), T);
            rmsnorm_rows(b_.xb.data(), b_.xb.data(), L.post_attn_norm, T, d, hp_.rms_eps);
            add_rows(x.data(), b_.xb.data(), T * d);
            rmsnorm_rows(b_.xb.data(), x.data(), L.ffn_norm, T, d, hp_.rms_eps);
            ffn(L, b_.xb.data(), T);
            rmsnorm_rows(b_.xb.data(), b_.xb.data(), L.post_ffw_norm, T, d, hp_.rms_eps);
            add_rows(x.data(), b_.xb.data(), T * d);
        }
    }

    void logits(const float* x, int64_t n, float* out) override {
        output_logits(c_, x, n, io_.output_norm, hp_.rms_eps, io_.output, xn_, out);
        if (final_softcap_ > 0) softcap(out, n * hp_.n_vocab, final_softcap_);
    }

private:
    // The feed-forward step: xb [T x n_embd] (normalised) becomes down(gelu(gate xb) * up xb).
    void ffn(const GemmaLayer& L, float* xb, int64_t T) {
        gated_ffn(c_, L.gate, L.up, L.down, Gate::GeluTanh, xb, T, g_, u_);
    }

    model::HParams hp_;
    Compute& c_;
    float scale_ = 1.0f, attn_softcap_ = 0.0f, final_softcap_ = 0.0f;
    engine::IoWeights io_;
    std::vector<GemmaLayer> layers_;
    std::optional<Rope> rope_global_, rope_local_;
    StepBuffers b_;
    std::vector<float> g_, u_, xn_;
};

}  // namespace

std::unique_ptr<CpuArchitecture> make_gemma(const model::GgufFile& f, Compute& compute) {
    return std::make_unique<Gemma>(f, compute);
}

}  // namespace loom::cpu
