// The batched matmul; see compute.hpp.
#include "engine/backends/cpu/compute.hpp"

#include <algorithm>

#include "engine/backends/cpu/matvec.hpp"

namespace loom::cpu {
namespace {

// Vectors per weight-row pass of a matmul: a tile of activations stays in L2 while each
// thread's rows stream past it once per tile (bounds cache traffic for long batches).
constexpr int64_t kTile = 32;

}  // namespace

void Compute::matmul(std::initializer_list<Product> products, const float* X, int64_t T) {
    int64_t total = 0;
    const int64_t cols = products.begin()->W->cols;
    for (const Product& p : products) total += p.W->rows;
    const int64_t grain = std::max<int64_t>(1, kParallelMacs / std::max<int64_t>(1, cols * std::min(T, kTile)));
    pool_.parallel_for(total, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t t0 = 0; t0 < T; t0 += kTile) {
            const int64_t nt = std::min(kTile, T - t0);
            int64_t base = 0;
            for (const Product& p : products) {
                const engine::Matrix& W = *p.W;
                const int64_t a = std::max(r0, base), b = std::min(r1, base + W.rows);
                for (int64_t r = a; r < b; ++r)
                    dot_row_multi(W.type, W.row(r - base), W.cols, X + t0 * W.cols, W.cols, nt,
                                  p.Y + t0 * W.rows + (r - base), W.rows);
                base += W.rows;
            }
        }
    });
}

}  // namespace loom::cpu
