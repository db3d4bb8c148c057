// The CPU engine's mixture-of-experts step (engine/backends/cpu/moe.hpp): routing rules, top-k
// ties, renormalisation, the shared expert's gate, and a batched step (tokens grouped by
// expert) against the same tokens run one at a time; the layer's output against a float64
// evaluation of the formula written here from the definitions (Mixtral; Qwen2-MoE; gpt-oss).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "engine/backends/cpu/moe.hpp"
#include "model/gguf/ggml_types.hpp"

using loom::cpu::Compute;
using loom::cpu::ExpertAct;
using loom::cpu::ExpertLayer;
using loom::cpu::MoeFfn;
using loom::cpu::route;
using loom::cpu::RouteSpec;
using loom::engine::Matrix;

namespace {

std::vector<int32_t> ids_of(const std::vector<float>& logits, const RouteSpec& s, std::vector<float>* w = nullptr) {
    std::vector<int32_t> ids(static_cast<size_t>(s.k));
    std::vector<float> ww(static_cast<size_t>(s.k));
    route(logits.data(), static_cast<int32_t>(logits.size()), s, ids.data(), ww.data());
    if (w) *w = ww;
    return ids;
}

// An F32 matrix [rows x cols] over v (which must outlive it).
Matrix f32(std::vector<float>& v, int64_t rows, int64_t cols) {
    Matrix m;
    m.type = static_cast<uint32_t>(loom::model::GgmlType::F32);
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = static_cast<size_t>(cols) * sizeof(float);
    m.data = reinterpret_cast<const uint8_t*>(v.data());
    return m;
}

// A random layer of n experts of width d, hidden ff, with the storage it views.
struct Layer {
    int64_t n, d, ff;
    std::vector<float> router;
    std::vector<std::vector<float>> g, u, dn;
    std::vector<float> sg, su, sd, sgi;
    std::vector<std::vector<float>> gb, ub, db;
    std::vector<Matrix> G, U, D;
    Matrix R, SG, SU, SD;
    ExpertLayer layer;

    Layer(int64_t n_, int64_t d_, int64_t ff_, uint32_t seed) : n(n_), d(d_), ff(ff_) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        auto draw = [&](int64_t k, float sdev) {
            std::vector<float> v(static_cast<size_t>(k));
            for (float& x : v) x = sdev * nd(rng);
            return v;
        };
        const float s = 1.0f / std::sqrt(static_cast<float>(d));
        router = draw(n * d, s);
        for (int64_t e = 0; e < n; ++e) {
            g.push_back(draw(ff * d, s));
            u.push_back(draw(ff * d, s));
            dn.push_back(draw(d * ff, 1.0f / std::sqrt(static_cast<float>(ff))));
            gb.push_back(draw(ff, 0.5f));
            ub.push_back(draw(ff, 0.5f));
            db.push_back(draw(d, 0.5f));
        }
        sg = draw(ff * d, s), su = draw(ff * d, s), sd = draw(d * ff, s), sgi = draw(d, s);
        R = f32(router, n, d);
        for (int64_t e = 0; e < n; ++e) {
            G.push_back(f32(g[static_cast<size_t>(e)], ff, d));
            U.push_back(f32(u[static_cast<size_t>(e)], ff, d));
            D.push_back(f32(dn[static_cast<size_t>(e)], d, ff));
        }
        SG = f32(sg, ff, d), SU = f32(su, ff, d), SD = f32(sd, d, ff);
        layer.router = &R;
        layer.gate = G;
        layer.up = U;
        layer.down = D;
    }
    void with_shared() {
        layer.shared_gate = &SG, layer.shared_up = &SU, layer.shared_down = &SD, layer.shared_gate_inp = &sgi;
    }
    void with_biases() { layer.gate_bias = gb, layer.up_bias = ub, layer.down_bias = db; }
};

double dot(const std::vector<float>& w, int64_t row, int64_t cols, const double* x) {
    double s = 0;
    for (int64_t i = 0; i < cols; ++i) s += static_cast<double>(w[static_cast<size_t>(row * cols + i)]) * x[i];
    return s;
}

// down(act(gate x + bg) * (up x + bu)) + bd in float64, from the definitions.
std::vector<double> ffn64(const std::vector<float>& g, const std::vector<float>& u, const std::vector<float>& dn,
                          const std::vector<float>* bg, const std::vector<float>* bu, const std::vector<float>* bd,
                          bool clamped, int64_t d, int64_t ff, const double* x) {
    std::vector<double> h(static_cast<size_t>(ff)), y(static_cast<size_t>(d));
    for (int64_t r = 0; r < ff; ++r) {
        double a = dot(g, r, d, x) + (bg ? (*bg)[static_cast<size_t>(r)] : 0.0);
        double b = dot(u, r, d, x) + (bu ? (*bu)[static_cast<size_t>(r)] : 0.0);
        if (clamped) {
            a = std::min(a, 7.0);
            b = std::clamp(b, -7.0, 7.0);
            h[static_cast<size_t>(r)] = a / (1 + std::exp(-1.702 * a)) * (b + 1);
        } else {
            h[static_cast<size_t>(r)] = a / (1 + std::exp(-a)) * b;
        }
    }
    for (int64_t r = 0; r < d; ++r)
        y[static_cast<size_t>(r)] = dot(dn, r, ff, h.data()) + (bd ? (*bd)[static_cast<size_t>(r)] : 0.0);
    return y;
}

std::vector<float> random_rows(int64_t T, int64_t d, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(T * d));
    for (float& v : x) v = nd(rng);
    return x;
}

}  // namespace

TEST_CASE("top-k ties go to the lower expert id, whatever the rule") {
    for (auto rule : {RouteSpec::SoftmaxTopK, RouteSpec::TopKSoftmax}) {
        RouteSpec s{rule, 2, true};
        CHECK(ids_of({1, 3, 3, 2}, s) == std::vector<int32_t>{1, 2});
        CHECK(ids_of({0.5f, 0.5f, 0.5f, 0.5f}, s) == std::vector<int32_t>{0, 1});
        CHECK(ids_of({-1, 2, 0, 2, 2}, {rule, 3, true}) == std::vector<int32_t>{1, 3, 4});
        CHECK(ids_of({4, 1, 4, 9}, s) == std::vector<int32_t>{3, 0});
    }
}

TEST_CASE("router weights: softmax over all, renormalised or not; top k then softmax (gpt-oss)") {
    // Logits ln 1 .. ln 4: the softmax over all four is 0.1, 0.2, 0.3, 0.4.
    const std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    std::vector<float> w;
    CHECK(ids_of(logits, {RouteSpec::SoftmaxTopK, 2, false}, &w) == std::vector<int32_t>{3, 2});
    CHECK(w[0] == Approx(0.4).epsilon(1e-6));  // Qwen2-MoE: not renormalised
    CHECK(w[1] == Approx(0.3).epsilon(1e-6));
    CHECK(ids_of(logits, {RouteSpec::SoftmaxTopK, 2, true}, &w) == std::vector<int32_t>{3, 2});
    CHECK(w[0] == Approx(4.0 / 7).epsilon(1e-6));  // Mixtral, Qwen3-MoE: renormalised
    CHECK(w[1] == Approx(3.0 / 7).epsilon(1e-6));
    CHECK(ids_of(logits, {RouteSpec::SoftmaxTopK, 3, false}, &w) == std::vector<int32_t>{3, 2, 1});
    CHECK(w[2] == Approx(0.2).epsilon(1e-6));
    // gpt-oss: the softmax of the k chosen logits (equal to the renormalised softmax).
    CHECK(ids_of(logits, {RouteSpec::TopKSoftmax, 3, false}, &w) == std::vector<int32_t>{3, 2, 1});
    CHECK(w[0] == Approx(4.0 / 9).epsilon(1e-6));
    CHECK(w[2] == Approx(2.0 / 9).epsilon(1e-6));
    // Large logits do not overflow.
    CHECK(ids_of({1000, 999, -1000}, {RouteSpec::SoftmaxTopK, 1, false}, &w) == std::vector<int32_t>{0});
    CHECK(w[0] == Approx(1 / (1 + std::exp(-1.0))).epsilon(1e-6));
    std::vector<int32_t> ids(2);
    CHECK_THROWS(route(logits.data(), 4, {RouteSpec::SoftmaxTopK, 5, false}, ids.data(), w.data()));
}

TEST_CASE("a mixture layer equals its float64 formula: routed experts, shared expert gate, biases") {
    Compute c(2);
    const int64_t n = 8, d = 32, ff = 24, T = 5;
    for (int variant = 0; variant < 3; ++variant) {
        INFO("variant " << variant);
        Layer L(n, d, ff, 7u + static_cast<uint32_t>(variant));
        RouteSpec spec{RouteSpec::SoftmaxTopK, 2, variant == 0};
        if (variant == 1) L.with_shared();  // Qwen2-MoE: not renormalised, shared expert
        if (variant == 2) {                 // gpt-oss: biases, clamped SwiGLU, top k then softmax
            L.with_biases();
            L.layer.act = ExpertAct::ClampedSwiGLU;
            spec = {RouteSpec::TopKSoftmax, 3, false};
        }
        auto x = random_rows(T, d, 11);
        if (variant == 2)
            for (float& v : x) v *= 6.0f;  // reach the clamps
        std::vector<float> y = x;
        MoeFfn moe;
        moe.run(c, L.layer, spec, y.data(), T);
        for (int64_t t = 0; t < T; ++t) {
            std::vector<double> xd(x.begin() + t * d, x.begin() + (t + 1) * d);
            // Router logits and weights in float64.
            std::vector<std::pair<double, int>> lg;
            for (int64_t e = 0; e < n; ++e) lg.emplace_back(dot(L.router, e, d, xd.data()), static_cast<int>(e));
            std::sort(lg.begin(), lg.end(), [](auto a, auto b) { return a.first > b.first; });
            double all = 0, chosen = 0;
            for (auto& [l, e] : lg) all += std::exp(l - lg[0].first);
            for (int j = 0; j < spec.k; ++j) chosen += std::exp(lg[static_cast<size_t>(j)].first - lg[0].first);
            std::vector<double> want(static_cast<size_t>(d), 0.0);
            for (int j = 0; j < spec.k; ++j) {
                const auto e = static_cast<size_t>(lg[static_cast<size_t>(j)].second);
                CHECK(moe.ids()[static_cast<size_t>(t * spec.k + j)] == static_cast<int32_t>(e));
                const double w = std::exp(lg[static_cast<size_t>(j)].first - lg[0].first) /
                                 (spec.rule == RouteSpec::SoftmaxTopK && !spec.renormalise ? all : chosen);
                const bool b = variant == 2;
                const auto o = ffn64(L.g[e], L.u[e], L.dn[e], b ? &L.gb[e] : nullptr, b ? &L.ub[e] : nullptr,
                                     b ? &L.db[e] : nullptr, b, d, ff, xd.data());
                for (int64_t i = 0; i < d; ++i) want[static_cast<size_t>(i)] += w * o[static_cast<size_t>(i)];
            }
            if (variant == 1) {
                double gl = 0;
                for (int64_t i = 0; i < d; ++i) gl += L.sgi[static_cast<size_t>(i)] * xd[static_cast<size_t>(i)];
                const double gate = 1 / (1 + std::exp(-gl));
                const auto o = ffn64(L.sg, L.su, L.sd, nullptr, nullptr, nullptr, false, d, ff, xd.data());
                for (int64_t i = 0; i < d; ++i) want[static_cast<size_t>(i)] += gate * o[static_cast<size_t>(i)];
            }
            for (int64_t i = 0; i < d; ++i) {
                INFO("token " << t << " element " << i);
                CHECK(y[static_cast<size_t>(t * d + i)] ==
                      Approx(want[static_cast<size_t>(i)]).margin(2e-5).epsilon(1e-5));
            }
        }
    }
}

TEST_CASE("a batched step (tokens grouped by expert) equals the tokens one at a time, bit for bit") {
    Compute c(2);
    const int64_t n = 8, d = 32, ff = 24, T = 19;
    Layer L(n, d, ff, 3);
    L.with_shared();
    const RouteSpec spec{RouteSpec::SoftmaxTopK, 2, true};
    const auto x = random_rows(T, d, 5);
    std::vector<float> batched = x;
    MoeFfn moe;
    moe.run(c, L.layer, spec, batched.data(), T);
    const auto ids = moe.ids();
    // Several experts ran, some for more than one token (so the grouping was exercised).
    std::vector<int> count(static_cast<size_t>(n), 0);
    for (int32_t e : ids) ++count[static_cast<size_t>(e)];
    CHECK(std::count_if(count.begin(), count.end(), [](int k) { return k > 1; }) >= 4);
    for (int64_t t = 0; t < T; ++t) {
        std::vector<float> one(x.begin() + t * d, x.begin() + (t + 1) * d);
        moe.run(c, L.layer, spec, one.data(), 1);
        CHECK(moe.ids()[0] == ids[static_cast<size_t>(t * 2)]);
        CHECK(moe.ids()[1] == ids[static_cast<size_t>(t * 2 + 1)]);
        for (int64_t i = 0; i < d; ++i) {
            INFO("token " << t << " element " << i);
            CHECK(one[static_cast<size_t>(i)] == batched[static_cast<size_t>(t * d + i)]);
        }
    }
}
