// Where one (layer, block, position) of the paged KV cache lives: the one address helper that
// every backend (CPU, GPU kernels, emulator) uses, so that they share one layout.
//
// The pool is layer-major: for each layer, n_blocks blocks; each block holds K then V, each
// block_tokens rows of kv_dim = n_head_kv * head_dim elements (row = one position, heads
// contiguous, head_dim innermost). The element type (F32 or F16) is the backend's choice; these
// helpers count elements, not bytes. Source: the block layout of paged attention (Kwon et al.,
// SOSP 2023), with K and V of a block side by side so one block id addresses both.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define LOOM_KV_HD __host__ __device__
#else
#define LOOM_KV_HD
#endif

namespace loom::engine {

struct KvLayout {
    int64_t n_blocks = 0;       ///< blocks per layer
    int32_t block_tokens = 16;  ///< positions per block
    int64_t kv_dim = 0;         ///< n_head_kv * head_dim

    /// Elements of one block's K (or V) half: block_tokens * kv_dim.
    LOOM_KV_HD constexpr int64_t half_elems() const { return int64_t{block_tokens} * kv_dim; }
    /// Elements of one layer's pool: n_blocks * 2 * half_elems().
    LOOM_KV_HD constexpr int64_t layer_elems() const { return n_blocks * 2 * half_elems(); }
    /// Elements of the whole pool for n_layer layers.
    LOOM_KV_HD constexpr int64_t pool_elems(int64_t n_layer) const { return n_layer * layer_elems(); }
    /// Offset of the K row (v = 0) or V row (v = 1) of position `pos_in_block` (< block_tokens)
    /// of `block` (< n_blocks) in `layer`, in elements from the pool's start.
    LOOM_KV_HD constexpr int64_t offset(int64_t layer, int64_t block, int64_t pos_in_block, int v) const {
        return layer * layer_elems() + (block * 2 + v) * half_elems() + pos_in_block * kv_dim;
    }
    /// Offset of position `pos` of a sequence whose block table is `table` (table[pos /
    /// block_tokens] holds it).
    template <class Table>
    LOOM_KV_HD constexpr int64_t offset_at(int64_t layer, const Table& table, int64_t pos, int v) const {
        return offset(layer, table[pos / block_tokens], pos % block_tokens, v);
    }
};

}  // namespace loom::engine
