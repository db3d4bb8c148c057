// An independent float64 forward pass for llama-family GGUFs, for tests.
//
// Written from the architecture papers, not from loom's backend: naive loops, double
// everywhere, the KV history kept as plain vectors. It reads hyperparameters straight
// from the GGUF keys (not through model::HParams) and shares only the GGUF reader and
// model::dequantize_row (itself checked block by block in tests/unit/quants.cpp) with
// the engine. Covers llama/mistral (RoPE on pairs (2i, 2i+1)), qwen2 (q/k/v biases)
// and qwen3 (per-head RMSNorm of q and k before RoPE), which rotate pairs
// (i, i + rope_dim/2) ("NEOX" order), Llama 3.1's rope_freqs.weight divisors, linear
// RoPE scaling (rope.scaling.type = linear, positions divided by the factor), YaRN scaling,
// a declared sliding window (attention.sliding_window) and tied output embeddings (no
// output.weight); and gemma2/gemma3 (embeddings times sqrt(dim), norms after attention and
// FFN, GeGLU with GELU's tanh form (Gemma's gelu_pytorch_tanh), soft-capped attention scores and logits, local window
// layers and global layers alternating, gemma3's local layers with their own unscaled RoPE
// base) and phi3 (fused QKV and gate/up, LongRoPE factors and attention factor); and the
// mixtures of experts: a llama file with expert_count (Mixtral: softmax over all experts, the
// top k, their weights divided by their sum), qwen3moe (the same, with qwen3's q/k norms),
// qwen2moe (the top k's softmax weights as they are, plus the shared expert times
// sigmoid(w . x)), gpt-oss (softmax over the top k router logits, with the router's bias;
// experts with biases and the activation min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7)
// + 1); attention sinks in the softmax's denominator, unscaled; q/k/v/output biases;
// post_attention_norm as the FFN's input norm; window on the even layers). Expert e of a
// [cols, rows, n] tensor is its e-th [cols, rows] slice (GGUF dims).
//
// YaRN (Peng et al. 2023): pair i's angle mixes the interpolated (position / factor) and
// the original angle with weight r_i = 1 - clamp((i - lo) / (hi - lo), 0, 1), where lo and
// hi are the pairs turning beta_fast and beta_slow times over the original context (pair
// index d(b) = rope_dim ln(L / (2 pi b)) / (2 ln base), lo floored, hi ceiled as ggml
// rounds them), and cos/sin are scaled by 0.1 ln(factor) + 1. Gemma's local layers: layer l
// is local when l % 2 == 0 (gemma2) or l % 6 != 5 (gemma3). Phi-3 takes its long factors
// when the served context exceeds rope.scaling.original_context_length (the constructor's
// n_ctx; 0: context_length), the short ones otherwise.
//
// Sources: Mixtral of Experts (Jiang et al. 2024), the Qwen2-MoE/Qwen3 reports, the gpt-oss
// model card (OpenAI 2025), Llama (Touvron et al. 2023), RMSNorm (Zhang & Sennrich 2019), RoFormer
// (Su et al. 2021), GQA (Ainslie et al. 2023), SwiGLU (Shazeer 2020), Qwen2/Qwen3
// technical reports, GGUF spec (ggml/docs/gguf.md) for the key and tensor names.
//
// RefRounding optionally emulates the rounding of the implementation that produced
// shared/reference/*.json, to explain (not to define) loom's distance from it:
//   f16_attention: q, K and V rounded to F16, attention's weighted V summed in F16
//     by an online softmax (flash-attention style: accumulator rescaled when a new
//     maximum arrives, each update rounded to F16);
//   quantized_activations: the input of every product with a weight of type T is
//     rounded as that implementation does: F16 -> F16, BF16 -> BF16, 32-block types ->
//     8-bit blocks of 32 (scale max|x|/127 stored as F16), 256-block types -> 8-bit
//     blocks of 256 (scale max|x|/127 in F32).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gguf/ggml_types.hpp"
#include "model/gguf/gguf.hpp"
#include "model/quant/quant.hpp"

namespace loom::test {

struct RefRounding {
    bool f16_attention = false;
    bool quantized_activations = false;
};

class F64Model {
public:
    explicit F64Model(const model::GgufFile& f, RefRounding r = {}, int64_t n_ctx = 0) : f_(f), r_(r) {
        arch_ = f.get_string("general.architecture");
        const std::string a = arch_ + ".";
        L_ = static_cast<int>(f.get_int(a + "block_count", 0));
        d_ = static_cast<int>(f.get_int(a + "embedding_length", 0));
        H_ = static_cast<int>(f.get_int(a + "attention.head_count", 0));
        KV_ = static_cast<int>(f.get_int(a + "attention.head_count_kv", H_));
        hd_ = static_cast<int>(f.get_int(a + "attention.key_length", d_ / std::max(H_, 1)));
        rope_dim_ = static_cast<int>(f.get_int(a + "rope.dimension_count", hd_));
        base_ = f.get_float(a + "rope.freq_base", 10000.0);
        eps_ = f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);
        // Linear scaling divides positions by the factor; the type defaults to linear
        // and the factor's older key is rope.scale_linear (llama.cpp's reading).
        const double factor = f.get_float(a + "rope.scaling.factor", f.get_float(a + "rope.scale_linear", 0.0));
        const std::string scaling = f.get_string(a + "rope.scaling.type", "linear");
        if ((scaling == "linear" || scaling == "yarn") && factor > 0) pos_div_ = factor;
        yarn_ = scaling == "yarn" && factor > 1;
        orig_ctx_ = static_cast<double>(f.get_int(a + "rope.scaling.original_context_length", 0));
        beta_fast_ = f.get_float(a + "rope.scaling.yarn_beta_fast", 32.0);
        beta_slow_ = f.get_float(a + "rope.scaling.yarn_beta_slow", 1.0);
        mscale_ = f.get_float(a + "rope.scaling.attn_factor", 1.0) * (yarn_ ? 1.0 + 0.1 * std::log(factor) : 1.0);
        window_ = static_cast<int>(f.get_int(a + "attention.sliding_window", 0));
        gemma_ = arch_ == "gemma2" || arch_ == "gemma3";
        oss_ = arch_ == "gpt-oss";
        neox_ = arch_ == "qwen2" || arch_ == "qwen3" || gemma_ || arch_ == "phi3" || arch_ == "qwen2moe" ||
                arch_ == "qwen3moe" || oss_;
        n_expert_ = static_cast<int>(f.get_int(a + "expert_count", 0));
        n_used_ = static_cast<int>(f.get_int(a + "expert_used_count", 0));
        if (arch_ == "gemma2") {
            attn_cap_ = f.get_float(a + "attn_logit_softcapping", 50.0);
            final_cap_ = f.get_float(a + "final_logit_softcapping", 30.0);
        }
        if (arch_ == "gemma3") base_local_ = f.get_float(a + "rope.freq_base_swa", 10000.0);
        if (f.tensor("rope_freqs.weight")) freqs_ = w("rope_freqs.weight");
        if (f.tensor("rope_factors_long.weight")) {  // Phi-3 LongRoPE
            const double ctx =
                n_ctx > 0 ? static_cast<double>(n_ctx) : static_cast<double>(f.get_int(a + "context_length", 0));
            const double orig = orig_ctx_ > 0 ? orig_ctx_ : static_cast<double>(f.get_int(a + "context_length", 0));
            freqs_ = w(ctx > orig ? "rope_factors_long.weight" : "rope_factors_short.weight");
        }
        out_name_ = f.tensor("output.weight") ? "output.weight" : "token_embd.weight";
        n_vocab_ = static_cast<int>(f.tensor(out_name_)->dims[1]);
    }

    int n_vocab() const { return n_vocab_; }

    /// Log-softmax over the vocabulary after each token of `seq` from index from-1 on:
    /// row k is the distribution of the token at position from + k.
    std::vector<std::vector<double>> run(const std::vector<int32_t>& seq, size_t from) {
        std::vector<std::vector<std::vector<double>>> K(static_cast<size_t>(L_)), V(static_cast<size_t>(L_));
        std::vector<std::vector<double>> result;
        const auto& emb = w("token_embd.weight");
        for (size_t p = 0; p < seq.size(); ++p) {
            std::vector<double> x(emb.begin() + static_cast<long>(seq[p]) * d_,
                                  emb.begin() + (static_cast<long>(seq[p]) + 1) * d_);
            if (gemma_)
                for (double& e : x) e *= std::sqrt(static_cast<double>(d_));
            for (int l = 0; l < L_; ++l) layer(l, x, p, K[static_cast<size_t>(l)], V[static_cast<size_t>(l)]);
            if (p + 1 < from) continue;
            auto logits = mv(out_name_, rms(x, w("output_norm.weight")));
            if (final_cap_ > 0)
                for (double& v : logits) v = final_cap_ * std::tanh(v / final_cap_);
            const double mx = *std::max_element(logits.begin(), logits.end());
            double z = 0;
            for (double v : logits) z += std::exp(v - mx);
            for (double& v : logits) v -= mx + std::log(z);
            result.push_back(std::move(logits));
        }
        return result;
    }

private:
    // Tensor `name` as doubles (dequantized once, then cached).
    const std::vector<double>& w(const std::string& name) {
        auto it = cache_.find(name);
        if (it != cache_.end()) return it->second;
        const model::GgufTensor* t = f_.tensor(name);
        if (!t) throw std::runtime_error("f64 reference: no tensor " + name);
        std::vector<float> tmp(t->n_elements());
        const auto row = static_cast<int64_t>(t->dims[0]);
        const size_t rb = model::row_bytes(t->type, row);
        for (uint64_t r = 0; r < t->n_rows(); ++r)
            model::dequantize_row(t->type, t->data + r * rb, tmp.data() + r * static_cast<uint64_t>(row), row);
        return cache_[name] = std::vector<double>(tmp.begin(), tmp.end());
    }
    bool has(const std::string& name) const { return f_.tensor(name) != nullptr; }

    // y = W x for the tensor `name` stored [rows][cols], with the optional rounding
    // of x that the reference applies for W's type.
    std::vector<double> mv(const std::string& name, std::vector<double> x) {
        if (r_.quantized_activations) round_activations(f_.tensor(name)->type, x);
        const auto& W = w(name);
        const size_t cols = x.size(), rows = W.size() / cols;
        std::vector<double> y(rows, 0.0);
        for (size_t r = 0; r < rows; ++r) {
            const double* wr = W.data() + r * cols;
            double s[4] = {0, 0, 0, 0};  // 4 partial sums: vectorizable, and order is immaterial in double
            size_t c = 0;
            for (; c + 4 <= cols; c += 4)
                for (size_t l = 0; l < 4; ++l) s[l] += wr[c + l] * x[c + l];
            for (; c < cols; ++c) s[0] += wr[c] * x[c];
            y[r] = (s[0] + s[1]) + (s[2] + s[3]);
        }
        return y;
    }

    static double f16(double v) { return model::fp16_to_fp32(model::fp32_to_fp16(static_cast<float>(v))); }

    static void round_activations(uint32_t type, std::vector<double>& x) {
        using model::GgmlType;
        const auto t = static_cast<GgmlType>(type);
        if (t == GgmlType::F32) return;
        if (t == GgmlType::F16) {
            for (double& v : x) v = f16(v);
            return;
        }
        if (t == GgmlType::BF16) {
            for (double& v : x) v = model::bf16_to_fp32(model::fp32_to_bf16(static_cast<float>(v)));
            return;
        }
        const uint32_t bs = model::type_traits(type)->block_size;
        for (size_t b = 0; b < x.size(); b += bs) {
            float amax = 0, mx = 0;
            for (size_t j = b; j < b + bs; ++j) {
                const float v = static_cast<float>(x[j]);
                if (std::fabs(v) > amax) amax = std::fabs(v), mx = v;
            }
            if (amax == 0) continue;
            if (bs == 32) {  // 8-bit blocks of 32, F16 scale
                const float d = amax / 127.0f, id = 1.0f / d;
                const double dh = f16(d);
                for (size_t j = b; j < b + bs; ++j) x[j] = dh * std::nearbyint(static_cast<float>(x[j]) * id);
            } else {  // 8-bit blocks of 256, F32 scale
                const float iscale = -127.0f / mx;
                const double d = 1.0f / iscale;
                for (size_t j = b; j < b + bs; ++j)
                    x[j] = d * std::min(127.0, static_cast<double>(std::nearbyint(iscale * static_cast<float>(x[j]))));
            }
        }
    }

    std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& g, size_t off = 0,
                            size_t n = 0) const {
        if (n == 0) n = x.size();
        double ss = 0;
        for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
        const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps_);
        std::vector<double> y(n);
        for (size_t i = 0; i < n; ++i) y[i] = x[off + i] * s * g[i];
        return y;
    }

    // Rotates every head of v at position pos; `local`: a Gemma 3 local layer (own base, no scaling).
    void rope(std::vector<double>& v, size_t pos, bool local) const {
        const int half = rope_dim_ / 2;
        const bool plain = local && base_local_ > 0;
        const double base = plain ? base_local_ : base_, div = plain ? 1.0 : pos_div_;
        const double m = plain ? 1.0 : mscale_;
        // YaRN's ramp bounds: the pair index that turns `b` times over the original context.
        auto turn = [&](double b) { return rope_dim_ * std::log(orig_ctx_ / (2 * M_PI * b)) / (2 * std::log(base)); };
        const double lo = yarn_ ? std::max(0.0, std::floor(turn(beta_fast_))) : 0;
        const double hi = yarn_ ? std::min(rope_dim_ - 1.0, std::ceil(turn(beta_slow_))) : 0;
        for (size_t h = 0; h < v.size() / static_cast<size_t>(hd_); ++h)
            for (int i = 0; i < half; ++i) {
                double freq = std::pow(base, -2.0 * i / rope_dim_);
                if (!freqs_.empty() && !plain) freq /= freqs_[static_cast<size_t>(i)];
                double th = static_cast<double>(pos) / div * freq;
                if (yarn_ && !plain) {
                    const double r = 1 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
                    th = th * (1 - r) + static_cast<double>(pos) * freq * r;
                }
                const size_t a = h * static_cast<size_t>(hd_) + static_cast<size_t>(neox_ ? i : 2 * i);
                const size_t b = a + (neox_ ? static_cast<size_t>(half) : 1);
                const double x0 = v[a], x1 = v[b];
                v[a] = m * (x0 * std::cos(th) - x1 * std::sin(th));
                v[b] = m * (x0 * std::sin(th) + x1 * std::cos(th));
            }
    }

    void add_bias(std::vector<double>& v, const std::string& name) {
        if (!has(name)) return;
        const auto& b = w(name);
        for (size_t i = 0; i < v.size(); ++i) v[i] += b[i];
    }

    void head_norm(std::vector<double>& v, const std::string& name) {
        if (!has(name)) return;
        const auto& g = w(name);
        for (size_t h = 0; h < v.size() / static_cast<size_t>(hd_); ++h) {
            auto y = rms(v, g, h * static_cast<size_t>(hd_), static_cast<size_t>(hd_));
            std::copy(y.begin(), y.end(), v.begin() + static_cast<long>(h) * hd_);
        }
    }

    // Attention of head h's query over positions 0..p, into out[h*hd ...].
    // Attention over positions first..p (first > 0: a sliding window).
    void attend(const std::vector<double>& q, const std::vector<std::vector<double>>& K,
                const std::vector<std::vector<double>>& V, int h, std::vector<double>& out, size_t first = 0,
                const double* sink = nullptr) const {
        const int kh = h / (H_ / KV_);
        const size_t qo = static_cast<size_t>(h) * static_cast<size_t>(hd_), ko = static_cast<size_t>(kh * hd_);
        const double scale = 1.0 / std::sqrt(static_cast<double>(hd_));
        std::vector<double> sc(K.size(), -INFINITY);
        for (size_t j = first; j < K.size(); ++j) {
            double s = 0;
            for (int e = 0; e < hd_; ++e) s += q[qo + static_cast<size_t>(e)] * K[j][ko + static_cast<size_t>(e)];
            sc[j] = s * scale;
            if (attn_cap_ > 0) sc[j] = attn_cap_ * std::tanh(sc[j] / attn_cap_);
        }
        if (!r_.f16_attention) {
            const double mx = std::max(*std::max_element(sc.begin(), sc.end()), sink ? *sink : -INFINITY);
            double z = sink ? std::exp(*sink - mx) : 0.0;  // a sink: one more logit, with no value
            for (double& s : sc) z += (s = std::exp(s - mx));
            for (size_t j = 0; j < K.size(); ++j)
                for (int e = 0; e < hd_; ++e)
                    out[qo + static_cast<size_t>(e)] += sc[j] / z * V[j][ko + static_cast<size_t>(e)];
            return;
        }
        // Online softmax with an F16 accumulator (scores in F32).
        std::vector<double> acc(static_cast<size_t>(hd_), 0.0);
        float M = -INFINITY, S = 0;
        for (size_t j = first; j < K.size(); ++j) {
            const float s = static_cast<float>(sc[j]);
            float ms = 1, vs = 1;
            if (s > M) {
                const float old = M;
                M = s;
                ms = std::exp(old - M);
                for (double& a : acc) a = f16(a * ms);
            } else {
                vs = std::exp(s - M);
            }
            for (int e = 0; e < hd_; ++e)
                acc[static_cast<size_t>(e)] = f16(acc[static_cast<size_t>(e)] + V[j][ko + static_cast<size_t>(e)] * vs);
            S = S * ms + vs;
        }
        for (int e = 0; e < hd_; ++e) out[qo + static_cast<size_t>(e)] = acc[static_cast<size_t>(e)] / S;
    }

    void layer(int l, std::vector<double>& x, size_t p, std::vector<std::vector<double>>& K,
               std::vector<std::vector<double>>& V) {
        const std::string b = "blk." + std::to_string(l) + ".";
        auto xb = rms(x, w(b + "attn_norm.weight"));
        std::vector<double> q, k, v;
        if (has(b + "attn_qkv.weight")) {  // phi3: q | k | v in one product
            const auto all = mv(b + "attn_qkv.weight", xb);
            const auto nq = static_cast<long>(H_ * hd_), nkv = static_cast<long>(KV_ * hd_);
            q.assign(all.begin(), all.begin() + nq);
            k.assign(all.begin() + nq, all.begin() + nq + nkv);
            v.assign(all.begin() + nq + nkv, all.end());
        } else {
            q = mv(b + "attn_q.weight", xb), k = mv(b + "attn_k.weight", xb), v = mv(b + "attn_v.weight", xb);
        }
        add_bias(q, b + "attn_q.bias");
        add_bias(k, b + "attn_k.bias");
        add_bias(v, b + "attn_v.bias");
        head_norm(q, b + "attn_q_norm.weight");
        head_norm(k, b + "attn_k_norm.weight");
        // Gemma alternates local (windowed) and global layers; the others window every layer.
        const bool local = arch_ == "gemma2" || oss_ ? l % 2 == 0 : arch_ == "gemma3" ? l % 6 != 5 : true;
        rope(q, p, local && arch_ == "gemma3");
        rope(k, p, local && arch_ == "gemma3");
        if (r_.f16_attention) {
            for (double& e : q) e = f16(e);
            for (double& e : k) e = f16(e);
            for (double& e : v) e = f16(e);
        }
        K.push_back(k);
        V.push_back(v);
        const size_t first = local && window_ > 0 && p + 1 > static_cast<size_t>(window_) ? p + 1 - window_ : 0;
        std::vector<double> att(q.size(), 0.0);
        for (int h = 0; h < H_; ++h)
            attend(q, K, V, h, att, first, oss_ ? &w(b + "attn_sinks.weight")[static_cast<size_t>(h)] : nullptr);
        auto o = mv(b + "attn_output.weight", att);
        add_bias(o, b + "attn_output.bias");
        if (has(b + "post_attention_norm.weight") && !oss_) o = rms(o, w(b + "post_attention_norm.weight"));
        for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
        xb = rms(x, w(b + (oss_ ? "post_attention_norm.weight" : "ffn_norm.weight")));
        if (n_expert_ > 0) {
            const auto y = moe(b, xb);
            for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
            return;
        }
        std::vector<double> g, u;
        if (has(b + "ffn_gate.weight")) {
            g = mv(b + "ffn_gate.weight", xb), u = mv(b + "ffn_up.weight", xb);
        } else {  // phi3: gate | up in one product
            const auto gu = mv(b + "ffn_up.weight", xb);
            g.assign(gu.begin(), gu.begin() + static_cast<long>(gu.size() / 2));
            u.assign(gu.begin() + static_cast<long>(gu.size() / 2), gu.end());
        }
        for (size_t i = 0; i < g.size(); ++i)
            g[i] = (gemma_ ? 0.5 * g[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (g[i] + 0.044715 * std::pow(g[i], 3))))
                           : g[i] / (1 + std::exp(-g[i]))) *
                   u[i];
        auto dn = mv(b + "ffn_down.weight", g);
        if (has(b + "post_ffw_norm.weight")) dn = rms(dn, w(b + "post_ffw_norm.weight"));
        for (size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
    }

    // Part e of n equal parts of tensor `name` (as doubles) times x: expert e's matrix.
    std::vector<double> mv_part(const std::string& name, int e, int n, const std::vector<double>& x) {
        const auto& W = w(name);
        const size_t cols = x.size(), rows = W.size() / cols / static_cast<size_t>(n);
        std::vector<double> y(rows, 0.0);
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < cols; ++c) y[r] += W[(static_cast<size_t>(e) * rows + r) * cols + c] * x[c];
        return y;
    }

    // Adds part e of n of the bias `name` to v, when the file has it.
    void add_bias_part(std::vector<double>& v, const std::string& name, int e, int n) {
        if (!has(name)) return;
        const auto& bias = w(name);
        const size_t len = bias.size() / static_cast<size_t>(n);
        for (size_t i = 0; i < v.size(); ++i) v[i] += bias[static_cast<size_t>(e) * len + i];
    }

    // One gated FFN: tensors gate/up/down named by `g`, `u`, `dn` (+ "." kind), part e of n.
    std::vector<double> expert(const std::string& g, const std::string& u, const std::string& dn, int e, int n,
                               const std::vector<double>& x) {
        auto a = mv_part(g + ".weight", e, n, x), c = mv_part(u + ".weight", e, n, x);
        add_bias_part(a, g + ".bias", e, n);
        add_bias_part(c, u + ".bias", e, n);
        for (size_t i = 0; i < a.size(); ++i) {
            if (oss_) {
                const double gg = std::min(a[i], 7.0), uu = std::clamp(c[i], -7.0, 7.0);
                a[i] = gg / (1 + std::exp(-1.702 * gg)) * (uu + 1);
            } else {
                a[i] = a[i] / (1 + std::exp(-a[i])) * c[i];
            }
        }
        auto y = mv_part(dn + ".weight", e, n, a);
        add_bias_part(y, dn + ".bias", e, n);
        return y;
    }

    // The mixture: route xb, sum the chosen experts' outputs by their weights (+ shared expert).
    std::vector<double> moe(const std::string& b, const std::vector<double>& xb) {
        auto logits = mv(b + "ffn_gate_inp.weight", xb);
        add_bias(logits, b + "ffn_gate_inp.bias");
        std::vector<int> ids(logits.size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
        std::stable_sort(ids.begin(), ids.end(),
                         [&](int p, int q) { return logits[static_cast<size_t>(p)] > logits[static_cast<size_t>(q)]; });
        const double mx = logits[static_cast<size_t>(ids[0])];
        double all = 0, top = 0;
        for (double v : logits) all += std::exp(v - mx);
        for (int j = 0; j < n_used_; ++j)
            top += std::exp(logits[static_cast<size_t>(ids[static_cast<size_t>(j)])] - mx);
        // qwen2moe keeps the softmax over all experts; the others normalise over the top k.
        const double z = arch_ == "qwen2moe" ? all : top;
        std::vector<double> y(xb.size(), 0.0);
        for (int j = 0; j < n_used_; ++j) {
            const int e = ids[static_cast<size_t>(j)];
            const double wt = std::exp(logits[static_cast<size_t>(e)] - mx) / z;
            const auto o = expert(b + "ffn_gate_exps", b + "ffn_up_exps", b + "ffn_down_exps", e, n_expert_, xb);
            for (size_t i = 0; i < y.size(); ++i) y[i] += wt * o[i];
        }
        if (has(b + "ffn_gate_inp_shexp.weight")) {
            const double gl = mv(b + "ffn_gate_inp_shexp.weight", xb)[0];
            const auto o = expert(b + "ffn_gate_shexp", b + "ffn_up_shexp", b + "ffn_down_shexp", 0, 1, xb);
            for (size_t i = 0; i < y.size(); ++i) y[i] += o[i] / (1 + std::exp(-gl));
        }
        return y;
    }

    const model::GgufFile& f_;
    RefRounding r_;
    std::string arch_, out_name_;
    int L_ = 0, d_ = 0, H_ = 0, KV_ = 0, hd_ = 0, rope_dim_ = 0, n_vocab_ = 0;
    double base_ = 10000, eps_ = 1e-5, pos_div_ = 1;
    double orig_ctx_ = 0, beta_fast_ = 32, beta_slow_ = 1, mscale_ = 1, attn_cap_ = 0, final_cap_ = 0, base_local_ = 0;
    int window_ = 0, n_expert_ = 0, n_used_ = 0;
    bool neox_ = false, yarn_ = false, gemma_ = false, oss_ = false;
    std::vector<double> freqs_;
    std::map<std::string, std::vector<double>> cache_;
};

}  // namespace loom::test
