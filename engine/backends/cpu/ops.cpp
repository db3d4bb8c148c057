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

Rope::Rope(int64_t head_dim, engine::RopeSpec spec, bool neox)
    : head_dim_(head_dim), half_(spec.rope_dim / 2), angles_(spec), neox_(neox) {
    if (spec.rope_dim > head_dim)
        throw std::invalid_argument("RoPE over " + std::to_string(spec.rope_dim) + " of " + std::to_string(head_dim) +
                                    " dimensions");
}

void Rope::prepare(std::span<const int64_t> positions) {
    const auto n = static_cast<int64_t>(positions.size());
    cos_.resize(static_cast<size_t>(n * half_));
    sin_.resize(static_cast<size_t>(n * half_));
    for (int64_t t = 0; t < n; ++t)
        angles_.at(positions[static_cast<size_t>(t)], cos_.data() + t * half_, sin_.data() + t * half_);
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
                  std::span<const int32_t> table, int64_t head_off, int64_t first, int64_t n_kv, int64_t hd,
                  float scale, float softcap, float* out, float* scratch, bool has_sink, float sink) {
    const int64_t bt = layout.block_tokens, stride = layout.kv_dim;
    // Walks positions first..n_kv-1 block by block: rows of one block are `stride` floats apart.
    auto each = [&](int v, auto&& fn) {
        for (int64_t b = first / bt, j0 = b * bt; j0 < n_kv; j0 += bt, ++b) {
            const float* base = pool + layout.offset(layer, table[static_cast<size_t>(b)], 0, v) + head_off;
            const int64_t i0 = std::max<int64_t>(0, first - j0), m = std::min(bt, n_kv - j0);
            for (int64_t i = i0; i < m; ++i) fn(j0 + i - first, base + i * stride);
        }
    };
    const int64_t n = n_kv - first;
    float mx = -INFINITY;
    each(0, [&](int64_t j, const float* k) {
        float s = dot_f32(q, k, hd) * scale;
        if (softcap > 0) s = softcap * std::tanh(s / softcap);
        scratch[j] = s;
        mx = std::max(mx, s);
    });
    if (has_sink) mx = std::max(mx, sink);
    double sum = has_sink ? std::exp(static_cast<double>(sink - mx)) : 0.0;
    for (int64_t j = 0; j < n; ++j) {
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
