// Prefill matrix products C[M x N] (+)= X[M x K] . W[N x K]^T: cuBLAS (cublasGemmEx, F16 or F32
// operands, F32 accumulation and output) in CUDA builds, loom's own tiled GEMM (gemm_own in
// kernels.hpp) in HIP and emulator builds or when LOOM_GPU_OWN_GEMM=1.
#pragma once

#include <cstdint>

#include "engine/backends/gpu/gpu_runtime.hpp"

namespace loom::gpu {

/// A GEMM engine bound to one stream (owns the cuBLAS handle where there is one).
class Gemm {
public:
    /// Throws GpuError when cuBLAS cannot start.
    explicit Gemm(gpuStream_t s);
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    /// True when run() reads the F16 copy of X for F16 weights (cuBLAS); the own GEMM reads
    /// the F32 X in every case.
    bool wants_f16_input() const { return cublas_; }

    /// C[m][n] = (accumulate ? C[m][n] : 0) + sum_k X[m][k] * W[n][k], W in F16 (w_f16) or F32
    /// with leading dimension ldw elements. x16 (F16 copy of X, leading dimension ldx16) is used
    /// for F16 weights when wants_f16_input(); x32 (leading dimension ldx32) otherwise.
    void run(const void* W, bool w_f16, int64_t ldw, const float* x32, int64_t ldx32, const uint16_t* x16,
             int64_t ldx16, int M, int N, int K, float* C, int64_t ldc, bool accumulate);

    /// True when attention() can run (cuBLAS builds).
    bool has_attention() const { return cublas_; }

    /// Causal prefill attention through strided-batched GEMMs (F32 operands, F32 arithmetic, or
    /// TF32 tensor cores when LOOM_GPU_ATTN_TF32=1): for each query head h of KV head g,
    /// S = scale * Q_h K_g^T over positions 0..p0+T-1, the causal softmax (softmax_causal), and
    /// att_h = S V_g. q: [T][q_ld] with head h at h*hd; k, v: the layer's cache rows [pos][kvd]
    /// (F32); S: scratch of n_head_kv * T * (p0 + T) floats; att: [T][att_ld].
    void attention(const float* q, int64_t q_ld, const float* k, const float* v, int64_t kvd, int T, int p0,
                   int n_head, int n_head_kv, int hd, float scale, float* S, float* att, int64_t att_ld);

private:
    gpuStream_t stream_;
    bool tf32_ = false;
    bool cublas_ = false;
    void* handle_ = nullptr;
};

}  // namespace loom::gpu
