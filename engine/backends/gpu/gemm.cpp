// Prefill GEMM dispatch; see gemm.hpp. cuBLAS is column-major: the row-major product
// C[M x N] = X[M x K] . W[N x K]^T is the column-major C^T (N x M) = op_T(W) (N x K) . X^T (K x M),
// so W is passed transposed with leading dimension ldw and X untransposed with leading dimension ldx.
#include "engine/backends/gpu/gemm.hpp"

#include <cstdlib>
#include <string>

#include "engine/backends/gpu/kernels.hpp"

#if defined(LOOM_GPU_CUDA)
#include <cublas_v2.h>
#endif

namespace loom::gpu {

Gemm::Gemm(gpuStream_t s) : stream_(s) {
#if defined(LOOM_GPU_CUDA)
    const char* own = std::getenv("LOOM_GPU_OWN_GEMM");
    if (own && std::string(own) == "1") return;
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw GpuError("cublasCreate failed");
    if (cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) throw GpuError("cublasSetStream failed");
    handle_ = h;
    cublas_ = true;
    const char* tf = std::getenv("LOOM_GPU_ATTN_TF32");
    tf32_ = tf && std::string(tf) == "1";
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

void Gemm::attention(const float* q, int64_t q_ld, const float* k, const float* v, int64_t kvd, int T, int p0,
                     int n_head, int n_head_kv, int hd, float scale, float* S, float* att, int64_t att_ld) {
#if defined(LOOM_GPU_CUDA)
    const int group = n_head / n_head_kv, n = p0 + T;
    auto h = static_cast<cublasHandle_t>(handle_);
    const cublasComputeType_t ct = tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    auto ok = [](cublasStatus_t st, const char* what) {
        if (st != CUBLAS_STATUS_SUCCESS)
            throw GpuError(std::string(what) + " failed with status " + std::to_string(static_cast<int>(st)));
    };
    for (int j = 0; j < group; ++j) {
        // S_g^T (n x T) = K_g (n x hd) . Q_h^T (hd x T), h = g * group + j, for every KV head g.
        const float zero = 0.0f, one = 1.0f;
        ok(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, T, hd, &scale, k, CUDA_R_32F,
                                      static_cast<int>(kvd), hd, q + static_cast<int64_t>(j) * hd, CUDA_R_32F,
                                      static_cast<int>(q_ld), static_cast<int64_t>(group) * hd, &zero, S, CUDA_R_32F,
                                      n, static_cast<int64_t>(T) * n, n_head_kv, ct, CUBLAS_GEMM_DEFAULT),
           "attention scores");
        softmax_causal(S, T, n, n_head_kv, p0, stream_);
        // att_h^T (hd x T) = V_g^T (hd x n) . P_g^T (n x T).
        ok(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, hd, T, n, &one, v, CUDA_R_32F,
                                      static_cast<int>(kvd), hd, S, CUDA_R_32F, n, static_cast<int64_t>(T) * n, &zero,
                                      att + static_cast<int64_t>(j) * hd, CUDA_R_32F, static_cast<int>(att_ld),
                                      static_cast<int64_t>(group) * hd, n_head_kv, ct, CUBLAS_GEMM_DEFAULT),
           "attention values");
    }
#else
    (void)q, (void)q_ld, (void)k, (void)v, (void)kvd, (void)T, (void)p0, (void)n_head, (void)n_head_kv, (void)hd;
    (void)scale, (void)S, (void)att, (void)att_ld;
    throw GpuError("attention through cuBLAS is not available in this build");
#endif
}

}  // namespace loom::gpu
