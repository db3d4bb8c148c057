// Prefill GEMM dispatch; see gemm.hpp. cuBLAS is column-major: the row-major product
// C[M x N] = X[M x K] . W[N x K]^T is the column-major C^T (N x M) = op_T(W) (N x K) . X^T (K x M),
// so W is passed transposed with leading dimension ldw and X untransposed with leading dimension ldx.
#include "engine/backends/gpu/gemm.hpp"

#include <string>

#include "engine/backends/gpu/kernels.hpp"

#if defined(LOOM_GPU_CUDA)
#include <cublas_v2.h>
#endif

namespace loom::gpu {

Gemm::Gemm(gpuStream_t s, bool own) : stream_(s) {
#if defined(LOOM_GPU_CUDA)
    if (own) return;
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw GpuError("cublasCreate failed");
    if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) throw GpuError("cublasSetStream failed");
    handle_ = h;
    cublas_ = true;
#else
    (void)own;
#endif
}

Gemm::~Gemm() {
#if defined(LOOM_GPU_CUDA)
    if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
#endif
}

void Gemm::run(const void* W, bool w_f16, int64_t ldw, const float* x32, int64_t ldx32, const uint16_t* x16,
               int64_t ldx16, int M, int N, int K, float* C, int64_t ldc, bool accumulate) {
    if (M <= 0 || N <= 0) return;
#if defined(LOOM_GPU_CUDA)
    if (cublas_) {
        const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
        const cudaDataType_t t = w_f16 ? CUDA_R_16F : CUDA_R_32F;
        const void* X = w_f16 ? static_cast<const void*>(x16) : static_cast<const void*>(x32);
        const int64_t ldx = w_f16 ? ldx16 : ldx32;
        const cublasStatus_t st =
            cublasGemmEx(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, W, t,
                         static_cast<int>(ldw), X, t, static_cast<int>(ldx), &beta, C, CUDA_R_32F,
                         static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS)
            throw GpuError("cublasGemmEx failed with status " + std::to_string(static_cast<int>(st)));
        return;
    }
#endif
    (void)x16;
    (void)ldx16;
    gemm_own(x32, ldx32, W, w_f16, ldw, M, N, K, C, ldc, accumulate, stream_);
}

void Gemm::run_split(const uint16_t* w_hi, const uint16_t* w_lo, int64_t ldw, const float* x32, int64_t ldx32,
                     const uint16_t* x_hi, const uint16_t* x_lo, int64_t ldx16, int M, int N, int K, float* C,
                     int64_t ldc, bool accumulate) {
    if (!x_hi) {  // the own GEMM reads X in F32: only W needs its two parts
        run(w_hi, true, ldw, x32, ldx32, nullptr, 0, M, N, K, C, ldc, accumulate);
        if (w_lo) run(w_lo, true, ldw, x32, ldx32, nullptr, 0, M, N, K, C, ldc, true);
        return;
    }
    // F16 x F16 products with F32 accumulation: cuBLAS, or (the emulator) the plain batched kernel,
    // which takes the same operands. Column-major, as run(): C^T (N x M) = W^T . X^T.
    auto product = [&](const uint16_t* w, const uint16_t* x, bool acc) {
        if (cublas_) run(w, true, ldw, nullptr, 0, x, ldx16, M, N, K, C, ldc, acc);
        else batched_f16(true, N, M, K, 1.0f, w, ldw, 0, x, ldx16, 0, C, ldc, 0, 1, acc);
    };
    product(w_hi, x_hi, accumulate);
    product(w_hi, x_lo, true);
    if (w_lo) product(w_lo, x_hi, true);
}

void Gemm::batched_f16(bool a_t, int m, int n, int k, float alpha, const uint16_t* A, int64_t lda, int64_t sa,
                       const uint16_t* B, int64_t ldb, int64_t sb, float* C, int64_t ldc, int64_t sc, int batch,
                       bool accumulate) {
    if (m <= 0 || n <= 0 || batch <= 0) return;
#if defined(LOOM_GPU_CUDA)
    if (cublas_) {
        const float beta = accumulate ? 1.0f : 0.0f;
        const cublasStatus_t st = cublasGemmStridedBatchedEx(
            static_cast<cublasHandle_t>(handle_), a_t ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A,
            CUDA_R_16F, static_cast<int>(lda), sa, B, CUDA_R_16F, static_cast<int>(ldb), sb, &beta, C, CUDA_R_32F,
            static_cast<int>(ldc), sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS)
            throw GpuError("cublasGemmStridedBatchedEx failed with status " + std::to_string(static_cast<int>(st)));
        return;
    }
#endif
    gemm_batched_f16_own(a_t, m, n, k, alpha, A, lda, sa, B, ldb, sb, C, ldc, sc, batch, accumulate, stream_);
}

}  // namespace loom::gpu
