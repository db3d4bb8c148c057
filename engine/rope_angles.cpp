// RoPE angle tables; see rope_angles.hpp.
#include "engine/rope_angles.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace loom::engine {

RopeSpec RopeSpec::from_hparams(const model::HParams& hp, std::vector<float> freq_div) {
    RopeSpec s;
    s.rope_dim = hp.rope_dim;
    s.base = hp.rope_base;
    s.freq_scale = hp.rope_scale;
    s.freq_div = std::move(freq_div);
    s.yarn = hp.rope_scaling == "yarn";
    s.yarn_orig_ctx = hp.rope_orig_ctx;
    s.yarn_beta_fast = hp.yarn_beta_fast;
    s.yarn_beta_slow = hp.yarn_beta_slow;
    s.attn_factor = hp.rope_attn_factor;
    return s;
}

RopeAngles::RopeAngles(RopeSpec spec) : s_(std::move(spec)), half_(s_.rope_dim / 2) {
    if (s_.rope_dim % 2 != 0 || s_.rope_dim < 0)
        throw std::invalid_argument("RoPE over " + std::to_string(s_.rope_dim) + " dimensions");
    if (!s_.freq_div.empty() && static_cast<int64_t>(s_.freq_div.size()) != half_)
        throw std::invalid_argument("RoPE frequency factors have " + std::to_string(s_.freq_div.size()) +
                                    " entries, expected " + std::to_string(half_));
    inv_freq_.resize(static_cast<size_t>(half_));
    for (int64_t i = 0; i < half_; ++i) {
        double f = std::pow(s_.base, -2.0 * static_cast<double>(i) / static_cast<double>(s_.rope_dim));
        if (!s_.freq_div.empty()) f /= s_.freq_div[static_cast<size_t>(i)];
        inv_freq_[static_cast<size_t>(i)] = f;
    }
    mscale_ = s_.attn_factor;
    if (!s_.yarn) return;
    if (s_.yarn_orig_ctx <= 0) throw std::invalid_argument("YaRN RoPE scaling without an original context length");
    const double n = static_cast<double>(s_.rope_dim);
    // The pair index at which a wave turns `rot` times over the original context.
    auto corr = [&](double rot) {
        return n * std::log(static_cast<double>(s_.yarn_orig_ctx) / (rot * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(s_.base));
    };
    const double lo = std::max(0.0, std::floor(corr(s_.yarn_beta_fast)));
    const double hi = std::min(n - 1.0, std::ceil(corr(s_.yarn_beta_slow)));
    ramp_.resize(static_cast<size_t>(half_));
    for (int64_t i = 0; i < half_; ++i) {
        const double y = (static_cast<double>(i) - lo) / std::max(0.001, hi - lo);
        ramp_[static_cast<size_t>(i)] = 1.0 - std::clamp(y, 0.0, 1.0);
    }
    mscale_ *= 1.0 + 0.1 * std::log(1.0 / s_.freq_scale);
}

void RopeAngles::at(int64_t pos, float* cos_out, float* sin_out) const {
    const double p = static_cast<double>(pos);
    const double scaled = p * s_.freq_scale;
    for (int64_t i = 0; i < half_; ++i) {
        const double f = inv_freq_[static_cast<size_t>(i)];
        double theta = scaled * f;
        if (!ramp_.empty()) {
            const double r = ramp_[static_cast<size_t>(i)];
            theta = theta * (1.0 - r) + p * f * r;
        }
        cos_out[i] = static_cast<float>(std::cos(theta) * mscale_);
        sin_out[i] = static_cast<float>(std::sin(theta) * mscale_);
    }
}

}  // namespace loom::engine
