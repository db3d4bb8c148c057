// The paged KV cache's bookkeeping: the block pool, per-sequence block tables, reference counts
// and the prefix cache (no K/V data: the backend holds that, addressed by kv_layout.hpp).
//
// The pool has n_blocks blocks of block_tokens positions each, sized once at start. A sequence
// owns a BlockTable: blocks[i] holds its positions i*block_tokens..(i+1)*block_tokens-1. A full
// block whose K/V have been computed is registered in the prefix cache under a chained hash
// (hash of the parent block's hash and this block's token ids), so that a later sequence with
// the same leading tokens reuses it (its reference count goes up) instead of computing it again.
// A hit compares the stored ids and parent hash, so a hash collision is never a wrong hit.
// Blocks nobody references stay cached until they are needed: allocation takes, in this order,
// a released block that holds nothing cached, a block never used yet (so memory that backs the
// pool is touched only as it is needed), and last the least recently released cached block
// (evicted: its hash is forgotten).
//
// Sources: paged attention's block tables and copy-free sharing by reference counts (Kwon et al.,
// "Efficient Memory Management for Large Language Model Serving with PagedAttention", SOSP
// 2023); automatic prefix caching by hashing full blocks with their prefix, evicting
// unreferenced blocks LRU (vLLM's design document "Automatic Prefix Caching").
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace loom::engine {

/// One sequence's blocks. Made empty; filled by KvCache::acquire_prefix() and reserve(), emptied
/// by release(). Only the KvCache that filled it may change it.
struct BlockTable {
    std::vector<int32_t> blocks;  ///< block ids; blocks[i] holds positions i*block_tokens..
    int64_t n_hashed = 0;         ///< leading blocks whose chained hash is known (registered or hit)
    uint64_t last_hash = 0;       ///< hash of block n_hashed - 1 (the root value when n_hashed is 0)
};

/// Counters for /metrics and tests (evictions are cumulative since the cache was made).
struct KvStats {
    int64_t n_blocks = 0;        ///< blocks in the pool
    int64_t used_blocks = 0;     ///< blocks some sequence references
    int64_t cached_blocks = 0;   ///< blocks registered in the prefix cache (referenced or not)
    int64_t touched_blocks = 0;  ///< blocks ever handed out (the pool's touched memory)
    int64_t evictions = 0;       ///< cached blocks dropped to make room
};

class KvCache {
public:
    /// A pool of `n_blocks` (>= 1) blocks of `block_tokens` (>= 1) positions.
    /// Throws std::invalid_argument otherwise.
    KvCache(int64_t n_blocks, int32_t block_tokens);

    int32_t block_tokens() const { return block_tokens_; }
    int64_t n_blocks() const { return static_cast<int64_t>(ref_.size()); }
    /// Blocks that reserve() can hand out now (unreferenced ones, cached or not).
    int64_t free_blocks() const { return free_; }
    /// Blocks `table` needs beyond those it has to cover `n_positions` positions.
    int64_t blocks_needed(const BlockTable& table, int64_t n_positions) const;

    /// Fills the empty `table` with the longest run of cached blocks that spell the leading
    /// tokens of `tokens`, at most `max_tokens` tokens (whole blocks only), taking a reference
    /// on each. Returns the number of tokens they cover (a multiple of block_tokens). Throws
    /// std::logic_error when `table` is not empty.
    int64_t acquire_prefix(std::span<const int32_t> tokens, int64_t max_tokens, BlockTable& table);

    /// Appends blocks to `table` until it covers `n_positions` positions. Returns false, and
    /// changes nothing, when fewer than blocks_needed() blocks are free.
    bool reserve(BlockTable& table, int64_t n_positions);

    /// Registers in the prefix cache the blocks of `table` that positions 0..n_computed-1 fill
    /// completely and that are not registered yet; tokens[p] is the id at position p
    /// (tokens.size() >= n_computed). Call it once their K/V are written. A block whose content
    /// is already cached in another block stays unregistered (it is freed, not cached, on
    /// release). Throws std::logic_error when the table does not cover n_computed positions.
    void commit(BlockTable& table, std::span<const int32_t> tokens, int64_t n_computed);

    /// Drops the table's references and empties it. Unreferenced cached blocks become
    /// evictable, the table's last block first (so a shared prefix outlives its tails).
    void release(BlockTable& table);

    /// Current counters.
    KvStats stats() const;

    /// Checks the pool's invariants (every block unreferenced-and-free exactly once or
    /// referenced; the hash map and the blocks agree); throws std::logic_error naming the first
    /// broken one. For tests: O(n_blocks).
    void check() const;

    /// The chained hash of a block of ids after a parent block whose hash is `parent` (the
    /// root value 0 for the first block): 64-bit, from splitmix64's finalizer (Steele et al.,
    /// "Fast splittable pseudorandom number generators", OOPSLA 2014) over the ids in order.
    static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> ids);

private:
    static constexpr int32_t kNone = -1;
    int32_t take_block();
    void lru_push_back(int32_t b);
    void lru_remove(int32_t b);

    int32_t block_tokens_;
    std::vector<int32_t> ref_;     // references per block
    std::vector<uint8_t> hashed_;  // registered in map_
    std::vector<uint64_t> hash_, parent_;
    std::vector<int32_t> ids_;          // [n_blocks * block_tokens] the ids of registered blocks
    std::vector<int32_t> prev_, next_;  // LRU list of unreferenced registered blocks
    int32_t lru_head_ = kNone, lru_tail_ = kNone;
    std::vector<int32_t> spare_;  // unreferenced, unregistered, already touched
    int64_t next_fresh_ = 0;      // blocks >= this were never handed out
    int64_t free_ = 0;
    std::unordered_map<uint64_t, int32_t> map_;  // chained hash -> block
    KvStats stats_;
};

}  // namespace loom::engine
