// The building blocks that the architectures' CPU forward passes (arch/*.cpp) are written in,
// each over the whole flat batch (T tokens): embedding lookup, RMSNorm of rows and of heads,
// biases, RoPE with the K/V store into the paged pool, paged attention with an optional
// sliding window and soft-cap, the gated FFN activations and soft-capping. All F32; every
// result of a token depends only on that token's inputs and its sequence's cache (batch
// invariance, cpu_backend.hpp).
//
// Sources: RMSNorm (Zhang & Sennrich 2019); RoPE (Su et al. 2021); scaled dot-product
// attention (Vaswani et al. 2017); sliding-window attention (Mistral 7B, Jiang et al. 2023);
// attention logit soft-capping (Gemma 2 report, Gemma Team 2024); SwiGLU and GeGLU (Shazeer
// 2020); GELU and its tanh form (Hendrycks & Gimpel 2016).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backends/cpu/architecture.hpp"
#include "engine/backends/cpu/compute.hpp"
#include "engine/backends/cpu/ops.hpp"

namespace loom::cpu {

/// x[t][0..d) = row tokens[t] of the embedding matrix emb [n_vocab x d] (dequantized), times
/// `scale` when scale != 1 (Gemma: sqrt(d)).
void embed(const engine::Matrix& emb, std::span<const int32_t> tokens, float scale, float* x);

/// out[t] = rmsnorm(x[t], w, eps) (ops.hpp) for T rows of d floats (out may alias x).
void rmsnorm_rows(float* out, const float* x, const std::vector<float>& w, int64_t T, int64_t d, float eps);

/// x[i] += y[i] for i < n (the residual connection).
void add_rows(float* x, const float* y, int64_t n);

/// y[t][i] += b[i] for T rows of b.size() floats; nothing when b is empty.
void add_bias(float* y, const std::vector<float>& b, int64_t T);

/// RMSNorm of each of `n` head vectors of hd floats at v (in place) with weight w [hd]
/// (Qwen3's and Gemma 3's q/k norms); nothing when w is empty.
void head_rmsnorm(float* v, int64_t n, int64_t hd, const std::vector<float>& w, float eps);

/// For each token t of the batch: rotates its n_head query heads in q [T x n_head*hd] and its
/// n_head_kv key heads in k [T x n_head_kv*hd] by `rope` (prepared for batch.pos), then copies
/// its K and V (v [T x n_head_kv*hd]) into the pool at (layer, its position).
void rope_store_kv(const Batch& batch, int64_t layer, const Rope& rope, float* q, int64_t n_head, float* k,
                   const float* v, int64_t n_head_kv, int64_t hd);

/// The attention of one layer.
struct AttnSpec {
    int64_t n_head = 0, n_head_kv = 0, head_dim = 0;  ///< GQA: head h reads KV head h / (n_head / n_head_kv)
    float scale = 1.0f;                               ///< scores q.k * scale
    float softcap = 0.0f;                             ///< > 0: scores soft-capped (attend_paged)
    int32_t window = 0;                               ///< > 0: position p attends to positions p - window + 1 .. p only
    const std::vector<float>* sinks = nullptr;        ///< [n_head] attention sink logits (gpt-oss), or null

    /// hp's heads, scale 1/sqrt(head_dim) (in F32), no soft-cap, no window.
    static AttnSpec of(const model::HParams& hp);
};

/// The buffers of one step's attention block for T tokens of a model of hp's shape:
/// xb [T x max(n_embd, nq)] (the normalised input, then a projection back to n_embd),
/// q and att [T x nq], k and v [T x nkv] (nq = n_head * head_dim, nkv = n_head_kv * head_dim).
struct StepBuffers {
    std::vector<float> xb, q, k, v, att;
    /// Resizes them, and x to [T x n_embd].
    void resize(const model::HParams& hp, int64_t T, std::vector<float>& x);
};

/// out [n x n_vocab] = output . rmsnorm(x[k], norm, eps) for the n rows of x [n x n_embd]
/// (xn: scratch, resized), the output head of every architecture (before any soft-cap).
void output_logits(Compute& compute, const float* x, int64_t n, const std::vector<float>& norm, float eps,
                   const engine::Matrix& output, std::vector<float>& xn, float* out);

/// out [T x n_head*hd] = causal attention of every query head of q [T x n_head*hd] over its
/// sequence's positions 0..pos[t] (or the window) of `layer` in the pool, in parallel over
/// (token, head) on `compute`'s pool.
void attention(Compute& compute, const Batch& batch, int64_t layer, const AttnSpec& spec, const float* q, float* out);

/// g[i] = silu(g[i]) * u[i] = g / (1 + e^-g) * u for i < n (SwiGLU's gate, Shazeer 2020).
void swiglu(float* g, const float* u, int64_t n);

/// g[i] = gelu(g[i]) * u[i] for i < n (GeGLU), with GELU's tanh form gelu(x) = x/2 (1 +
/// tanh(sqrt(2/pi) (x + 0.044715 x^3))), Gemma's activation (gelu_pytorch_tanh).
void geglu(float* g, const float* u, int64_t n);

/// The activation of a gated feed-forward.
enum class Gate { SiLU, GeluTanh };  ///< swiglu, geglu

/// One gated feed-forward (a dense layer's FFN, or one expert of a mixture): xb [T x
/// gate.cols] (normalised input) becomes down(act(gate xb) * up xb) in place; g and u are
/// scratch (resized to T x gate.rows).
void gated_ffn(Compute& compute, const engine::Matrix& gate, const engine::Matrix& up, const engine::Matrix& down,
               Gate act, float* xb, int64_t T, std::vector<float>& g, std::vector<float>& u);

/// x[i] = cap * tanh(x[i] / cap) for i < n (Gemma 2's final logit soft-cap); cap > 0.
void softcap(float* x, int64_t n, float cap);

}  // namespace loom::cpu
