// The mixture-of-experts FFN step; see moe.hpp.
#include "engine/backends/cpu/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "engine/backends/cpu/blocks.hpp"

namespace loom::cpu {
namespace {

// gpt-oss's clamped SwiGLU (moe.hpp): g[i] = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1).
void clamped_swiglu(float* g, const float* u, int64_t n) {
    constexpr float kLimit = 7.0f, kAlpha = 1.702f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = std::min(g[i], kLimit), y = std::clamp(u[i], -kLimit, kLimit);
        g[i] = x / (1.0f + std::exp(-kAlpha * x)) * (y + 1.0f);
    }
}

// y [n x n_embd] = expert e of `L` on the n rows x [n x n_embd]; g, u scratch.
void run_expert(Compute& c, const ExpertLayer& L, size_t e, const float* x, float* y, int64_t n, std::vector<float>& g,
                std::vector<float>& u) {
    const int64_t ff = L.gate[e].rows;
    g.resize(static_cast<size_t>(n * ff));
    u.resize(static_cast<size_t>(n * ff));
    c.matmul({{&L.gate[e], g.data()}, {&L.up[e], u.data()}}, x, n);
    if (!L.gate_bias.empty()) add_bias(g.data(), L.gate_bias[e], n);
    if (!L.up_bias.empty()) add_bias(u.data(), L.up_bias[e], n);
    if (L.act == ExpertAct::SiLU) swiglu(g.data(), u.data(), n * ff);
    else clamped_swiglu(g.data(), u.data(), n * ff);
    c.matmul({{&L.down[e], y}}, g.data(), n);
    if (!L.down_bias.empty()) add_bias(y, L.down_bias[e], n);
}

}  // namespace

void route(const float* logits, int32_t n, const RouteSpec& spec, int32_t* ids, float* weights) {
    const int32_t k = spec.k;
    if (k < 1 || k > n) throw std::invalid_argument("route: k must be in 1..n");
    // The k best by logit (the softmax keeps the order), ties to the lower id; a NaN logit
    // (from NaN activations, which the backend reports as the row's error) ranks last, so the
    // order stays a strict weak ordering.
    auto key = [&](int32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
    const double top = logits[order[0]];
    // The softmax over the k chosen (TopKSoftmax, or SoftmaxTopK renormalised: the same
    // weights), or over all n (SoftmaxTopK as it is), from the max.
    double denom = 0;
    for (int32_t j = 0; j < k; ++j) denom += std::exp(static_cast<double>(logits[order[static_cast<size_t>(j)]]) - top);
    if (spec.rule == RouteSpec::SoftmaxTopK && !spec.renormalise) {
        denom = 0;
        for (int32_t i = 0; i < n; ++i) denom += std::exp(static_cast<double>(logits[i]) - top);
    }
    for (int32_t j = 0; j < k; ++j) {
        ids[j] = order[static_cast<size_t>(j)];
        weights[j] = static_cast<float>(std::exp(static_cast<double>(logits[ids[j]]) - top) / denom);
    }
}

void MoeFfn::run(Compute& c, const ExpertLayer& L, const RouteSpec& spec, float* xb, int64_t T) {
    const int64_t d = L.router->cols, n_expert = L.router->rows, k = spec.k;
    // Route every token.
    logits_.resize(static_cast<size_t>(T * n_expert));
    c.matmul({{L.router, logits_.data()}}, xb, T);
    if (L.router_bias) add_bias(logits_.data(), *L.router_bias, T);
    ids_.resize(static_cast<size_t>(T * k));
    w_.resize(static_cast<size_t>(T * k));
    for (int64_t t = 0; t < T; ++t)
        route(logits_.data() + t * n_expert, static_cast<int32_t>(n_expert), spec, ids_.data() + t * k,
              w_.data() + t * k);
    // Each expert over the tokens routed to it, its outputs to their (token, slot).
    slots_.resize(static_cast<size_t>(T * k * d));
    for (int64_t e = 0; e < n_expert; ++e) {
        rows_.clear();
        for (int64_t i = 0; i < T * k; ++i)
            if (ids_[static_cast<size_t>(i)] == e) rows_.push_back(i);
        if (rows_.empty()) continue;
        const auto n = static_cast<int64_t>(rows_.size());
        xe_.resize(static_cast<size_t>(n * d));
        ye_.resize(static_cast<size_t>(n * d));
        for (int64_t r = 0; r < n; ++r) std::copy_n(xb + rows_[static_cast<size_t>(r)] / k * d, d, xe_.data() + r * d);
        run_expert(c, L, static_cast<size_t>(e), xe_.data(), ye_.data(), n, g_, u_);
        for (int64_t r = 0; r < n; ++r)
            std::copy_n(ye_.data() + r * d, d, slots_.data() + rows_[static_cast<size_t>(r)] * d);
    }
    // The shared expert (Qwen2-MoE) on a copy of the input, with its gate's logits.
    if (L.shared_gate) {
        sh_.assign(xb, xb + T * d);
        gate_logit_.resize(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) {
            float s = 0;
            for (int64_t i = 0; i < d; ++i) s += (*L.shared_gate_inp)[static_cast<size_t>(i)] * xb[t * d + i];
            gate_logit_[static_cast<size_t>(t)] = s;
        }
        gated_ffn(c, *L.shared_gate, *L.shared_up, *L.shared_down, Gate::SiLU, sh_.data(), T, g_, u_);
    }
    // Each token's weighted sum, in its slot order (best expert first), then the shared expert.
    for (int64_t t = 0; t < T; ++t) {
        float* y = xb + t * d;
        std::fill_n(y, d, 0.0f);
        for (int64_t s = 0; s < k; ++s) {
            const float w = w_[static_cast<size_t>(t * k + s)];
            const float* o = slots_.data() + (t * k + s) * d;
            for (int64_t i = 0; i < d; ++i) y[i] += w * o[i];
        }
        if (L.shared_gate) {
            const float g = 1.0f / (1.0f + std::exp(-gate_logit_[static_cast<size_t>(t)]));
            for (int64_t i = 0; i < d; ++i) y[i] += g * sh_[static_cast<size_t>(t * d + i)];
        }
    }
}

}  // namespace loom::cpu
