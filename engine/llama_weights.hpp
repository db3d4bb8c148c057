// Binds the tensors of a llama-family GGUF (llama, mistral, qwen2, qwen3, and the mixtures of
// experts llama with expert_count (Mixtral), qwen2moe, qwen3moe) to the structs the forward
// passes read (CPU and GPU backends), checking every shape and type. The GPU backends run
// dense files only and refuse a mixture at load (gpu_setup.cpp).
//
// Source: llama.cpp's tensor naming for LLM_ARCH_LLAMA / QWEN2 / QWEN3 / QWEN2MOE / QWEN3MOE
// (token_embd, blk.N.attn_q, ..., blk.N.ffn_gate_inp, blk.N.ffn_gate_exps, output) and the
// GGUF convention that dims[0] is the row length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf/gguf.hpp"
#include "model/gguf/hparams.hpp"
#include "engine/tensor_bind.hpp"

namespace loom::engine {

/// One transformer block's weights: matrices stay in the mapped file, the small F32
/// vectors (norms, biases) are decoded copies.
struct LayerWeights {
    std::vector<float> attn_norm;       ///< [n_embd]
    Matrix wq, wk, wv, wo;              ///< [n_head*hd x n_embd], [n_kv*hd x n_embd] x2, [n_embd x n_head*hd]
    std::vector<float> bq, bk, bv;      ///< qwen2 attention biases (empty otherwise)
    std::vector<float> q_norm, k_norm;  ///< qwen3 per-head RMSNorm weights [hd] (empty otherwise)
    std::vector<float> ffn_norm;        ///< [n_embd]
    Matrix gate, up, down;              ///< [n_ff x n_embd] x2, [n_embd x n_ff] (dense models only)
    // A mixture of experts (hp.n_expert > 0) instead of gate/up/down:
    Matrix gate_inp;                                    ///< router [n_expert x n_embd] (ffn_gate_inp)
    std::vector<Matrix> gate_exps, up_exps, down_exps;  ///< n_expert x ([n_ff_exp x n_embd] x2, [n_embd x n_ff_exp])
    Matrix gate_shexp, up_shexp,
        down_shexp;                     ///< qwen2moe's shared expert ([n_ff_shexp x n_embd] x2, [n_embd x n_ff_shexp])
    std::vector<float> gate_inp_shexp;  ///< qwen2moe: the shared expert's gate [n_embd]
};

/// Every weight of a llama-family model, bound to the mapped GGUF (which must outlive
/// it), with the hyperparameters they were checked against.
struct LlamaWeights {
    model::HParams hp;
    bool neox_rope = false;          ///< rotate (i, i + d/2) pairs instead of (2i, 2i + 1)
    Matrix tok_embd;                 ///< [n_vocab x n_embd]
    std::vector<float> output_norm;  ///< [n_embd]
    Matrix output;                   ///< [n_vocab x n_embd]; tok_embd when tied
    std::vector<float> rope_freqs;   ///< per-pair frequency divisors [rope_dim/2] (Llama 3.1), or empty
    std::vector<LayerWeights> layers;
    /// Mixtures: divide the chosen experts' softmax weights by their sum (Mixtral and
    /// qwen3moe yes, qwen2moe no; `<arch>.expert_weights_norm` overrides).
    bool norm_topk = false;

    /// Binds the tensors of `f`. Throws model::ModelError naming the architecture when
    /// it is not llama/mistral/qwen2/qwen3/qwen2moe/qwen3moe (before reading any `<arch>.*` key), naming
    /// the key when a hyperparameter is missing or invalid (model::HParams), naming the
    /// tensor when one is missing, has the wrong shape, or has a matrix type that
    /// `types.supported` refuses ("..., which <types.backend> does not support").
    static LlamaWeights bind(const model::GgufFile& f, const MatrixTypes& types);
};

}  // namespace loom::engine
