// The worker pool and the batched weight product that every architecture's CPU forward pass
// runs its matrices through.
//
// Source: llama2.c's matmul, batched: each weight row is decoded once per tile of activation
// vectors (dot_row_multi, matvec.hpp), all products that read one input in one parallel loop.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "engine/backends/cpu/thread_pool.hpp"
#include "engine/tensor_bind.hpp"

namespace loom::cpu {

/// A loop runs on several threads only when each thread's share is at least this many
/// multiply-adds (~20-50 us): below that, waking a worker costs more than it saves.
constexpr int64_t kParallelMacs = 1 << 18;

/// One product of a fused matmul: Y[t][r] = W.row(r) . X[t], Y [T x W.rows] F32.
struct Product {
    const engine::Matrix* W;
    float* Y;
};

/// The CPU's compute resources: a thread pool and the batched matmul over it.
class Compute {
public:
    /// n_threads < 1 counts as 1.
    explicit Compute(int n_threads) : pool_(n_threads) {}

    ThreadPool& pool() { return pool_; }

    /// Y_k[t][r] = W_k.row(r) . X[t] for every product k (all W_k have X's width, X is
    /// [T x cols] F32) and t < T, as one parallel loop over the rows of all of them (one
    /// barrier, not one per matrix). Each row is decoded once per tile of 32 vectors
    /// (dot_row_multi), and every output is bit-identical to dot_row's, whatever T and the
    /// tiling. Throws like dot_row for a type it cannot multiply (bound weights never are).
    void matmul(std::initializer_list<Product> products, const float* X, int64_t T);

private:
    ThreadPool pool_;
};

}  // namespace loom::cpu
