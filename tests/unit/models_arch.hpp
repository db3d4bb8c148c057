// Small random-weight llama-family GGUFs written with model/gguf_writer, for tests that
// need features loom-make-model does not write (rope_freqs.weight, RoPE scaling keys, a
// declared sliding window,
// partial rotary dims, a head size other than n_embd / n_head), and test helpers
// (a temporary directory, the path of a binary built beside the test).
//
// The weights are drawn so that attention is far from uniform (q and k rows of norm
// about 1.5, so scores are O(1)), which makes RoPE and attention mistakes visible in
// the logprobs. Tensor names and keys follow llama.cpp's LLM_ARCH_LLAMA / QWEN2 /
// QWEN3 and the GGUF spec (ggml/docs/gguf.md).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gguf/ggml_types.hpp"
#include "model/gguf/gguf_writer.hpp"

namespace loom::test {

/// A directory under $TMPDIR (or /tmp), removed with its contents on destruction.
struct TempDir {
    std::string path;
    TempDir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/loom-test-XXXXXX";
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

/// Path of the executable `name` in the directory of the running test binary (the
/// build's bin/ folder, where CMake puts every executable).
inline std::string sibling_binary(const std::string& name) {
    return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

/// The shape and features of a generated model.
struct ArchSpec {
    std::string arch = "llama";  ///< general.architecture
    int layers = 2, dim = 64, heads = 4, kv_heads = 2, ffn = 96, vocab = 300;
    int head_dim = 0;  ///< attention.key_length/value_length; 0: dim / heads (key absent)
    int rope_dim = 0;  ///< rope.dimension_count; 0: head size
    double rope_base = 10000;
    bool tied = false;            ///< no output.weight
    bool biases = false;          ///< attn_q/k/v.bias (qwen2)
    bool qk_norm = false;         ///< attn_q_norm/attn_k_norm (qwen3)
    bool rope_freqs = false;      ///< rope_freqs.weight, divisors 1 + 0.7 i per pair
    double linear_scale = 0;      ///< rope.scaling.type = linear, rope.scaling.factor
    double legacy_scale_key = 0;  ///< rope.scale_linear (the key's old name)
    double yarn_factor = 0;       ///< rope.scaling.type = yarn with this factor (> 1)
    int yarn_orig_ctx = 0;        ///< rope.scaling.original_context_length for YaRN
    int sliding_window = 0;       ///< attention.sliding_window
    uint32_t seed = 1;
};

/// Writes a random-weight F32 model of `s` to `path`. Throws on I/O errors.
inline void write_arch_model(const ArchSpec& s, const std::string& path) {
    std::mt19937 rng(s.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto draw = [&](size_t n, float mean, float sd) {
        std::vector<float> v(n);
        for (float& x : v) x = mean + sd * normal(rng);
        return v;
    };
    const int hd = s.head_dim > 0 ? s.head_dim : s.dim / s.heads;
    const int rd = s.rope_dim > 0 ? s.rope_dim : hd;
    const uint64_t d = static_cast<uint64_t>(s.dim), q = static_cast<uint64_t>(s.heads * hd),
                   kv = static_cast<uint64_t>(s.kv_heads * hd), ff = static_cast<uint64_t>(s.ffn),
                   nv = static_cast<uint64_t>(s.vocab);
    const float inv = 1.0f / std::sqrt(static_cast<float>(s.dim));

    model::GgufWriter w;
    const std::string a = s.arch + ".";
    w.add_string("general.architecture", s.arch);
    w.add_string("general.name", "test " + s.arch);
    w.add_u32(a + "block_count", static_cast<uint32_t>(s.layers));
    w.add_u32(a + "context_length", 256);
    w.add_u32(a + "embedding_length", static_cast<uint32_t>(s.dim));
    w.add_u32(a + "feed_forward_length", static_cast<uint32_t>(s.ffn));
    w.add_u32(a + "attention.head_count", static_cast<uint32_t>(s.heads));
    w.add_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
    if (s.head_dim > 0) {
        w.add_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
        w.add_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
    }
    w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(rd));
    w.add_f32(a + "rope.freq_base", static_cast<float>(s.rope_base));
    w.add_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    if (s.linear_scale > 0) {
        w.add_string(a + "rope.scaling.type", "linear");
        w.add_f32(a + "rope.scaling.factor", static_cast<float>(s.linear_scale));
    }
    if (s.legacy_scale_key > 0) w.add_f32(a + "rope.scale_linear", static_cast<float>(s.legacy_scale_key));
    if (s.yarn_factor > 0) {
        w.add_string(a + "rope.scaling.type", "yarn");
        w.add_f32(a + "rope.scaling.factor", static_cast<float>(s.yarn_factor));
        w.add_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(s.yarn_orig_ctx));
    }
    if (s.sliding_window > 0) w.add_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));

    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    std::vector<float> scores = {0, 0, 0};
    for (int i = 3; i < s.vocab; ++i) {
        std::string t = "t";  // (not "t" + to_string: GCC 12 warns -Wrestrict on it)
        t += std::to_string(i);
        tokens.push_back(std::move(t));
        types.push_back(1);
        scores.push_back(-static_cast<float>(i));
    }
    w.add_llama_vocab(tokens, scores, types);

    const auto f32 = static_cast<uint32_t>(model::GgmlType::F32);
    auto add = [&](const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
        w.add_tensor(name, dims, f32, v.data(), v.size() * 4);
    };
    add("token_embd.weight", {d, nv}, draw(d * nv, 0, 1));
    if (s.rope_freqs) {
        std::vector<float> f(static_cast<size_t>(rd / 2));
        for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0f + 0.7f * static_cast<float>(i);
        add("rope_freqs.weight", {f.size()}, f);
    }
    for (int l = 0; l < s.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        add(b + "attn_norm.weight", {d}, draw(d, 1, 0.1f));
        add(b + "attn_q.weight", {d, q}, draw(d * q, 0, 1.5f * inv));
        add(b + "attn_k.weight", {d, kv}, draw(d * kv, 0, 1.5f * inv));
        add(b + "attn_v.weight", {d, kv}, draw(d * kv, 0, inv));
        if (s.biases) {
            add(b + "attn_q.bias", {q}, draw(q, 0, 0.5f));
            add(b + "attn_k.bias", {kv}, draw(kv, 0, 0.5f));
            add(b + "attn_v.bias", {kv}, draw(kv, 0, 0.5f));
        }
        if (s.qk_norm) {
            add(b + "attn_q_norm.weight", {static_cast<uint64_t>(hd)}, draw(static_cast<size_t>(hd), 1, 0.3f));
            add(b + "attn_k_norm.weight", {static_cast<uint64_t>(hd)}, draw(static_cast<size_t>(hd), 1, 0.3f));
        }
        add(b + "attn_output.weight", {q, d}, draw(q * d, 0, 1.0f / std::sqrt(static_cast<float>(q))));
        add(b + "ffn_norm.weight", {d}, draw(d, 1, 0.1f));
        add(b + "ffn_gate.weight", {d, ff}, draw(d * ff, 0, inv));
        add(b + "ffn_up.weight", {d, ff}, draw(d * ff, 0, inv));
        add(b + "ffn_down.weight", {ff, d}, draw(ff * d, 0, 1.0f / std::sqrt(static_cast<float>(ff))));
    }
    add("output_norm.weight", {d}, draw(d, 1, 0.1f));
    if (!s.tied) add("output.weight", {d, nv}, draw(d * nv, 0, 3 * inv));
    w.write_file(path);
}

}  // namespace loom::test
