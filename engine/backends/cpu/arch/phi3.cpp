// Phi-3 on the CPU (general.architecture phi3): the llama layer with fused projections.
//
// attn_qkv [n_embd -> (n_head + 2 n_head_kv) * head_dim] gives q, k and v in that order;
// ffn_up [n_embd -> 2 n_ff] gives the gate (first n_ff) and up (last n_ff) of a SwiGLU. RoPE
// rotates (i, i + d/2) pairs. LongRoPE (Ding et al. 2024, "LongRoPE"): the frequency of pair i
// is divided by rope_factors_short.weight[i] or rope_factors_long.weight[i], and cos and sin
// are multiplied by `phi3.rope.scaling.attn_factor`. The rule for which factors: loom uses the
// long factors when the context it serves (--ctx, default the training context) exceeds
// `phi3.rope.scaling.original_context_length` (default the training context), and the short
// ones otherwise, whatever the length of a sequence, so one served model computes one
// function (llama.cpp's rule; Hugging Face's switches per sequence length, which changes the
// cached keys' rotation as a sequence grows). The declared `phi3.attention.sliding_window`
// applies to every layer.
//
// Sources: "Phi-3 Technical Report" (Abdin et al. 2024); LongRoPE (Ding et al. 2024); llama.cpp's
// src/models/phi3 builder (read for the GGUF names and the factor rule, not copied).
#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/backends/cpu/architecture.hpp"
#include "engine/backends/cpu/blocks.hpp"
#include "engine/backends/cpu/matvec.hpp"
#include "engine/tensor_bind.hpp"

namespace loom::cpu {
namespace {

using engine::bind_matrix;
using engine::bind_optional_vector;
using engine::bind_vector;
using engine::Matrix;
using engine::need_tensor;

struct Phi3Layer {
    std::vector<float> attn_norm, ffn_norm;
    Matrix wqkv, wo, up, down;
};

class Phi3 final : public CpuArchitecture {
public:
    Phi3(const model::GgufFile& f, Compute& compute) : hp_(model::HParams::from_gguf(f)), c_(compute) {
        const engine::MatrixTypes types{"the CPU backend", can_dot};
        const int64_t d = hp_.n_embd, hd = hp_.head_dim, nq = int64_t{hp_.n_head} * hd,
                      nkv = int64_t{hp_.n_head_kv} * hd;
        io_ = engine::IoWeights::bind(f, hp_, types);
        short_ = bind_optional_vector(f, "rope_factors_short.weight", hp_.rope_dim / 2);
        long_ = bind_optional_vector(f, "rope_factors_long.weight", hp_.rope_dim / 2);
        if (short_.empty() != long_.empty())
            throw model::ModelError("phi3: rope_factors_short.weight and rope_factors_long.weight come in pairs");
        for (int32_t l = 0; l < hp_.n_layer; ++l) {
            const std::string p = "blk." + std::to_string(l) + ".";
            Phi3Layer L;
            L.attn_norm = bind_vector(need_tensor(f, p + "attn_norm.weight"), d);
            L.wqkv = bind_matrix(need_tensor(f, p + "attn_qkv.weight"), d, nq + 2 * nkv, types);
            L.wo = bind_matrix(need_tensor(f, p + "attn_output.weight"), nq, d, types);
            L.ffn_norm = bind_vector(need_tensor(f, p + "ffn_norm.weight"), d);
            L.up = bind_matrix(need_tensor(f, p + "ffn_up.weight"), d, 2 * int64_t{hp_.n_ff}, types);
            L.down = bind_matrix(need_tensor(f, p + "ffn_down.weight"), hp_.n_ff, d, types);
            layers_.push_back(std::move(L));
        }
        set_context(hp_.n_ctx_train);
    }

    const model::HParams& hparams() const override { return hp_; }

    void set_context(int32_t n_ctx) override {
        const int32_t orig = hp_.rope_orig_ctx > 0 ? hp_.rope_orig_ctx : hp_.n_ctx_train;
        rope_.emplace(hp_.head_dim, engine::RopeSpec::from_hparams(hp_, n_ctx > orig ? long_ : short_), true);
    }

    void forward(const Batch& batch, std::vector<float>& x) override {
        const int64_t T = batch.size(), d = hp_.n_embd, hd = hp_.head_dim;
        const int64_t nq = int64_t{hp_.n_head} * hd, nkv = int64_t{hp_.n_head_kv} * hd, nqkv = nq + 2 * nkv;
        b_.resize(hp_, T, x);
        qkv_.resize(static_cast<size_t>(T * nqkv));
        rope_->prepare(batch.pos);
        embed(io_.tok_embd, batch.tokens, 1.0f, x.data());
        AttnSpec spec = AttnSpec::of(hp_);
        spec.window = hp_.sliding_window;
        for (size_t l = 0; l < layers_.size(); ++l) {
            const Phi3Layer& L = layers_[l];
            const auto layer = static_cast<int64_t>(l);
            rmsnorm_rows(b_.xb.data(), x.data(), L.attn_norm, T, d, hp_.rms_eps);
            c_.matmul({{&L.wqkv, qkv_.data()}}, b_.xb.data(), T);
            for (int64_t t = 0; t < T; ++t) {  // split the fused rows into q, k, v
                const float* r = &qkv_[static_cast<size_t>(t * nqkv)];
                std::copy_n(r, nq, &b_.q[static_cast<size_t>(t * nq)]);
                std::copy_n(r + nq, nkv, &b_.k[static_cast<size_t>(t * nkv)]);
                std::copy_n(r + nq + nkv, nkv, &b_.v[static_cast<size_t>(t * nkv)]);
            }
            rope_store_kv(batch, layer, *rope_, b_.q.data(), hp_.n_head, b_.k.data(), b_.v.data(), hp_.n_head_kv, hd);
            attention(c_, batch, layer, spec, b_.q.data(), b_.att.data());
            c_.matmul({{&L.wo, b_.xb.data()}}, b_.att.data(), T);
            add_rows(x.data(), b_.xb.data(), T * d);
            rmsnorm_rows(b_.xb.data(), x.data(), L.ffn_norm, T, d, hp_.rms_eps);
            ffn(L, b_.xb.data(), T);
            add_rows(x.data(), b_.xb.data(), T * d);
        }
    }

    void logits(const float* x, int64_t n, float* out) override {
        output_logits(c_, x, n, io_.output_norm, hp_.rms_eps, io_.output, xn_, out);
    }

private:
    // The feed-forward step: xb [T x n_embd] (normalised) becomes down(silu(gate) * up), gate
    // and up being the two halves of the fused up projection.
    void ffn(const Phi3Layer& L, float* xb, int64_t T) {
        const int64_t ff = hp_.n_ff;
        gu_.resize(static_cast<size_t>(T * 2 * ff));
        g_.resize(static_cast<size_t>(T * ff));
        c_.matmul({{&L.up, gu_.data()}}, xb, T);
        for (int64_t t = 0; t < T; ++t) {
            float* g = &g_[static_cast<size_t>(t * ff)];
            std::copy_n(&gu_[static_cast<size_t>(t * 2 * ff)], ff, g);
            swiglu(g, &gu_[static_cast<size_t>(t * 2 * ff + ff)], ff);
        }
        c_.matmul({{&L.down, xb}}, g_.data(), T);
    }

    model::HParams hp_;
    Compute& c_;
    engine::IoWeights io_;
    std::vector<float> short_, long_;
    std::vector<Phi3Layer> layers_;
    std::optional<Rope> rope_;
    StepBuffers b_;
    std::vector<float> qkv_, gu_, g_, xn_;
};

}  // namespace

std::unique_ptr<CpuArchitecture> make_phi3(const model::GgufFile& f, Compute& compute) {
    return std::make_unique<Phi3>(f, compute);
}

}  // namespace loom::cpu
