// The KV cache's block pool: allocation order, all-or-nothing reserve, reference counts, the
// prefix cache (chained hashes, hits, limits, duplicate content) and LRU eviction.
#include <catch2/catch.hpp>

#include <numeric>
#include <random>

#include "engine/kv_cache.hpp"

using loom::engine::BlockTable;
using loom::engine::KvCache;

namespace {

// Ids 0..n-1 offset by `base` (distinct contents for distinct bases).
std::vector<int32_t> ids(int n, int base = 100) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), base);
    return v;
}

// A table that holds all of `toks` as computed: reserved, then committed, as after a prefill.
BlockTable prefilled(KvCache& kv, const std::vector<int32_t>& toks) {
    const auto n = static_cast<int64_t>(toks.size());
    BlockTable t;
    REQUIRE(kv.reserve(t, n));
    kv.commit(t, toks, n);
    return t;
}

}  // namespace

TEST_CASE("blocks are handed out fresh in order, then reused after release") {
    KvCache kv(8, 4);
    BlockTable a;
    REQUIRE(kv.reserve(a, 9));  // 9 positions: 3 blocks
    CHECK(a.blocks == std::vector<int32_t>{0, 1, 2});
    CHECK(kv.free_blocks() == 5);
    CHECK(kv.blocks_needed(a, 12) == 0);
    CHECK(kv.blocks_needed(a, 13) == 1);
    REQUIRE(kv.reserve(a, 13));
    CHECK(a.blocks == std::vector<int32_t>{0, 1, 2, 3});
    kv.release(a);
    CHECK(a.blocks.empty());
    CHECK(kv.free_blocks() == 8);
    CHECK(kv.stats().touched_blocks == 4);
    BlockTable b;
    REQUIRE(kv.reserve(b, 4));
    CHECK(b.blocks.size() == 1);
    CHECK(b.blocks[0] < 4);  // a touched block before a fresh one
    CHECK(kv.stats().touched_blocks == 4);
    kv.release(b);
    kv.check();
}

TEST_CASE("reserve is all or nothing") {
    KvCache kv(4, 16);
    BlockTable a, b;
    REQUIRE(kv.reserve(a, 48));
    CHECK_FALSE(kv.reserve(b, 32));  // needs 2, 1 free
    CHECK(b.blocks.empty());
    CHECK(kv.free_blocks() == 1);
    REQUIRE(kv.reserve(b, 16));
    CHECK(kv.free_blocks() == 0);
    CHECK(kv.stats().used_blocks == 4);
    kv.release(a);
    kv.release(b);
    CHECK(kv.free_blocks() == 4);
    kv.check();
}

TEST_CASE("a committed prefix is found again, whole blocks only, up to the limit") {
    KvCache kv(16, 4);
    const auto toks = ids(14);
    BlockTable a = prefilled(kv, toks);  // blocks 0..2 full; block 3 holds 2 positions
    CHECK(a.n_hashed == 3);
    CHECK(kv.stats().cached_blocks == 3);
    const auto first3 = std::vector<int32_t>(a.blocks.begin(), a.blocks.begin() + 3);

    BlockTable b;
    CHECK(kv.acquire_prefix(toks, 13, b) == 12);
    CHECK(b.blocks == first3);
    CHECK(b.n_hashed == 3);
    BlockTable c;
    CHECK(kv.acquire_prefix(toks, 11, c) == 8);  // the limit cuts the third block
    CHECK(c.blocks.size() == 2);
    CHECK(kv.stats().used_blocks == 4);  // shared, not copied

    // A different second block ends the match there, even if later blocks agree.
    auto other = toks;
    other[5] = 7;
    BlockTable d;
    CHECK(kv.acquire_prefix(other, 100, d) == 4);
    // The same ids at another position (another parent) are not a hit.
    const std::vector<int32_t> shifted(toks.begin() + 4, toks.end());
    BlockTable e;
    CHECK(kv.acquire_prefix(shifted, 100, e) == 0);
    CHECK_THROWS_AS(kv.acquire_prefix(toks, 100, d), std::logic_error);  // d is not empty
    for (auto* t : {&a, &b, &c, &d, &e}) kv.release(*t);
    CHECK(kv.free_blocks() == 16);
    CHECK(kv.stats().cached_blocks == 3);  // still cached, now evictable
    kv.check();
}

TEST_CASE("a hit on an unreferenced cached block takes it off the free list") {
    KvCache kv(3, 2);
    const auto toks = ids(6);
    BlockTable a = prefilled(kv, toks);
    kv.release(a);
    CHECK(kv.free_blocks() == 3);
    BlockTable b;
    CHECK(kv.acquire_prefix(toks, 5, b) == 4);
    CHECK(kv.free_blocks() == 1);
    BlockTable c;
    REQUIRE(kv.reserve(c, 2));  // must evict the third cached block, not the two held
    CHECK(kv.stats().evictions == 1);
    CHECK(kv.stats().cached_blocks == 2);
    CHECK_FALSE(kv.reserve(c, 4));
    kv.release(b);
    kv.release(c);
    kv.check();
}

TEST_CASE("eviction takes the least recently released block, a sequence's tail first") {
    KvCache kv(4, 2);
    const auto ta = ids(4, 10), tb = ids(4, 50);
    BlockTable a, b;
    REQUIRE(kv.reserve(a, 4));
    REQUIRE(kv.reserve(b, 4));
    kv.commit(a, ta, 4);
    kv.commit(b, tb, 4);
    const auto a_blocks = a.blocks, b_blocks = b.blocks;
    kv.release(a);  // a's blocks become evictable first: a[1], then a[0]
    kv.release(b);
    BlockTable c;
    REQUIRE(kv.reserve(c, 2));
    CHECK(c.blocks[0] == a_blocks[1]);
    BlockTable d;
    CHECK(kv.acquire_prefix(ta, 4, d) == 2);  // a's first block survived
    CHECK(d.blocks[0] == a_blocks[0]);
    BlockTable e;
    CHECK(kv.acquire_prefix(tb, 4, e) == 4);
    CHECK(e.blocks == b_blocks);
    for (auto* t : {&c, &d, &e}) kv.release(*t);
    kv.check();
}

TEST_CASE("content already cached in another block stays unregistered and is freed, not cached") {
    KvCache kv(4, 2);
    const auto toks = ids(2);
    BlockTable a, b;
    REQUIRE(kv.reserve(a, 2));
    REQUIRE(kv.reserve(b, 2));  // computed concurrently: neither could hit the other
    kv.commit(a, toks, 2);
    kv.commit(b, toks, 2);
    CHECK(kv.stats().cached_blocks == 1);
    CHECK(b.n_hashed == 1);  // the chain goes on from b's content all the same
    CHECK(b.last_hash == a.last_hash);
    const int32_t bb = b.blocks[0];
    kv.release(b);
    BlockTable c;
    REQUIRE(kv.reserve(c, 2));
    CHECK(c.blocks[0] == bb);  // a spare block comes before a fresh one
    CHECK_THROWS_AS(kv.commit(c, toks, 3), std::logic_error);
    kv.release(a);
    kv.release(c);
    kv.check();
}

TEST_CASE("chain_hash depends on the parent and on every id in order") {
    const std::vector<int32_t> x = {1, 2, 3}, y = {1, 3, 2};
    CHECK(KvCache::chain_hash(0, x) == KvCache::chain_hash(0, x));
    CHECK(KvCache::chain_hash(0, x) != KvCache::chain_hash(0, y));
    CHECK(KvCache::chain_hash(0, x) != KvCache::chain_hash(1, x));
    CHECK_THROWS_AS(KvCache(0, 16), std::invalid_argument);
    CHECK_THROWS_AS(KvCache(4, 0), std::invalid_argument);
}

TEST_CASE("random reserve, commit, hit and release keep the pool consistent and end all free") {
    std::mt19937 rng(7);
    KvCache kv(64, 4);
    std::vector<BlockTable> tables(12);
    std::vector<std::vector<int32_t>> toks(12);
    int64_t hits = 0;
    for (int it = 0; it < 20000; ++it) {
        const size_t i = rng() % tables.size();
        auto& t = tables[i];
        switch (rng() % 4) {
            case 0:  // start: a prompt drawn from a few shared prefixes
                if (t.blocks.empty()) {
                    toks[i].clear();
                    const int32_t family = static_cast<int32_t>(rng() % 3);
                    const int n = 1 + static_cast<int>(rng() % 40);
                    for (int p = 0; p < n; ++p)
                        toks[i].push_back(p < 16 ? family * 100 + p : static_cast<int32_t>(rng() % 5));
                    const int64_t hit = kv.acquire_prefix(toks[i], n - 1, t);
                    hits += hit;
                    REQUIRE(hit % 4 == 0);
                    REQUIRE(hit <= n - 1);
                    if (!kv.reserve(t, n)) kv.release(t);
                    else kv.commit(t, toks[i], n);
                }
                break;
            case 1:  // grow by one decoded token
                if (!t.blocks.empty()) {
                    toks[i].push_back(static_cast<int32_t>(rng() % 5));
                    const auto n = static_cast<int64_t>(toks[i].size());
                    if (kv.reserve(t, n)) kv.commit(t, toks[i], n);
                    else kv.release(t);  // preempted
                }
                break;
            default: kv.release(t);
        }
        if (it % 500 == 0) kv.check();
    }
    for (auto& t : tables) kv.release(t);
    kv.check();
    CHECK(kv.free_blocks() == 64);
    CHECK(kv.stats().used_blocks == 0);
    CHECK(hits > 0);
    CHECK(kv.stats().evictions > 0);
}
