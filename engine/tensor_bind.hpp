// Binding GGUF tensors to the structs the forward passes read: the shape and type checks that
// every architecture's weight binding (engine/llama_weights.cpp, engine/backends/cpu/arch/*)
// makes, each failure a model::ModelError naming the tensor.
//
// Source: the GGUF convention that dims[0] is the row length (ggml/docs/gguf.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf/gguf.hpp"
#include "model/gguf/hparams.hpp"

namespace loom::engine {

/// A weight matrix [rows x cols] stored row-major in the mapped file: each of `rows`
/// output rows holds `cols` elements of ggml type `type` in `row_bytes` bytes.
struct Matrix {
    uint32_t type = 0;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_bytes = 0;
    const uint8_t* data = nullptr;
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

/// The matrix types a backend can multiply, for the binding's check.
struct MatrixTypes {
    std::string backend;                    ///< named in the errors, e.g. "the CPU backend"
    bool (*supported)(uint32_t ggml_type);  ///< true for a ggml type the backend multiplies
};

/// The tensor `name` of `f`. Throws model::ModelError "the model has no tensor '<name>'".
const model::GgufTensor& need_tensor(const model::GgufFile& f, const std::string& name);

/// Tensor `t` as a matrix of GGUF dims [cols, rows]. Throws model::ModelError naming the
/// tensor and both shapes when the dims differ, or naming its type when `types` refuses it.
Matrix bind_matrix(const model::GgufTensor& t, int64_t cols, int64_t rows, const MatrixTypes& types);

/// Tensor `t` of GGUF dims [cols, rows, n] (n matrices stacked, e.g. llama.cpp's
/// blk.N.ffn_*_exps.weight of a mixture of experts) as n matrices [rows x cols], each a view
/// of its slice of the mapped file. Throws model::ModelError like bind_matrix.
std::vector<Matrix> bind_matrices(const model::GgufTensor& t, int64_t cols, int64_t rows, int64_t n,
                                  const MatrixTypes& types);

/// Tensor `t` of GGUF dims [m, n] (any dequantizable type) decoded to n F32 vectors of m
/// elements (e.g. gpt-oss's per-expert biases). Throws model::ModelError naming the tensor for
/// another shape or an unreadable type.
std::vector<std::vector<float>> bind_vectors(const model::GgufTensor& t, int64_t m, int64_t n);

/// Tensor `t` (a vector of n elements, any dequantizable type) decoded to F32. Throws
/// model::ModelError naming the tensor for another shape or an unreadable type.
std::vector<float> bind_vector(const model::GgufTensor& t, int64_t n);

/// bind_vector of the tensor `name`, or an empty vector when `f` has no such tensor.
std::vector<float> bind_optional_vector(const model::GgufFile& f, const std::string& name, int64_t n);

/// The attention projections of the layer whose tensors start with `prefix` ("blk.N."):
/// wq = attn_q [n_head*hd x n_embd], wk, wv = attn_k, attn_v [n_head_kv*hd x n_embd], wo =
/// attn_output [n_embd x n_head*hd] (hd = hp.head_dim). Throws like need_tensor and bind_matrix.
void bind_attention(const model::GgufFile& f, const std::string& prefix, const model::HParams& hp,
                    const MatrixTypes& types, Matrix& wq, Matrix& wk, Matrix& wv, Matrix& wo);

/// token_embd.weight as a [n_vocab x n_embd] matrix whose rows can be read (dequantized).
/// Throws model::ModelError like bind_matrix, or naming the type when rows cannot be decoded.
Matrix bind_embeddings(const model::GgufFile& f, const model::HParams& hp, const MatrixTypes& types);

/// The input and output weights most architectures share: the embeddings, the final norm and
/// the output projection (token_embd when output.weight is absent: tied).
struct IoWeights {
    Matrix tok_embd;                 ///< [n_vocab x n_embd]
    std::vector<float> output_norm;  ///< [n_embd]
    Matrix output;                   ///< [n_vocab x n_embd]

    /// Binds them. Throws model::ModelError like bind_embeddings, bind_vector, bind_matrix.
    static IoWeights bind(const model::GgufFile& f, const model::HParams& hp, const MatrixTypes& types);
};

}  // namespace loom::engine
