// The mixture-of-experts feed-forward step of the CPU forward pass (Mixtral, Qwen2-MoE,
// Qwen3-MoE, gpt-oss): a router scores the experts of each token, the token runs through the k
// chosen experts' gated FFNs, and its output is their weighted sum (plus, for Qwen2-MoE, a
// shared expert scaled by a sigmoid gate).
//
// Routing is per token and does not depend on the batch (batch invariance, cpu_backend.hpp):
// a step groups its tokens by expert and runs one batched product per expert over its tokens
// (Compute::matmul gives every row the bits it gives that row alone), then sums each token's
// expert outputs in its own slot order. Top-k ties go to the lower expert id: what ggml's CPU
// argsort gives (it swaps only on a strictly larger score, from the identity order; llama.cpp's
// top-k of experts is that argsort), and a rule that depends on nothing but the scores (exact
// ties are rare in practice; the shared references have router margins of 2e-3 or more).
//
// Sources: "Mixtral of Experts" (Jiang et al. 2024): softmax over the router logits, top 2,
// renormalised; the Qwen2-MoE and Qwen3 technical reports (Qwen3-MoE renormalises the top-k
// weights, norm_topk_prob; Qwen2-MoE does not and adds a shared expert gated by
// sigmoid(x . w)); the gpt-oss model card and reference implementation (top k of the raw
// router logits, then a softmax over those k; clamped SwiGLU with alpha 1.702, limit 7, and
// biases). llama.cpp's llm_graph::build_moe_ffn read for the GGUF conventions, not copied.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backends/cpu/compute.hpp"
#include "engine/tensor_bind.hpp"

namespace loom::cpu {

/// How a token's experts and their weights come from its router logits.
struct RouteSpec {
    enum Rule {
        SoftmaxTopK,  ///< softmax over all experts, then the k largest probabilities (Mixtral, Qwen)
        TopKSoftmax,  ///< the k largest logits, then a softmax over those k only (gpt-oss)
    };
    Rule rule = SoftmaxTopK;
    int32_t k = 1;             ///< experts per token (expert_used_count)
    bool renormalise = false;  ///< SoftmaxTopK: divide the k chosen probabilities by their sum
};

/// Routes one token: ids[0..k) = its experts, best first (ties: the lower id first), and
/// weights[0..k) their weights, from logits[0..n) (F32, n >= k >= 1). Computed in float64 and
/// rounded once to F32 per weight.
void route(const float* logits, int32_t n, const RouteSpec& spec, int32_t* ids, float* weights);

/// The activation of the experts' gated FFN.
enum class ExpertAct {
    SiLU,          ///< silu(gate) * up (SwiGLU)
    ClampedSwiGLU  ///< gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7), g * sigmoid(1.702 g) * (u + 1)
};

/// One layer's experts, views of the mapped file (and decoded biases) that must outlive it.
struct ExpertLayer {
    const engine::Matrix* router = nullptr;           ///< [n_expert x n_embd] (ffn_gate_inp)
    const std::vector<float>* router_bias = nullptr;  ///< [n_expert] or null (gpt-oss)
    std::span<const engine::Matrix> gate, up;         ///< n_expert matrices [n_ff_exp x n_embd]
    std::span<const engine::Matrix> down;             ///< n_expert matrices [n_embd x n_ff_exp]
    /// Per-expert biases ([n_expert] vectors of n_ff_exp, n_ff_exp, n_embd), empty when none.
    std::span<const std::vector<float>> gate_bias, up_bias, down_bias;
    ExpertAct act = ExpertAct::SiLU;
    /// Qwen2-MoE's shared expert (SwiGLU, every token), scaled by sigmoid(shared_gate . x);
    /// null when the model has none.
    const engine::Matrix *shared_gate = nullptr, *shared_up = nullptr, *shared_down = nullptr;
    const std::vector<float>* shared_gate_inp = nullptr;  ///< [n_embd] (ffn_gate_inp_shexp)
};

/// The mixture-of-experts FFN step with its scratch buffers (one per architecture instance).
class MoeFfn {
public:
    /// xb [T x n_embd] (the normalised rows) becomes, in place, each token's sum over its k
    /// experts of weight * expert(x) (plus the gated shared expert), the routing by `spec`.
    /// Every token's result is bit-identical to running it alone (T = 1).
    void run(Compute& compute, const ExpertLayer& layer, const RouteSpec& spec, float* xb, int64_t T);

    /// The last run's routing: [T x k] expert ids and weights (for tests).
    const std::vector<int32_t>& ids() const { return ids_; }
    const std::vector<float>& weights() const { return w_; }

private:
    std::vector<float> logits_, w_, xe_, ye_, g_, u_, slots_, sh_, gate_logit_;
    std::vector<int32_t> ids_;
    std::vector<int64_t> rows_;
};

}  // namespace loom::cpu
