// CPU forward pass for llama-family models; see cpu_backend.hpp.
#include "engine/backends/cpu/cpu_backend.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <thread>

#include "engine/backends/cpu/matvec.hpp"
#include "engine/backends/cpu/ops.hpp"
#include "engine/backends/cpu/thread_pool.hpp"
#include "model/quant/quant.hpp"
#include "engine/llama_weights.hpp"
#include "model/gguf/vocab.hpp"

namespace loom::cpu {
namespace {

using engine::LayerWeights;
using engine::LlamaWeights;
using engine::Matrix;

constexpr int64_t kChunk = 32;  // prefill tokens per forward pass (bounds activation memory)
// A loop runs on several threads only when each thread's share is at least this many
// multiply-adds (~20-50 us): below that, waking a worker costs more than it saves.
constexpr int64_t kParallelMacs = 1 << 18;

// Threads by default: the CPUs this process may run on (its affinity mask, which
// containers and taskset narrow), else the machine's hardware threads.
int default_threads() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// One sequence's KV cache: per layer, capacity rows of kv_dim floats for K and for V.
// The rows are allocated uninitialized, so the pages of positions not yet reached are
// never touched and do not count towards resident memory.
class CpuSequence final : public engine::Sequence {
public:
    CpuSequence(int64_t capacity, int n_layer, int64_t kv_dim) : capacity(capacity) {
        for (int l = 0; l < n_layer; ++l) {
            k.emplace_back(new float[static_cast<size_t>(capacity * kv_dim)]);
            v.emplace_back(new float[static_cast<size_t>(capacity * kv_dim)]);
        }
    }
    void advance(int64_t n) { n_past_ += n; }

    int64_t capacity;
    std::vector<std::unique_ptr<float[]>> k, v;  // [layer][pos * kv_dim + j]
    std::vector<float> logits;                   // last position's logits [n_vocab]
};

// One product of a fused matmul: Y[t][r] = W.row(r) . X[t].
struct Product {
    const Matrix* W;
    float* Y;
};

class CpuBackend final : public engine::Backend {
public:
    CpuBackend(model::GgufFile file, const CpuOptions& opts, const std::string& path)
        : file_(std::move(file)),
          w_(LlamaWeights::bind(file_, {"the CPU backend", can_dot})),
          pool_(opts.threads > 0 ? opts.threads : default_threads()),
          rope_(w_.hp.head_dim, w_.hp.rope_dim, w_.hp.rope_base, w_.hp.rope_scale, w_.rope_freqs, w_.neox_rope) {
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
    // Y_k[t][r] = W_k.row(r) . X[t] for every product k (all W_k have X's width) and
    // t < T, as one parallel loop over the rows of all of them (one barrier, not one
    // per matrix). Each row is decoded once for all T vectors (dot_row_multi).
    void matmul(std::initializer_list<Product> products, const float* X, int64_t T) {
        int64_t total = 0;
        const int64_t cols = products.begin()->W->cols;
        for (const Product& p : products) total += p.W->rows;
        const int64_t grain = std::max<int64_t>(1, kParallelMacs / std::max<int64_t>(1, cols * T));
        pool_.parallel_for(total, grain, [&](int64_t r0, int64_t r1) {
            int64_t base = 0;
            for (const Product& p : products) {
                const Matrix& W = *p.W;
                const int64_t a = std::max(r0, base), b = std::min(r1, base + W.rows);
                for (int64_t r = a; r < b; ++r)
                    dot_row_multi(W.type, W.row(r - base), W.cols, X, W.cols, T, p.Y + (r - base), W.rows);
                base += W.rows;
            }
        });
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
        rope_.prepare(p0, T);

        for (int64_t t = 0; t < T; ++t)
            model::dequantize_row(w_.tok_embd.type, w_.tok_embd.row(toks[static_cast<size_t>(t)]), &x_[t * d], d);

        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        // Attention work per (position, head) is about (p0 + t) * hd multiply-adds.
        const int64_t att_grain = std::max<int64_t>(1, kParallelMacs / std::max<int64_t>(1, (p0 + T) * hd * 2));
        for (size_t l = 0; l < w_.layers.size(); ++l) {
            const LayerWeights& L = w_.layers[l];
            // Attention block.
            for (int64_t t = 0; t < T; ++t) rmsnorm(&xb_[t * d], &x_[t * d], L.attn_norm.data(), d, hp.rms_eps);
            matmul({{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xb_.data(), T);
            float* K = seq.k[l].get();
            float* V = seq.v[l].get();
            for (int64_t t = 0; t < T; ++t) {
                float* q = &q_[t * nq];
                float* k = &k_[t * nkv];
                float* v = &v_[t * nkv];
                for (int64_t i = 0; i < static_cast<int64_t>(L.bq.size()); ++i) q[i] += L.bq[i];
                for (int64_t i = 0; i < static_cast<int64_t>(L.bk.size()); ++i) k[i] += L.bk[i];
                for (int64_t i = 0; i < static_cast<int64_t>(L.bv.size()); ++i) v[i] += L.bv[i];
                if (!L.q_norm.empty()) {
                    for (int64_t h = 0; h < hp.n_head; ++h) rmsnorm(q + h * hd, q + h * hd, L.q_norm.data(), hd, hp.rms_eps);
                    for (int64_t h = 0; h < hp.n_head_kv; ++h)
                        rmsnorm(k + h * hd, k + h * hd, L.k_norm.data(), hd, hp.rms_eps);
                }
                rope_.apply(q, hp.n_head, t);
                rope_.apply(k, hp.n_head_kv, t);
                std::copy_n(k, nkv, K + (p0 + t) * nkv);
                std::copy_n(v, nkv, V + (p0 + t) * nkv);
            }
            pool_.parallel_for(T * hp.n_head, att_grain, [&](int64_t i0, int64_t i1) {
                thread_local std::vector<float> scores;
                scores.resize(static_cast<size_t>(p0 + T));
                for (int64_t i = i0; i < i1; ++i) {
                    const int64_t t = i / hp.n_head, h = i % hp.n_head, kvh = h / group;
                    attend(&q_[t * nq + h * hd], K + kvh * hd, V + kvh * hd, nkv, p0 + t + 1, hd, scale,
                           &att_[t * nq + h * hd], scores.data());
                }
            });
            matmul({{&L.wo, xb_.data()}}, att_.data(), T);
            for (int64_t i = 0; i < T * d; ++i) x_[i] += xb_[i];

            // Feed-forward block: down(silu(gate(x)) * up(x)).
            for (int64_t t = 0; t < T; ++t) rmsnorm(&xb_[t * d], &x_[t * d], L.ffn_norm.data(), d, hp.rms_eps);
            matmul({{&L.gate, g_.data()}, {&L.up, u_.data()}}, xb_.data(), T);
            for (int64_t i = 0; i < T * ff; ++i) g_[i] = g_[i] / (1.0f + std::exp(-g_[i])) * u_[i];
            matmul({{&L.down, xb_.data()}}, g_.data(), T);
            for (int64_t i = 0; i < T * d; ++i) x_[i] += xb_[i];
        }
        seq.advance(T);

        // Logits for the last position, or for every position when scoring the prompt.
        const int64_t first = all_logits ? 0 : T - 1, rows = T - first;
        for (int64_t t = 0; t < rows; ++t) rmsnorm(&xb_[t * d], &x_[(first + t) * d], w_.output_norm.data(), d, hp.rms_eps);
        logits_.resize(static_cast<size_t>(rows * info_.n_vocab));
        matmul({{&w_.output, logits_.data()}}, xb_.data(), rows);
    }

    model::GgufFile file_;
    LlamaWeights w_;
    engine::ModelInfo info_;
    ThreadPool pool_;
    Rope rope_;
    int64_t kv_dim_ = 0;
    engine::SamplerScratch scratch_;
    std::vector<float> x_, xb_, q_, k_, v_, att_, g_, u_, logits_;
};

}  // namespace

std::unique_ptr<engine::Backend> make_cpu_backend(const std::string& path, const CpuOptions& opts) {
    return std::make_unique<CpuBackend>(model::GgufFile::open(path), opts, path);
}

}  // namespace loom::cpu
