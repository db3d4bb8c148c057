// The model's weights in device memory: every matrix uploaded once (gpuMalloc, no managed
// memory) in the device layouts of DevMatrix (kernels.hpp), norms and biases as F32 vectors.
//
// Source: llama.cpp's tensor naming (token_embd, blk.N.attn_q, ..., output) as bound and
// shape-checked by engine/llama_weights.hpp; block layouts of ggml-common.h.
#pragma once

#include <string>
#include <vector>

#include "engine/backends/gpu/kernels.hpp"
#include "engine/llama_weights.hpp"
#include "model/gguf/gguf.hpp"

namespace loom::gpu {

/// One transformer layer on the device. Vectors are F32 device pointers; absent ones are null.
/// wq, wk, wv (and gate, up) lie back to back in one allocation; where they share a type (not
/// F32) and a column count, wqkv (gate_up) is the one matrix of all their rows (rows of wq, then
/// wk, then wv), so that a GEMM reads them in one product; otherwise its data is null. Where
/// wqkv is null but wq and wk share a type (not F32) and a column count and lie back to back
/// (llama.cpp's Q4_K_M: Q4_K q and k, Q6_K v in some layers), wqk is the one matrix of wq's and
/// wk's rows; otherwise its data is null.
struct DevLayer {
    DevMatrix wq, wk, wv, wo, gate, up, down;
    DevMatrix wqkv, wqk, gate_up;
    float* attn_norm = nullptr;
    float* ffn_norm = nullptr;
    float* bq = nullptr;
    float* bk = nullptr;
    float* bv = nullptr;
    float* q_norm = nullptr;
    float* k_norm = nullptr;
};

/// Throws model::ModelError naming the first matrix (a tensor of two or more dimensions) whose
/// type `engine` cannot run, e.g. "tensor 'blk.0.attn_q.weight' has type iq4_nl, which
/// loom-engine-cuda does not support". F32, F16, BF16, Q8_0, Q4_K and Q6_K are supported.
void check_tensor_types(const model::GgufFile& f, const std::string& engine);

/// Owns the device copies of a model's weights (freed by the destructor).
class DeviceModel {
public:
    /// Uploads the weights bound in `w` (host pointers into the mapped GGUF). F32 matrices stay
    /// F32. Throws GpuError when device memory runs out.
    explicit DeviceModel(const engine::LlamaWeights& w);
    ~DeviceModel();
    DeviceModel(const DeviceModel&) = delete;
    DeviceModel& operator=(const DeviceModel&) = delete;

    DevMatrix tok_embd, output;  ///< output aliases tok_embd when the embeddings are tied
    float* output_norm = nullptr;
    std::vector<DevLayer> layers;
    size_t bytes = 0;  ///< device memory held

private:
    DevMatrix upload(const engine::Matrix& m);
    /// Uploads `n` matrices into one allocation, back to back (out[i] for m[i]); returns their
    /// concatenation by rows when all have one type (not F32) and column count, else a null
    /// matrix.
    DevMatrix upload_group(const engine::Matrix* const* m, DevMatrix* out, int n);
    void copy_rows(const engine::Matrix& m, const DevMatrix& d);
    float* upload_vec(const std::vector<float>& v);
    std::vector<void*> allocs_;
};

}  // namespace loom::gpu
