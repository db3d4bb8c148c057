// gpt-oss on the CPU (general.architecture gpt-oss).
//
// The layer: x += wo(attention(q, k, v)) + bo with q, k, v = W h + b, h = attn_norm(x); then
// x += moe(post_attention_norm(x)) (`post_attention_norm` is gpt-oss's norm before the FFN,
// not an output norm as in Gemma). Attention: RoPE on (i, i + d/2) pairs with the file's YaRN
// scaling, scale 1/sqrt(head_dim), and a learnt sink logit per head (attn_sinks, not scaled)
// in every softmax's denominator; even layers attend within `gpt-oss.attention.sliding_window`
// positions, odd layers to the whole context. The mixture (moe.hpp): the router's logits
// (ffn_gate_inp with its bias), the top `expert_used_count` of them, a softmax over those
// only; each expert a SwiGLU clamped as gpt-oss defines it (gate <= 7, up in [-7, 7], gate *
// sigmoid(1.702 gate) * (up + 1)) with biases on gate, up and down; the experts' weights
// usually MXFP4.
//
// Sources: the gpt-oss model card (OpenAI 2025) and its reference implementation (attention
// sinks, alternating banded attention, the router and the clamped SwiGLU); YaRN (Peng et al.
// 2023, engine/rope_angles.hpp). llama.cpp's src/models/openai-moe-iswa.cpp read for the GGUF
// names and which layers slide (the even ones), not copied.
#include <cmath>
#include <optional>

#include "engine/backends/cpu/architecture.hpp"
#include "engine/backends/cpu/blocks.hpp"
#include "engine/backends/cpu/matvec.hpp"
#include "engine/backends/cpu/moe.hpp"
#include "engine/tensor_bind.hpp"

namespace loom::cpu {
namespace {

using engine::bind_attention;
using engine::bind_matrices;
using engine::bind_matrix;
using engine::bind_vector;
using engine::bind_vectors;
using engine::Matrix;
using engine::need_tensor;

struct GptOssLayer {
    std::vector<float> attn_norm, bq, bk, bv, bo, sinks, post_attn_norm, router_bias;
    Matrix wq, wk, wv, wo, router;
    std::vector<Matrix> gate, up, down;
    std::vector<std::vector<float>> gate_b, up_b, down_b;
    bool local = false;  // sliding-window layer
};

class GptOss final : public CpuArchitecture {
public:
    GptOss(const model::GgufFile& f, Compute& compute) : hp_(model::HParams::from_gguf(f)), c_(compute) {
        const engine::MatrixTypes types{"the CPU backend", can_dot};
        const int64_t d = hp_.n_embd, hd = hp_.head_dim, nq = int64_t{hp_.n_head} * hd,
                      nkv = int64_t{hp_.n_head_kv} * hd, ne = hp_.n_expert, ff = hp_.n_ff_exp;
        if (ne == 0) throw model::ModelError("gpt-oss needs gpt-oss.expert_count");
        io_ = engine::IoWeights::bind(f, hp_, types);
        for (int32_t l = 0; l < hp_.n_layer; ++l) {
            const std::string p = "blk." + std::to_string(l) + ".";
            GptOssLayer L;
            L.attn_norm = bind_vector(need_tensor(f, p + "attn_norm.weight"), d);
            bind_attention(f, p, hp_, types, L.wq, L.wk, L.wv, L.wo);
            L.bq = bind_vector(need_tensor(f, p + "attn_q.bias"), nq);
            L.bk = bind_vector(need_tensor(f, p + "attn_k.bias"), nkv);
            L.bv = bind_vector(need_tensor(f, p + "attn_v.bias"), nkv);
            L.bo = bind_vector(need_tensor(f, p + "attn_output.bias"), d);
            L.sinks = bind_vector(need_tensor(f, p + "attn_sinks.weight"), hp_.n_head);
            L.post_attn_norm = bind_vector(need_tensor(f, p + "post_attention_norm.weight"), d);
            L.router = bind_matrix(need_tensor(f, p + "ffn_gate_inp.weight"), d, ne, types);
            L.router_bias = bind_vector(need_tensor(f, p + "ffn_gate_inp.bias"), ne);
            L.gate = bind_matrices(need_tensor(f, p + "ffn_gate_exps.weight"), d, ff, ne, types);
            L.up = bind_matrices(need_tensor(f, p + "ffn_up_exps.weight"), d, ff, ne, types);
            L.down = bind_matrices(need_tensor(f, p + "ffn_down_exps.weight"), ff, d, ne, types);
            L.gate_b = bind_vectors(need_tensor(f, p + "ffn_gate_exps.bias"), ff, ne);
            L.up_b = bind_vectors(need_tensor(f, p + "ffn_up_exps.bias"), ff, ne);
            L.down_b = bind_vectors(need_tensor(f, p + "ffn_down_exps.bias"), d, ne);
            L.local = hp_.sliding_window > 0 && l % 2 == 0;
            layers_.push_back(std::move(L));
        }
        rope_.emplace(hd, engine::RopeSpec::from_hparams(hp_, {}), true);
        route_ = {RouteSpec::TopKSoftmax, hp_.n_expert_used, false};
    }

    const model::HParams& hparams() const override { return hp_; }

    void forward(const Batch& batch, std::vector<float>& x) override {
        const int64_t T = batch.size(), d = hp_.n_embd, hd = hp_.head_dim;
        b_.resize(hp_, T, x);
        rope_->prepare(batch.pos);
        embed(io_.tok_embd, batch.tokens, 1.0f, x.data());
        AttnSpec spec = AttnSpec::of(hp_);
        for (size_t l = 0; l < layers_.size(); ++l) {
            const GptOssLayer& L = layers_[l];
            const auto layer = static_cast<int64_t>(l);
            rmsnorm_rows(b_.xb.data(), x.data(), L.attn_norm, T, d, hp_.rms_eps);
            c_.matmul({{&L.wq, b_.q.data()}, {&L.wk, b_.k.data()}, {&L.wv, b_.v.data()}}, b_.xb.data(), T);
            add_bias(b_.q.data(), L.bq, T);
            add_bias(b_.k.data(), L.bk, T);
            add_bias(b_.v.data(), L.bv, T);
            rope_store_kv(batch, layer, *rope_, b_.q.data(), hp_.n_head, b_.k.data(), b_.v.data(), hp_.n_head_kv, hd);
            spec.window = L.local ? hp_.sliding_window : 0;
            spec.sinks = &L.sinks;
            attention(c_, batch, layer, spec, b_.q.data(), b_.att.data());
            c_.matmul({{&L.wo, b_.xb.data()}}, b_.att.data(), T);
            add_bias(b_.xb.data(), L.bo, T);
            add_rows(x.data(), b_.xb.data(), T * d);
            rmsnorm_rows(b_.xb.data(), x.data(), L.post_attn_norm, T, d, hp_.rms_eps);
            ffn(L, b_.xb.data(), T);
            add_rows(x.data(), b_.xb.data(), T * d);
        }
    }

    void logits(const float* x, int64_t n, float* out) override {
        output_logits(c_, x, n, io_.output_norm, hp_.rms_eps, io_.output, xn_, out);
    }

private:
    // The feed-forward step: the mixture of clamped-SwiGLU experts with biases (moe.hpp).
    void ffn(const GptOssLayer& L, float* xb, int64_t T) {
        ExpertLayer e;
        e.router = &L.router;
        e.router_bias = &L.router_bias;
        e.gate = L.gate;
        e.up = L.up;
        e.down = L.down;
        e.gate_bias = L.gate_b;
        e.up_bias = L.up_b;
        e.down_bias = L.down_b;
        e.act = ExpertAct::ClampedSwiGLU;
        moe_.run(c_, e, route_, xb, T);
    }

    model::HParams hp_;
    Compute& c_;
    engine::IoWeights io_;
    std::vector<GptOssLayer> layers_;
    std::optional<Rope> rope_;
    RouteSpec route_;
    MoeFfn moe_;
    StepBuffers b_;
    std::vector<float> xn_;
};

}  // namespace

std::unique_ptr<CpuArchitecture> make_gpt_oss(const model::GgufFile& f, Compute& compute) {
    return std::make_unique<GptOss>(f, compute);
}

}  // namespace loom::cpu
