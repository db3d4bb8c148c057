// CPU forward pass for llama-family models; see cpu_backend.hpp.
#include "engine/backends/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "engine/backends/cpu/llama_weights.hpp"
#include "engine/backends/cpu/matvec.hpp"
#include "engine/backends/cpu/thread_pool.hpp"
#include "model/quant.hpp"
#include "model/vocab.hpp"

namespace loom::cpu {
namespace {

constexpr int64_t kChunk = 32;  // prefill tokens per forward pass (bounds activation memory)

class CpuSequence final : public engine::Sequence {
public:
    CpuSequence(int64_t capacity, int n_layer, int64_t kv_dim)
        : capacity(capacity), k(static_cast<size_t>(n_layer)), v(static_cast<size_t>(n_layer)) {
        for (int l = 0; l < n_layer; ++l) {
            k[static_cast<size_t>(l)].resize(static_cast<size_t>(capacity * kv_dim));
            v[static_cast<size_t>(l)].resize(static_cast<size_t>(capacity * kv_dim));
        }
    }
    void advance(int64_t n) { n_past_ += n; }

    int64_t capacity;
    std::vector<std::vector<float>> k, v;  // [layer][pos * kv_dim + j]
    std::vector<float> logits;             // last position's logits [n_vocab]
};

void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

// Causal attention of one query over n_kv cached positions in F32: scores
// q.k * scale, softmax around the maximum (sum in double), weighted sum of V.
// q: [hd]; K, V: rows of stride `stride` floats; out: [hd].
void attend(const float* q, const float* K, const float* V, int64_t stride, int64_t n_kv, int64_t hd, float scale,
            float* out) {
    thread_local std::vector<float> sc;
    sc.resize(static_cast<size_t>(n_kv));
    float mx = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
        const float* kk = K + j * stride;
        float s = 0;
        for (int64_t e = 0; e < hd; ++e) s += q[e] * kk[e];
        sc[static_cast<size_t>(j)] = s * scale;
        mx = std::max(mx, sc[static_cast<size_t>(j)]);
    }
    double sum = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
        sc[static_cast<size_t>(j)] = std::exp(sc[static_cast<size_t>(j)] - mx);
        sum += sc[static_cast<size_t>(j)];
    }
    std::fill_n(out, hd, 0.0f);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n_kv; ++j) {
        const float* vv = V + j * stride;
        const float p = sc[static_cast<size_t>(j)] * inv;
        for (int64_t e = 0; e < hd; ++e) out[e] += p * vv[e];
    }
}

class CpuBackend final : public engine::Backend {
public:
    CpuBackend(model::GgufFile file, const CpuOptions& opts, const std::string& path)
        : file_(std::move(file)),
          w_(LlamaWeights::bind(file_)),
          pool_(opts.threads > 0 ? opts.threads : std::max(1u, std::thread::hardware_concurrency())) {
        const auto& hp = w_.hp;
        const model::Vocab vocab = model::Vocab::from_gguf(file_);
        if (vocab.size() > hp.n_vocab)
            throw model::ModelError("the vocabulary has " + std::to_string(vocab.size()) +
                                    " tokens but the model only " + std::to_string(hp.n_vocab) + " logits");
        info_.name = hp.name.empty() ? std::filesystem::path(path).filename().string() : hp.name;
        info_.backend = "cpu";
        info_.n_vocab = hp.n_vocab;
        info_.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : hp.n_ctx_train;
        info_.bos = vocab.bos;
        info_.eos = vocab.eos;
        info_.eog = vocab.eog;
        kv_dim_ = int64_t{hp.n_head_kv} * hp.head_dim;
    }

    const engine::ModelInfo& info() const override { return info_; }

    std::unique_ptr<engine::Sequence> new_sequence(int64_t capacity) override {
        if (capacity <= 0 || capacity > info_.n_ctx)
            throw std::invalid_argument("sequence capacity " + std::to_string(capacity) + " outside 1.." +
                                        std::to_string(info_.n_ctx));
        return std::make_unique<CpuSequence>(capacity, w_.hp.n_layer, kv_dim_);
    }

    void eval(engine::Sequence& s, std::span<const int32_t> tokens, std::vector<engine::SampleResult>* scores,
              int prompt_k) override {
        auto& seq = static_cast<CpuSequence&>(s);
        if (tokens.empty()) return;
        if (seq.n_past() + static_cast<int64_t>(tokens.size()) > seq.capacity)
            throw std::length_error("sequence is full");
        for (int32_t t : tokens)
            if (t < 0 || t >= info_.n_vocab) throw std::out_of_range("token id " + std::to_string(t) + " out of range");
        const auto n = static_cast<int64_t>(tokens.size());
        for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
            const int64_t m = std::min(kChunk, n - c0);
            const bool all = scores != nullptr;
            forward(seq, tokens.subspan(static_cast<size_t>(c0), static_cast<size_t>(m)), all);
            if (all) {
                // logits_ row t predicts token c0 + t + 1.
                for (int64_t t = 0; t < m && c0 + t + 1 < n; ++t)
                    scores->push_back(engine::score_token(
                        std::span<const float>(logits_.data() + t * info_.n_vocab, static_cast<size_t>(info_.n_vocab)),
                        tokens[static_cast<size_t>(c0 + t + 1)], prompt_k));
            }
            const float* last = logits_.data() + (all ? (m - 1) * info_.n_vocab : 0);
            seq.logits.assign(last, last + info_.n_vocab);
        }
    }

    engine::SampleResult sample(engine::Sequence& s, const engine::SamplingParams& params,
                                const engine::TokenHistory& history, double u) override {
        auto& seq = static_cast<CpuSequence&>(s);
        if (seq.logits.empty()) throw std::logic_error("sample() before eval()");
        return engine::sample_logits(seq.logits, params, history, u, scratch_);
    }

private:
    // Y[t][r] = W.row(r) . X[t] for t < T (X: [T][W.cols], Y: [T][W.rows]).
    void matmul(const Matrix& W, const float* X, int64_t T, float* Y) {
        const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, W.cols * T));
        pool_.parallel_for(W.rows, grain, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) dot_row_multi(W.type, W.row(r), W.cols, X, W.cols, T, Y + r, W.rows);
        });
    }

    void rope(float* vecs, int64_t n_heads, int64_t pos) {
        const auto& hp = w_.hp;
        const int64_t half = hp.rope_dim / 2;
        for (int64_t i = 0; i < half; ++i) {
            double theta = static_cast<double>(pos) * hp.rope_scale *
                           std::pow(static_cast<double>(hp.rope_base), -2.0 * static_cast<double>(i) / hp.rope_dim);
            if (!w_.rope_freqs.empty()) theta /= w_.rope_freqs[static_cast<size_t>(i)];
            const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
            for (int64_t h = 0; h < n_heads; ++h) {
                float* v = vecs + h * hp.head_dim;
                const int64_t a = w_.neox_rope ? i : 2 * i, b = w_.neox_rope ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
    }

    void forward(CpuSequence& seq, std::span<const int32_t> toks, bool all_logits) {
        const auto& hp = w_.hp;
        const int64_t T = static_cast<int64_t>(toks.size()), d = hp.n_embd, hd = hp.head_dim;
        const int64_t nq = int64_t{hp.n_head} * hd, nkv = kv_dim_, ff = hp.n_ff;
        const int64_t group = hp.n_head / hp.n_head_kv;
        const int64_t p0 = seq.n_past();
        x_.resize(static_cast<size_t>(T * d));
        xb_.resize(static_cast<size_t>(T * std::max(d, nq)));
        q_.resize(static_cast<size_t>(T * nq));
        k_.resize(static_cast<size_t>(T * nkv));
        v_.resize(static_cast<size_t>(T * nkv));
        att_.resize(static_cast<size_t>(T * nq));
        g_.resize(static_cast<size_t>(T * ff));
        u_.resize(static_cast<size_t>(T * ff));

        for (int64_t t = 0; t < T; ++t)
            model::dequantize_row(w_.tok_embd.type, w_.tok_embd.row(toks[static_cast<size_t>(t)]), &x_[t * d], d);

        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (size_t l = 0; l < w_.layers.size(); ++l) {
            const LayerWeights& L = w_.layers[l];
            // Attention block.
            for (int64_t t = 0; t < T; ++t) rmsnorm(&xb_[t * d], &x_[t * d], L.attn_norm.data(), d, hp.rms_eps);
            matmul(L.wq, xb_.data(), T, q_.data());
            matmul(L.wk, xb_.data(), T, k_.data());
            matmul(L.wv, xb_.data(), T, v_.data());
            for (int64_t t = 0; t < T; ++t) {
                for (int64_t i = 0; i < static_cast<int64_t>(L.bq.size()); ++i) q_[t * nq + i] += L.bq[i];
                for (int64_t i = 0; i < static_cast<int64_t>(L.bk.size()); ++i) k_[t * nkv + i] += L.bk[i];
                for (int64_t i = 0; i < static_cast<int64_t>(L.bv.size()); ++i) v_[t * nkv + i] += L.bv[i];
                if (!L.q_norm.empty()) {
                    for (int64_t h = 0; h < hp.n_head; ++h)
                        rmsnorm(&q_[t * nq + h * hd], &q_[t * nq + h * hd], L.q_norm.data(), hd, hp.rms_eps);
                    for (int64_t h = 0; h < hp.n_head_kv; ++h)
                        rmsnorm(&k_[t * nkv + h * hd], &k_[t * nkv + h * hd], L.k_norm.data(), hd, hp.rms_eps);
                }
                rope(&q_[t * nq], hp.n_head, p0 + t);
                rope(&k_[t * nkv], hp.n_head_kv, p0 + t);
                std::copy_n(&k_[t * nkv], nkv, &seq.k[l][static_cast<size_t>((p0 + t) * nkv)]);
                std::copy_n(&v_[t * nkv], nkv, &seq.v[l][static_cast<size_t>((p0 + t) * nkv)]);
            }
            const float* K = seq.k[l].data();
            const float* V = seq.v[l].data();
            pool_.parallel_for(T * hp.n_head, 1, [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) {
                    const int64_t t = i / hp.n_head, h = i % hp.n_head, kvh = h / group;
                    attend(&q_[t * nq + h * hd], K + kvh * hd, V + kvh * hd, nkv, p0 + t + 1, hd, scale,
                           &att_[t * nq + h * hd]);
                }
            });
            matmul(L.wo, att_.data(), T, xb_.data());
            for (int64_t i = 0; i < T * d; ++i) x_[i] += xb_[i];

            // Feed-forward block: down(silu(gate(x)) * up(x)).
            for (int64_t t = 0; t < T; ++t) rmsnorm(&xb_[t * d], &x_[t * d], L.ffn_norm.data(), d, hp.rms_eps);
            matmul(L.gate, xb_.data(), T, g_.data());
            matmul(L.up, xb_.data(), T, u_.data());
            for (int64_t i = 0; i < T * ff; ++i) g_[i] = g_[i] / (1.0f + std::exp(-g_[i])) * u_[i];
            matmul(L.down, g_.data(), T, xb_.data());
            for (int64_t i = 0; i < T * d; ++i) x_[i] += xb_[i];
        }
        seq.advance(T);

        // Logits for the last position, or for every position when scoring the prompt.
        const int64_t first = all_logits ? 0 : T - 1, rows = T - first;
        for (int64_t t = 0; t < rows; ++t) rmsnorm(&xb_[t * d], &x_[(first + t) * d], w_.output_norm.data(), d, hp.rms_eps);
        logits_.resize(static_cast<size_t>(rows * info_.n_vocab));
        matmul(w_.output, xb_.data(), rows, logits_.data());
    }

    model::GgufFile file_;
    LlamaWeights w_;
    engine::ModelInfo info_;
    ThreadPool pool_;
    int64_t kv_dim_ = 0;
    engine::SamplerScratch scratch_;
    std::vector<float> x_, xb_, q_, k_, v_, att_, g_, u_, logits_;
};

}  // namespace

std::unique_ptr<engine::Backend> make_cpu_backend(const std::string& path, const CpuOptions& opts) {
    return std::make_unique<CpuBackend>(model::GgufFile::open(path), opts, path);
}

}  // namespace loom::cpu
