// Hyperparameter loading; see hparams.hpp.
#include "model/gguf/hparams.hpp"

#include <cmath>

namespace loom::model {
namespace {

int32_t required(const GgufFile& f, const std::string& key) {
    const GgufValue* v = f.find(key);
    if (!v) throw ModelError("the GGUF lacks the hyperparameter " + key);
    auto n = v->as_int();
    if (!n || *n <= 0 || *n > (1ll << 30)) throw ModelError(key + " must be a positive integer");
    return static_cast<int32_t>(*n);
}

int32_t optional(const GgufFile& f, const std::string& key, int32_t fallback) {
    if (!f.find(key)) return fallback;
    return required(f, key);
}

// A non-negative integer key (0 when absent or 0: "none").
int32_t count_or_zero(const GgufFile& f, const std::string& key) {
    const GgufValue* v = f.find(key);
    if (!v) return 0;
    auto n = v->as_int();
    if (!n || *n < 0 || *n > (1ll << 30)) throw ModelError(key + " must be a non-negative integer");
    return static_cast<int32_t>(*n);
}

}  // namespace

HParams HParams::from_gguf(const GgufFile& f) {
    HParams h;
    h.arch = f.get_string("general.architecture");
    if (h.arch.empty()) throw ModelError("the GGUF has no general.architecture key");
    h.name = f.get_string("general.name");
    const std::string a = h.arch + ".";
    h.n_layer = required(f, a + "block_count");
    h.n_embd = required(f, a + "embedding_length");
    h.n_ff = required(f, a + "feed_forward_length");
    h.n_head = required(f, a + "attention.head_count");
    h.n_head_kv = optional(f, a + "attention.head_count_kv", h.n_head);
    h.n_ctx_train = optional(f, a + "context_length", 2048);
    if (h.n_head % h.n_head_kv != 0)
        throw ModelError("head_count " + std::to_string(h.n_head) + " is not a multiple of head_count_kv " +
                         std::to_string(h.n_head_kv));
    h.head_dim = optional(f, a + "attention.key_length", h.n_embd / h.n_head);
    if (h.head_dim <= 0)
        throw ModelError("embedding_length " + std::to_string(h.n_embd) + " is smaller than head_count " +
                         std::to_string(h.n_head) + " and attention.key_length is absent");
    if (optional(f, a + "attention.value_length", h.head_dim) != h.head_dim)
        throw ModelError("attention.value_length differs from key_length: not supported");
    h.rope_dim = optional(f, a + "rope.dimension_count", h.head_dim);
    if (h.rope_dim > h.head_dim || h.rope_dim % 2 != 0)
        throw ModelError("rope.dimension_count " + std::to_string(h.rope_dim) + " does not fit head size " +
                         std::to_string(h.head_dim));
    h.rope_base = static_cast<float>(f.get_float(a + "rope.freq_base", 10000.0));
    h.rms_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
    // RoPE scaling, as llama.cpp reads it: the type defaults to "linear"; the factor
    // comes from rope.scaling.factor or its older name rope.scale_linear, and 0 or
    // absent means none. Llama 3.1's "llama3" scaling is not a key but the
    // rope_freqs.weight tensor, which the backend applies.
    h.rope_scaling = f.get_string(a + "rope.scaling.type", "linear");
    h.rope_orig_ctx = count_or_zero(f, a + "rope.scaling.original_context_length");
    h.yarn_beta_fast = static_cast<float>(f.get_float(a + "rope.scaling.yarn_beta_fast", 32.0));
    h.yarn_beta_slow = static_cast<float>(f.get_float(a + "rope.scaling.yarn_beta_slow", 1.0));
    h.rope_attn_factor = static_cast<float>(f.get_float(a + "rope.scaling.attn_factor", 1.0));
    if (!(h.yarn_beta_fast > 0) || !(h.yarn_beta_slow > 0) || !(h.rope_attn_factor > 0) ||
        !std::isfinite(h.yarn_beta_fast) || !std::isfinite(h.yarn_beta_slow) || !std::isfinite(h.rope_attn_factor))
        throw ModelError(a + "rope.scaling.yarn_beta_fast, yarn_beta_slow and attn_factor must be positive numbers");
    h.sliding_window = count_or_zero(f, a + "attention.sliding_window");
    h.n_expert = count_or_zero(f, a + "expert_count");
    if (h.n_expert > 0) {
        h.n_expert_used = required(f, a + "expert_used_count");
        if (h.n_expert_used > h.n_expert)
            throw ModelError(a + "expert_used_count " + std::to_string(h.n_expert_used) + " exceeds expert_count " +
                             std::to_string(h.n_expert));
        h.n_ff_exp = optional(f, a + "expert_feed_forward_length", h.n_ff);
    }
    const GgufValue* fv = f.find(a + "rope.scaling.factor");
    if (!fv) fv = f.find(a + "rope.scale_linear");
    const double factor = fv ? fv->as_float().value_or(-1.0) : 0.0;
    if (!(factor >= 0.0) || !std::isfinite(factor))
        throw ModelError(a + "rope.scaling.factor must be a non-negative number");
    if (h.rope_scaling == "none" || h.rope_scaling.empty()) {
        h.rope_scaling = "none";
    } else if (h.rope_scaling == "linear") {
        if (factor > 0) h.rope_scale = static_cast<float>(1.0 / factor);
        else h.rope_scaling = "none";
    } else if (h.rope_scaling == "yarn" && factor > 1.0) {
        h.rope_scale = static_cast<float>(1.0 / factor);
        if (h.rope_orig_ctx <= 0)
            throw ModelError(a + "rope.scaling.type is yarn but " + a +
                             "rope.scaling.original_context_length is absent");
    } else if (factor > 0 && factor != 1.0) {
        throw ModelError("RoPE scaling type '" + h.rope_scaling + "' (factor " + std::to_string(factor) +
                         ") is not supported (supported: none, linear, yarn, and Llama 3.1's rope_freqs.weight)");
    } else {
        h.rope_scaling = "none";  // e.g. "yarn" with factor 1: no scaling at all
    }
    if (!(h.rope_base > 0) || !std::isfinite(h.rope_base))
        throw ModelError(a + "rope.freq_base must be a positive number");
    if (!(h.rms_eps > 0) || !std::isfinite(h.rms_eps))
        throw ModelError(a + "attention.layer_norm_rms_epsilon must be a positive number");
    if (const GgufValue* t = f.find("tokenizer.ggml.tokens"); t && t->type == GgufType::ARRAY)
        h.n_vocab = static_cast<int32_t>(t->count);
    h.n_vocab = optional(f, a + "vocab_size", h.n_vocab);
    if (h.n_vocab <= 0) throw ModelError("cannot tell the vocabulary size");
    return h;
}

}  // namespace loom::model
