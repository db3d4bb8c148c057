// Binds the tensors of a llama-family GGUF (llama, mistral, qwen2, qwen3) to the
// structs the forward passes read (CPU and GPU backends), checking every shape and type.
//
// Source: llama.cpp's tensor naming for LLM_ARCH_LLAMA / QWEN2 / QWEN3 (token_embd,
// blk.N.attn_q, ..., output) and the GGUF convention that dims[0] is the row length.
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
    Matrix gate, up, down;              ///< [n_ff x n_embd] x2, [n_embd x n_ff]
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

    /// Binds the tensors of `f`. Throws model::ModelError naming the architecture when
    /// it is not llama/mistral/qwen2/qwen3 (before reading any `<arch>.*` key), naming
    /// the key when a hyperparameter is missing or invalid (model::HParams), naming the
    /// tensor when one is missing, has the wrong shape, or has a matrix type that
    /// `types.supported` refuses ("..., which <types.backend> does not support").
    static LlamaWeights bind(const model::GgufFile& f, const MatrixTypes& types);
};

}  // namespace loom::engine
