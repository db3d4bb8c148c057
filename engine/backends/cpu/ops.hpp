// The element-wise and attention operations of the CPU forward pass, in F32.
//
// Sources: RMSNorm (Zhang & Sennrich 2019), rotary position embeddings (Su et al.
// 2021; GGUF/llama.cpp conventions for the pair layout and rope_freqs.weight), scaled
// dot-product attention with a numerically stable softmax (Vaswani et al. 2017).
// Loops are written in fixed 8-float lanes so that GCC vectorizes them without
// -ffast-math; every result depends only on the inputs (not on threads or timing).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv_layout.hpp"
#include "engine/rope_angles.hpp"

namespace loom::cpu {

/// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] for i < n (out may alias x). The sum
/// of squares is taken in double.
void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps);

/// sum a[i] * b[i] for i < n in F32, over 8 lanes summed by a fixed tree.
float dot_f32(const float* a, const float* b, int64_t n);

/// Rotary position embedding, with cos/sin of every rotated pair precomputed once per
/// position (not per layer or head) by engine::RopeAngles (the angles, their scaling and the
/// YaRN/LongRoPE variants are documented there).
///
/// Pair i < rope_dim / 2 of each head of head_dim floats is (2i, 2i + 1) normally and
/// (i, i + rope_dim / 2) in "NEOX" order (qwen2, qwen3, gemma, phi3); the rest of the head
/// is not rotated.
class Rope {
public:
    /// Throws std::invalid_argument when rope_dim is odd or exceeds head_dim, or when the
    /// spec's frequency divisors are neither empty nor rope_dim / 2 long.
    Rope(int64_t head_dim, engine::RopeSpec spec, bool neox);

    /// Computes the tables for positions[0 .. n) (any positions, kept until the next call).
    void prepare(std::span<const int64_t> positions);
    /// Rotates n_heads consecutive heads at `vecs` by the angles of positions[t].
    void apply(float* vecs, int64_t n_heads, int64_t t) const;

private:
    int64_t head_dim_, half_;
    engine::RopeAngles angles_;
    bool neox_;
    std::vector<float> cos_, sin_;  // [n][half]
};

/// Causal attention of one query over positions [first, n_kv) of a sequence in the paged KV
/// cache (first > 0: a sliding window): scores s = q.k * scale, soft-capped to
/// softcap * tanh(s / softcap) when softcap > 0 (Gemma 2), softmax around the maximum (sum in
/// double), weighted sum of V, each in increasing position order (so the result does not
/// depend on how the sequence's positions were batched or which blocks hold them).
/// q: [hd]; pool: the F32 KV pool laid out by `layout` (engine/kv_layout.hpp); position p's
/// K (V) row is at layout.offset_at(layer, table, p, 0 (1)), and this head's hd floats start
/// `head_off` floats into it; table: the sequence's block table, covering n_kv positions;
/// out: [hd]; scratch: at least n_kv - first floats. An attention sink (gpt-oss: one learnt
/// logit per head, not scaled) joins the softmax's denominator only: `has_sink` adds
/// e^(sink - max) to it, the max taken over the scores and the sink.
void attend_paged(const float* q, const float* pool, const engine::KvLayout& layout, int64_t layer,
                  std::span<const int32_t> table, int64_t head_off, int64_t first, int64_t n_kv, int64_t hd,
                  float scale, float softcap, float* out, float* scratch, bool has_sink = false, float sink = 0.0f);

}  // namespace loom::cpu
