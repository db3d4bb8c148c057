// F32 operations of the CPU forward pass; see ops.hpp.
#include "engine/backends/cpu/ops.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace loom::cpu {

void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

float dot_f32(const float* a, const float* b, int64_t n) {
    float acc[8] = {};
    int64_t e = 0;
    for (; e + 8 <= n; e += 8)
        for (int l = 0; l < 8; ++l) acc[l] += a[e + l] * b[e + l];
    for (int l = 0; e < n; ++e, ++l) acc[l] += a[e] * b[e];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

Rope::Rope(int64_t head_dim, int64_t rope_dim, double base, double pos_scale, std::vector<float> freq_div, bool neox)
    : head_dim_(head_dim),
      half_(rope_dim / 2),
      base_(base),
      pos_scale_(pos_scale),
      freq_div_(std::move(freq_div)),
      neox_(neox) {
    if (rope_dim % 2 != 0 || rope_dim > head_dim || rope_dim < 0)
        throw std::invalid_argument("RoPE over " + std::to_string(rope_dim) + " of " + std::to_string(head_dim) +
                                    " dimensions");
    if (!freq_div_.empty() && static_cast<int64_t>(freq_div_.size()) != half_)
        throw std::invalid_argument("rope_freqs has " + std::to_string(freq_div_.size()) + " entries, expected " +
                                    std::to_string(half_));
    inv_freq_.resize(static_cast<size_t>(half_));
    for (int64_t i = 0; i < half_; ++i) {
        double f = std::pow(base_, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dim));
        if (!freq_div_.empty()) f /= freq_div_[static_cast<size_t>(i)];
        inv_freq_[static_cast<size_t>(i)] = f;
    }
}

void Rope::prepare(std::span<const int64_t> positions) {
    const auto n = static_cast<int64_t>(positions.size());
    cos_.resize(static_cast<size_t>(n * half_));
    sin_.resize(static_cast<size_t>(n * half_));
    for (int64_t t = 0; t < n; ++t) {
        const double pos = static_cast<double>(positions[static_cast<size_t>(t)]) * pos_scale_;
        for (int64_t i = 0; i < half_; ++i) {
            const double theta = pos * inv_freq_[static_cast<size_t>(i)];
            cos_[static_cast<size_t>(t * half_ + i)] = static_cast<float>(std::cos(theta));
            sin_[static_cast<size_t>(t * half_ + i)] = static_cast<float>(std::sin(theta));
        }
    }
}

void Rope::apply(float* vecs, int64_t n_heads, int64_t t) const {
    const float* c = cos_.data() + t * half_;
    const float* s = sin_.data() + t * half_;
    for (int64_t h = 0; h < n_heads; ++h) {
        float* v = vecs + h * head_dim_;
        if (neox_) {
            float* a = v;
            float* b = v + half_;
            for (int64_t i = 0; i < half_; ++i) {
                const float x0 = a[i], x1 = b[i];
                a[i] = x0 * c[i] - x1 * s[i];
                b[i] = x0 * s[i] + x1 * c[i];
            }
        } else {
            for (int64_t i = 0; i < half_; ++i) {
                const float x0 = v[2 * i], x1 = v[2 * i + 1];
                v[2 * i] = x0 * c[i] - x1 * s[i];
                v[2 * i + 1] = x0 * s[i] + x1 * c[i];
            }
        }
    }
}

void attend_paged(const float* q, const float* pool, const engine::KvLayout& layout, int64_t layer,
                  std::span<const int32_t> table, int64_t head_off, int64_t n_kv, int64_t hd, float scale, float* out,
                  float* scratch) {
    const int64_t bt = layout.block_tokens, stride = layout.kv_dim;
    // Walks the positions block by block: rows of one block are `stride` floats apart.
    auto each = [&](int v, auto&& fn) {
        for (int64_t j0 = 0, b = 0; j0 < n_kv; j0 += bt, ++b) {
            const float* base = pool + layout.offset(layer, table[static_cast<size_t>(b)], 0, v) + head_off;
            const int64_t m = std::min(bt, n_kv - j0);
            for (int64_t i = 0; i < m; ++i) fn(j0 + i, base + i * stride);
        }
    };
    float mx = -INFINITY;
    each(0, [&](int64_t j, const float* k) {
        const float s = dot_f32(q, k, hd) * scale;
        scratch[j] = s;
        mx = std::max(mx, s);
    });
    double sum = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
        scratch[j] = std::exp(scratch[j] - mx);
        sum += scratch[j];
    }
    std::fill_n(out, hd, 0.0f);
    const float inv = static_cast<float>(1.0 / sum);
    each(1, [&](int64_t j, const float* vv) {
        const float p = scratch[j] * inv;
        for (int64_t e = 0; e < hd; ++e) out[e] += p * vv[e];
    });
}

}  // namespace loom::cpu
