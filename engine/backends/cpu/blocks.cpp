// The CPU forward pass's building blocks; see blocks.hpp.
#include "engine/backends/cpu/blocks.hpp"

#include <algorithm>
#include <cmath>

#include "model/quant/quant.hpp"

namespace loom::cpu {

void embed(const engine::Matrix& emb, std::span<const int32_t> tokens, float scale, float* x) {
    const int64_t d = emb.cols;
    for (size_t t = 0; t < tokens.size(); ++t) {
        float* row = x + static_cast<int64_t>(t) * d;
        model::dequantize_row(emb.type, emb.row(tokens[t]), row, d);
        if (scale != 1.0f)
            for (int64_t i = 0; i < d; ++i) row[i] *= scale;
    }
}

void rmsnorm_rows(float* out, const float* x, const std::vector<float>& w, int64_t T, int64_t d, float eps) {
    for (int64_t t = 0; t < T; ++t) rmsnorm(out + t * d, x + t * d, w.data(), d, eps);
}

void add_rows(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void add_bias(float* y, const std::vector<float>& b, int64_t T) {
    const auto n = static_cast<int64_t>(b.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < n; ++i) y[t * n + i] += b[static_cast<size_t>(i)];
}

void head_rmsnorm(float* v, int64_t n, int64_t hd, const std::vector<float>& w, float eps) {
    if (w.empty()) return;
    for (int64_t h = 0; h < n; ++h) rmsnorm(v + h * hd, v + h * hd, w.data(), hd, eps);
}

void rope_store_kv(const Batch& batch, int64_t layer, const Rope& rope, float* q, int64_t n_head, float* k,
                   const float* v, int64_t n_head_kv, int64_t hd) {
    const int64_t nq = n_head * hd, nkv = n_head_kv * hd;
    for (int64_t t = 0; t < batch.size(); ++t) {
        rope.apply(q + t * nq, n_head, t);
        rope.apply(k + t * nkv, n_head_kv, t);
        const auto& table = batch.tables[static_cast<size_t>(t)];
        const int64_t p = batch.pos[static_cast<size_t>(t)];
        std::copy_n(k + t * nkv, nkv, batch.kv + batch.layout.offset_at(layer, table, p, 0));
        std::copy_n(v + t * nkv, nkv, batch.kv + batch.layout.offset_at(layer, table, p, 1));
    }
}

AttnSpec AttnSpec::of(const model::HParams& hp) {
    AttnSpec s;
    s.n_head = hp.n_head;
    s.n_head_kv = hp.n_head_kv;
    s.head_dim = hp.head_dim;
    s.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    return s;
}

void StepBuffers::resize(const model::HParams& hp, int64_t T, std::vector<float>& x) {
    const int64_t d = hp.n_embd, nq = int64_t{hp.n_head} * hp.head_dim, nkv = int64_t{hp.n_head_kv} * hp.head_dim;
    x.resize(static_cast<size_t>(T * d));
    xb.resize(static_cast<size_t>(T * std::max(d, nq)));
    q.resize(static_cast<size_t>(T * nq));
    k.resize(static_cast<size_t>(T * nkv));
    v.resize(static_cast<size_t>(T * nkv));
    att.resize(static_cast<size_t>(T * nq));
}

void output_logits(Compute& compute, const float* x, int64_t n, const std::vector<float>& norm, float eps,
                   const engine::Matrix& output, std::vector<float>& xn, float* out) {
    const int64_t d = output.cols;
    xn.resize(static_cast<size_t>(n * d));
    rmsnorm_rows(xn.data(), x, norm, n, d, eps);
    compute.matmul({{&output, out}}, xn.data(), n);
}

void attention(Compute& compute, const Batch& batch, int64_t layer, const AttnSpec& spec, const float* q, float* out) {
    const int64_t T = batch.size(), hd = spec.head_dim, nq = spec.n_head * hd;
    const int64_t group = spec.n_head / spec.n_head_kv;
    // Attention work per (position, head) is about 2 * context * hd multiply-adds.
    const int64_t grain = std::max<int64_t>(1, kParallelMacs * T / std::max<int64_t>(1, batch.ctx * hd * 2));
    compute.pool().parallel_for(T * spec.n_head, grain, [&](int64_t i0, int64_t i1) {
        thread_local std::vector<float> scores;
        if (scores.size() < static_cast<size_t>(batch.max_ctx)) scores.resize(static_cast<size_t>(batch.max_ctx));
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t t = i / spec.n_head, h = i % spec.n_head, kvh = h / group;
            const int64_t n_kv = batch.pos[static_cast<size_t>(t)] + 1;
            const int64_t first = spec.window > 0 ? std::max<int64_t>(0, n_kv - spec.window) : 0;
            attend_paged(q + t * nq + h * hd, batch.kv, batch.layout, layer, batch.tables[static_cast<size_t>(t)],
                         kvh * hd, first, n_kv, hd, spec.scale, spec.softcap, out + t * nq + h * hd, scores.data(),
                         spec.sinks != nullptr, spec.sinks ? (*spec.sinks)[static_cast<size_t>(h)] : 0.0f);
        }
    });
}

void swiglu(float* g, const float* u, int64_t n) {
    for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void geglu(float* g, const float* u, int64_t n) {
    constexpr float kSqrt2OverPi = 0.79788456080286536f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = g[i];
        g[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * u[i];
    }
}

void gated_ffn(Compute& compute, const engine::Matrix& gate, const engine::Matrix& up, const engine::Matrix& down,
               Gate act, float* xb, int64_t T, std::vector<float>& g, std::vector<float>& u) {
    const int64_t ff = gate.rows;
    g.resize(static_cast<size_t>(T * ff));
    u.resize(static_cast<size_t>(T * ff));
    compute.matmul({{&gate, g.data()}, {&up, u.data()}}, xb, T);
    if (act == Gate::SiLU) swiglu(g.data(), u.data(), T * ff);
    else geglu(g.data(), u.data(), T * ff);
    compute.matmul({{&down, xb}}, g.data(), T);
}

void softcap(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

}  // namespace loom::cpu
