// The paged KV cache's block pool, block tables and prefix cache; see kv_cache.hpp.
#include "engine/kv_cache.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace loom::engine {
namespace {

uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

uint64_t KvCache::chain_hash(uint64_t parent, std::span<const int32_t> ids) {
    uint64_t h = mix64(parent + 0x9e3779b97f4a7c15ull);
    for (int32_t id : ids) h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(id)) + 0x9e3779b97f4a7c15ull));
    return h;
}

KvCache::KvCache(int64_t n_blocks, int32_t block_tokens) : block_tokens_(block_tokens) {
    if (n_blocks < 1 || block_tokens < 1 || n_blocks > std::numeric_limits<int32_t>::max())
        throw std::invalid_argument("KV cache of " + std::to_string(n_blocks) + " blocks of " +
                                    std::to_string(block_tokens) + " tokens");
    const auto n = static_cast<size_t>(n_blocks);
    ref_.assign(n, 0);
    hashed_.assign(n, 0);
    hash_.assign(n, 0);
    parent_.assign(n, 0);
    prev_.assign(n, kNone);
    next_.assign(n, kNone);
    free_ = n_blocks;
    stats_.n_blocks = n_blocks;
}

int64_t KvCache::blocks_needed(const BlockTable& table, int64_t n_positions) const {
    const int64_t want = (n_positions + block_tokens_ - 1) / block_tokens_;
    return std::max<int64_t>(0, want - static_cast<int64_t>(table.blocks.size()));
}

void KvCache::lru_push_back(int32_t b) {
    prev_[b] = lru_tail_;
    next_[b] = kNone;
    if (lru_tail_ != kNone) next_[lru_tail_] = b;
    else lru_head_ = b;
    lru_tail_ = b;
}

void KvCache::lru_remove(int32_t b) {
    if (prev_[b] != kNone) next_[prev_[b]] = next_[b];
    else lru_head_ = next_[b];
    if (next_[b] != kNone) prev_[next_[b]] = prev_[b];
    else lru_tail_ = prev_[b];
    prev_[b] = next_[b] = kNone;
}

// One unreferenced block, referenced once: a spare one, else a fresh one, else the least
// recently released cached one (evicted). The caller checked free_ > 0.
int32_t KvCache::take_block() {
    int32_t b;
    if (!spare_.empty()) {
        b = spare_.back();
        spare_.pop_back();
    } else if (next_fresh_ < n_blocks()) {
        b = static_cast<int32_t>(next_fresh_++);
        ++stats_.touched_blocks;
    } else {
        b = lru_head_;
        lru_remove(b);
        map_.erase(hash_[b]);
        hashed_[b] = 0;
        ++stats_.evictions;
    }
    ref_[b] = 1;
    --free_;
    return b;
}

int64_t KvCache::acquire_prefix(std::span<const int32_t> tokens, int64_t max_tokens, BlockTable& table) {
    if (!table.blocks.empty() || table.n_hashed != 0) throw std::logic_error("acquire_prefix() on a non-empty table");
    table.last_hash = 0;
    const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size())) / block_tokens_;
    for (int64_t i = 0; i < limit; ++i) {
        const auto ids = tokens.subspan(static_cast<size_t>(i * block_tokens_), static_cast<size_t>(block_tokens_));
        const uint64_t h = chain_hash(table.last_hash, ids);
        const auto it = map_.find(h);
        if (it == map_.end()) break;
        const int32_t b = it->second;
        const auto stored = std::span<const int32_t>(ids_).subspan(static_cast<size_t>(b) * block_tokens_,
                                                                   static_cast<size_t>(block_tokens_));
        if (parent_[b] != table.last_hash || !std::equal(ids.begin(), ids.end(), stored.begin())) break;  // collision
        if (ref_[b] == 0) {
            lru_remove(b);
            --free_;
        }
        ++ref_[b];
        table.blocks.push_back(b);
        table.last_hash = h;
        table.n_hashed = i + 1;
    }
    return table.n_hashed * block_tokens_;
}

bool KvCache::reserve(BlockTable& table, int64_t n_positions) {
    const int64_t need = blocks_needed(table, n_positions);
    if (need > free_) return false;
    for (int64_t i = 0; i < need; ++i) table.blocks.push_back(take_block());
    return true;
}

void KvCache::commit(BlockTable& table, std::span<const int32_t> tokens, int64_t n_computed) {
    if (n_computed > static_cast<int64_t>(table.blocks.size()) * block_tokens_ ||
        n_computed > static_cast<int64_t>(tokens.size()))
        throw std::logic_error("commit() past the table or the tokens");
    if (ids_.empty()) ids_.resize(static_cast<size_t>(n_blocks()) * static_cast<size_t>(block_tokens_));
    for (int64_t i = table.n_hashed; i < n_computed / block_tokens_; ++i) {
        const auto ids = tokens.subspan(static_cast<size_t>(i * block_tokens_), static_cast<size_t>(block_tokens_));
        const uint64_t h = chain_hash(table.last_hash, ids);
        const int32_t b = table.blocks[static_cast<size_t>(i)];
        if (!hashed_[b] && map_.emplace(h, b).second) {
            hashed_[b] = 1;
            hash_[b] = h;
            parent_[b] = table.last_hash;
            std::copy(ids.begin(), ids.end(), ids_.begin() + static_cast<ptrdiff_t>(b) * block_tokens_);
        }
        table.last_hash = h;
        table.n_hashed = i + 1;
    }
}

void KvCache::release(BlockTable& table) {
    for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
        const int32_t b = *it;
        if (--ref_[b] > 0) continue;
        ++free_;
        if (hashed_[b]) lru_push_back(b);
        else spare_.push_back(b);
    }
    table = BlockTable{};
}

KvStats KvCache::stats() const {
    KvStats s = stats_;
    s.used_blocks = n_blocks() - free_;
    s.cached_blocks = static_cast<int64_t>(map_.size());
    return s;
}

void KvCache::check() const {
    auto fail = [](const std::string& what) { throw std::logic_error("KV cache invariant: " + what); };
    const auto n = static_cast<size_t>(n_blocks());
    std::vector<int> seen(n, 0);  // times each unreferenced block is found free
    for (int32_t b : spare_) {
        if (ref_[b] != 0 || hashed_[b]) fail("spare block " + std::to_string(b) + " is referenced or cached");
        ++seen[b];
    }
    int64_t lru = 0;
    for (int32_t b = lru_head_, p = kNone; b != kNone; p = b, b = next_[b]) {
        if (prev_[b] != p) fail("LRU links broken at block " + std::to_string(b));
        if (ref_[b] != 0 || !hashed_[b]) fail("LRU block " + std::to_string(b) + " is referenced or not cached");
        ++seen[b];
        if (++lru > n_blocks()) fail("LRU list has a cycle");
    }
    for (size_t b = static_cast<size_t>(next_fresh_); b < n; ++b) {
        if (ref_[b] != 0 || hashed_[b]) fail("fresh block " + std::to_string(b) + " is in use");
        ++seen[b];
    }
    int64_t n_free = 0;
    for (size_t b = 0; b < n; ++b) {
        if (ref_[b] < 0) fail("negative reference count on block " + std::to_string(b));
        if (ref_[b] == 0 && seen[b] != 1)
            fail("free block " + std::to_string(b) + " listed " + std::to_string(seen[b]) + " times");
        if (ref_[b] > 0 && seen[b] != 0) fail("referenced block " + std::to_string(b) + " is on a free list");
        n_free += ref_[b] == 0;
        if (hashed_[b]) {
            const auto it = map_.find(hash_[b]);
            if (it == map_.end() || it->second != static_cast<int32_t>(b))
                fail("cached block " + std::to_string(b) + " missing from the hash map");
        }
    }
    if (n_free != free_) fail("free count " + std::to_string(free_) + ", counted " + std::to_string(n_free));
    for (const auto& [h, b] : map_)
        if (!hashed_[b] || hash_[b] != h) fail("hash map entry for block " + std::to_string(b) + " is stale");
}

}  // namespace loom::engine
