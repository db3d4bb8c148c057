// Prefill matrix products C[M x N] (+)= X[M x K] . W[N x K]^T: cuBLAS (cublasGemmEx, F16 or F32
// operands, F32 accumulation and output) in CUDA builds, loom's own tiled GEMM (gemm_own in
// kernels.hpp) in HIP and emulator builds or when asked for (GpuTuning::own_gemm).
#pragma once

#include <cstdint>

#include "engine/backends/gpu/gpu_runtime.hpp"

namespace loom::gpu {

/// A GEMM engine bound to one stream (owns the cuBLAS handle where there is one).
class Gemm {
public:
    /// Uses cuBLAS in CUDA builds unless `own` (loom's kernel then). Throws GpuError when
    /// cuBLAS cannot start.
    Gemm(gpuStream_t s, bool own);
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

    /// The same product on F16 high and low parts (the split products of Precision::Accurate): with
    /// X = Xh + Xl (x_hi, x_lo: F16, leading dimension ldx16) and W = Wh + Wl (w_hi, and w_lo
    /// when not null: F16, leading dimension ldw), C (+)= Xh.Wh^T + Xl.Wh^T (+ Xh.Wl^T): two or
    /// three F16 products with F32 accumulation, F32's accuracy but for the dropped Xl.Wl^T (about
    /// 2^-22 relative) and the parts' own rounding (about 2^-22 each; F16's subnormals below
    /// 6e-5). Without cuBLAS the same products run on gemm_batched_f16_own when x_hi is given
    /// (the emulator: its tests check the parts as cuBLAS takes them), else the own GEMM runs Wh
    /// then Wl on x32 (F32). Throws GpuError when cuBLAS fails.
    void run_split(const uint16_t* w_hi, const uint16_t* w_lo, int64_t ldw, const float* x32, int64_t ldx32,
                   const uint16_t* x_hi, const uint16_t* x_lo, int64_t ldx16, int M, int N, int K, float* C,
                   int64_t ldc, bool accumulate);

    /// Strided batched product in cuBLAS's column-major terms (cublasGemmStridedBatchedEx): for
    /// b < batch, C_b (m x n, F32, ldc) = alpha * op(A_b) . B_b (+ C_b when accumulate) with A_b = A + b * sa (F16; op(A_b)
    /// = A_b^T, A_b k x m with lda, when a_t; else A_b m x k), B_b = B + b * sb (F16, k x n, ldb),
    /// C_b = C + b * sc; F32 accumulation (cuBLAS on the tensor cores where wants_f16_input(), else
    /// gemm_batched_f16_own). Throws GpuError when cuBLAS fails.
    void batched_f16(bool a_t, int m, int n, int k, float alpha, const uint16_t* A, int64_t lda, int64_t sa,
                     const uint16_t* B, int64_t ldb, int64_t sb, float* C, int64_t ldc, int64_t sc, int batch,
                     bool accumulate = false);

private:
    gpuStream_t stream_;
    bool cublas_ = false;
    void* handle_ = nullptr;
};

}  // namespace loom::gpu
