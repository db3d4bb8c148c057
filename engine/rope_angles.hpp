// The cos/sin of rotary position embeddings for every (position, rotated pair), computed once
// on the host and shared by the CPU forward pass (ops.hpp's Rope) and the GPU backend's RoPE
// table, so both engines rotate by the same F32 values.
//
// Sources: RoFormer (Su et al. 2021) for the angle pos * base^(-2i/rope_dim); linear position
// interpolation (Chen et al. 2023); YaRN (Peng et al. 2023, "YaRN: Efficient Context Window
// Extension", sections 3.2-3.4: the per-dimension ramp between interpolated and extrapolated
// angles, and the attention temperature 0.1 ln(s) + 1, applied to cos and sin); the GGUF keys
// `<arch>.rope.scaling.*` and ggml's reading of them (correction range floor/ceil'ed, ggml.c
// ggml_rope_yarn_corr_dims, read, not copied); per-pair frequency divisors from Llama 3.1's
// rope_freqs.weight and Phi-3's LongRoPE rope_factors_{short,long}.weight.
#pragma once

#include <cstdint>
#include <vector>

#include "model/gguf/hparams.hpp"

namespace loom::engine {

/// Everything that fixes the rotation angle of pair i < rope_dim / 2 at a position.
struct RopeSpec {
    int64_t rope_dim = 0;          ///< rotated dimensions per head (even)
    double base = 10000.0;         ///< rope.freq_base
    double freq_scale = 1.0;       ///< linear and YaRN scaling: 1 / factor (positions interpolated)
    std::vector<float> freq_div;   ///< per-pair divisors of the frequency [rope_dim / 2], or empty
    bool yarn = false;             ///< YaRN: mix interpolated and extrapolated angles per pair
    int64_t yarn_orig_ctx = 0;     ///< YaRN: the context the model was trained with before scaling
    double yarn_beta_fast = 32.0;  ///< YaRN: rotations per original context where the ramp starts
    double yarn_beta_slow = 1.0;   ///< YaRN: ... and where it ends
    double attn_factor = 1.0;      ///< cos and sin are multiplied by this (YaRN multiplies it further)

    /// The spec of the common hyperparameters: rope_dim, base, scaling none/linear/yarn and
    /// rope.scaling.attn_factor (model::HParams), with the divisors `freq_div` (may be empty).
    static RopeSpec from_hparams(const model::HParams& hp, std::vector<float> freq_div);
};

/// Angles of a RopeSpec. Pair i has inverse frequency f_i = base^(-2i/rope_dim) / freq_div[i]
/// and, at position p, angle theta = p * freq_scale * f_i (linear or none). Under YaRN,
/// theta = (1 - r_i) * p * freq_scale * f_i + r_i * p * f_i with the ramp r_i = 1 - clamp((i -
/// lo) / max(0.001, hi - lo), 0, 1), where lo = max(0, floor(c(beta_fast))), hi = min(rope_dim -
/// 1, ceil(c(beta_slow))) and c(b) = rope_dim * ln(orig_ctx / (2 pi b)) / (2 ln base); and cos
/// and sin are multiplied by attn_factor * (1 + 0.1 ln(1 / freq_scale)). All in double, rounded
/// once to F32.
class RopeAngles {
public:
    /// Throws std::invalid_argument when rope_dim is odd or negative, freq_div is neither empty
    /// nor rope_dim / 2 long, or YaRN lacks an original context.
    explicit RopeAngles(RopeSpec spec);

    int64_t half() const { return half_; }
    /// cos_out[i], sin_out[i] for i < half() at position `pos` (>= 0).
    void at(int64_t pos, float* cos_out, float* sin_out) const;

private:
    RopeSpec s_;
    int64_t half_;
    double mscale_ = 1.0;
    std::vector<double> inv_freq_;  // [half]: base^(-2i/rope_dim) / freq_div[i]
    std::vector<double> ramp_;      // [half]: YaRN's extrapolation share r_i (empty without YaRN)
};

}  // namespace loom::engine
