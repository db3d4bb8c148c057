// Transformer hyperparameters read from a GGUF's `<arch>.*` keys.
//
// Source: GGUF specification (ggml/docs/gguf.md, "LLM" keys); defaults follow
// llama.cpp (rope base 10000, RMS epsilon 1e-5, head_count_kv = head_count).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "model/gguf/gguf.hpp"

namespace loom::model {

/// A model whose architecture or shape loom cannot run.
class ModelError : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct HParams {
    std::string arch;  ///< general.architecture, e.g. "llama"
    std::string name;  ///< general.name, "" when absent
    int32_t n_layer = 0;
    int32_t n_embd = 0;  ///< residual width
    int32_t n_head = 0;
    int32_t n_head_kv = 0;  ///< GQA: n_head % n_head_kv == 0
    int32_t head_dim = 0;   ///< attention.key_length, default n_embd / n_head
    int32_t n_ff = 0;
    int32_t n_ctx_train = 0;  ///< context length the model was trained with
    int32_t n_vocab = 0;
    int32_t rope_dim = 0;  ///< rotated dimensions per head (<= head_dim)
    float rope_base = 10000.0f;
    float rms_eps = 1e-5f;
    // RoPE frequency scaling (Llama 3.1 style "llama3" is expressed through the
    // rope_freqs.weight tensor; linear and YaRN scaling through rope.scaling.*).
    std::string rope_scaling = "none";  ///< "none", "linear" or "yarn" (others are refused)
    float rope_scale = 1.0f;            ///< positions are multiplied by this (1 / factor)
    int32_t rope_orig_ctx = 0;          ///< rope.scaling.original_context_length, 0 when absent
    float yarn_beta_fast = 32.0f;       ///< rope.scaling.yarn_beta_fast (YaRN's alpha/beta, default 32)
    float yarn_beta_slow = 1.0f;        ///< rope.scaling.yarn_beta_slow (default 1)
    float rope_attn_factor = 1.0f;      ///< rope.scaling.attn_factor: cos and sin are multiplied by it
    /// attention.sliding_window: each position attends to itself and the window - 1 before it
    /// (0: no window). Which layers it applies to is the architecture's rule.
    int32_t sliding_window = 0;
    // Mixture of experts (Mixtral, Qwen MoE, gpt-oss): which experts a token runs is the
    // architecture's routing rule; these are the counts and sizes the file declares.
    int32_t n_expert = 0;       ///< expert_count (0: a dense model)
    int32_t n_expert_used = 0;  ///< expert_used_count: experts per token, 1..n_expert (0 when dense)
    int32_t n_ff_exp = 0;       ///< expert_feed_forward_length, default feed_forward_length (0 when dense)

    /// Reads and checks the hyperparameters. n_vocab comes from `<arch>.vocab_size`
    /// or, when absent, from the token list. Throws ModelError when a required key
    /// is missing or the shape is inconsistent (e.g. n_head not divisible by
    /// n_head_kv), when rope.freq_base or the RMS epsilon is not a positive number,
    /// when `<arch>.rope.scaling.type` asks for a scaling other than none/linear/yarn
    /// (e.g. "longrope" with a factor > 1), naming it, or YaRN without
    /// rope.scaling.original_context_length, or expert_count > 0 without an
    /// expert_used_count in 1..expert_count; never for an unknown architecture (the
    /// backend decides that).
    static HParams from_gguf(const GgufFile& f);
};

}  // namespace loom::model
