// Block-wide reductions of the device sampler and prompt scoring (k_sample.cu, k_score.cu):
// (value, id) candidates ordered by value descending, ties by lower id (engine/sampler.cpp's
// order), and the best of a block (block maxima and sums: k_common.cuh). Blocks have kST threads.
#pragma once

#include <cmath>

#include "engine/backends/gpu/k_common.cuh"
#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {
namespace {

constexpr int kST = 1024;  // threads of every sampling block

struct Cand {
    float v;
    int32_t id;  // < 0: none
};

LOOM_DEV bool better(const Cand& a, const Cand& b) {
    if (a.id < 0) return false;
    if (b.id < 0) return true;
    return a.v > b.v || (a.v == b.v && a.id < b.id);
}

LOOM_DEV uint64_t key_of(float v, int32_t id) {
    if (v == 0.0f) v = 0.0f;  // -0 == +0, as the reference compares them
    const uint32_t u = __float_as_uint(v);
    const uint32_t o = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (static_cast<uint64_t>(o) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

LOOM_DEV Cand warp_best(Cand c) {
#pragma unroll
    for (int m = kWarp / 2; m > 0; m >>= 1) {
        Cand o;
        o.v = shfl_xor(c.v, m);
        o.id = shfl_xor(c.id, m);
        if (better(o, c)) c = o;
    }
    return c;
}

// The rank of each entry of list[0..n) in shared memory (how many of the others are better),
// counted by kRankLanes consecutive lanes per entry, each over a strided share of the list, and
// added across them by shuffles; the first lane of entry i calls f(i, list[i], rank). Every
// thread of the block (nt threads) calls it with the same n: the shuffles need the whole warp.
constexpr int kRankLanes = 8;
template <class F>
LOOM_DEV void rank_each(const Cand* list, int n, int nt, F&& f) {
    const int tid = static_cast<int>(threadIdx.x), p = tid % kRankLanes;
    for (int base = 0; base < n; base += nt / kRankLanes) {
        const int i = base + tid / kRankLanes;
        const Cand x = i < n ? list[i] : Cand{0.0f, -1};
        int cnt = 0;
        if (i < n)
            for (int j = p; j < n; j += kRankLanes) cnt += better(list[j], x) ? 1 : 0;
#pragma unroll
        for (int m = 1; m < kRankLanes; m <<= 1) cnt += shfl_xor(cnt, m);
        if (i < n && p == 0) f(i, x, cnt);
    }
}

// The k best of the n distinct entries of gath (shared memory), best first into out[0..k) and
// none-padded past n: each entry is written at its rank (rank_each). Every thread of the block
// (nt threads) calls it with the same n and k.
LOOM_DEV void place_by_rank(const Cand* gath, int n, int nt, int k, Cand* out) {
    rank_each(gath, n, nt, [&](int, const Cand& x, int rank) {
        if (rank < k) out[rank] = x;
    });
    for (int i = n + static_cast<int>(threadIdx.x); i < k; i += nt) out[i] = Cand{0.0f, -1};
}

// The best candidate of the block (every thread gets it); sh holds kST / kWarp + 1 entries.
LOOM_DEV Cand block_best(Cand c, Cand* sh) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int nw = static_cast<int>(blockDim.x) / kWarp;
    c = warp_best(c);
    if (lane == 0) sh[warp] = c;
    __syncthreads();
    if (warp == 0) {
        Cand d = lane < nw ? sh[lane] : Cand{0.0f, -1};
        d = warp_best(d);
        if (lane == 0) sh[nw] = d;
    }
    __syncthreads();
    const Cand r = sh[nw];
    __syncthreads();
    return r;
}

}  // namespace
}  // namespace loom::gpu
