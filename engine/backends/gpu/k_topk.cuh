// The device sampler's block-wide top-k (k_sample.cu stage 1): the k best candidates of a block
// of NT threads holding kPer candidates each, in engine/sampler.cpp's order (value descending,
// ties by lower id: better() in k_sample.cuh).
//
// For k >= kFloorK (top-K logprobs) it cuts at a floor and ranks what is left: each of the NT/32
// warps offers its r = ceil(k / warps) best candidates, and the floor is the k-th best of those
// offers, so at least k candidates are as good as it and the block's k best are among the
// candidates not worse than it; those (about 30 of 1,024 for k = 20 on normally distributed
// logits) are gathered into shared memory, and each is placed at its rank, the number of
// gathered candidates better than it. Should more than the room of kGather<NT> be left (values
// tied at the floor, or fewer than k candidates), the block takes the exact merge below
// instead. For k < kFloorK, and as that fallback: each warp merges its lanes' sorted lists into
// its own top-k list, then warp 0 merges the warps' lists.
//
// Candidate ids must be distinct within a row (engine/sampling_params.cpp sorts and dedupes
// `allowed`): the rank of a candidate is then unique. Nsight Compute (2026-12-04, H200) put 45
// instructions a logit into the serial merge with top-20 logprobs, which this replaces.
#pragma once

#include "engine/backends/gpu/k_sample.cuh"

namespace loom::gpu {
namespace {

constexpr int kPer = 4;     // candidates per thread in stage 1
constexpr int kFloorK = 4;  // block_top_k cuts at a floor from this many picks

// Offers per warp for the floor (ceil(k / warps)), and the shared entries block_top_k needs for
// a block of NT threads: the warps' lists of kMaxTop (the exact merge's room, and the gathered
// candidates of the floor path).
template <int NT>
constexpr int kGather = (NT / kWarp) * kMaxTop;
LOOM_HD constexpr int floor_offers(int k, int warps) { return (k + warps - 1) / warps; }

// The floor for k picks: each warp offers its r best (sorted mine[] of every lane; none past
// its candidates) at lists[warp * r + j], and the offers are ranked (rank_each): the one that
// exactly k - 1 others beat is the floor (none when fewer than k are offered); every thread gets
// it, and the block's best in *best. s_cut is two shared entries. With `sums` (2 NT / 32 + 1
// shared doubles), each warp also leaves its sum of exp(v - its maximum) over its candidates
// (float terms, added in double) in sums[warp] and that maximum in sums[NT / 32 + warp], for
// block_top_k to rescale. Two barriers.
LOOM_DEV Cand warp_floor(const Cand (&mine)[kPer], int k, Cand* lists, Cand* s_cut, Cand* best, double* sums) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int nt = static_cast<int>(blockDim.x), nw = nt / kWarp;
    const int r = floor_offers(k, nw);
    Cand prev{0.0f, -1};
    for (int n = 0; n < r; ++n) {
        // This lane's best candidate strictly worse than the warp's last offer.
        Cand c{0.0f, -1};
#pragma unroll
        for (int j = kPer - 1; j >= 0; --j)
            if (n == 0 || better(prev, mine[j])) c = mine[j];
        if (n > 0 && prev.id < 0) c = Cand{0.0f, -1};
        prev = warp_best(c);
        if (lane == 0) lists[warp * r + n] = prev;
        if (n == 0 && sums) {
            float sf = 0.0f;
#pragma unroll
            for (int j = 0; j < kPer; ++j)
                if (mine[j].id >= 0) sf += expf(mine[j].v - prev.v);
            const double ws = warp_sum_d(static_cast<double>(sf));
            if (lane == 0) sums[warp] = ws, sums[nw + warp] = prev.id >= 0 ? static_cast<double>(prev.v) : -INFINITY;
        }
    }
    if (threadIdx.x == 0) s_cut[0] = s_cut[1] = Cand{0.0f, -1};
    __syncthreads();
    rank_each(lists, nw * r, nt, [&](int, const Cand& x, int rank) {
        if (x.id < 0) return;
        if (rank == k - 1) s_cut[0] = x;
        if (rank == 0) s_cut[1] = x;
    });
    __syncthreads();
    *best = s_cut[1];
    return s_cut[0];
}

// The k best of the block's candidates (NT threads, blockDim.x == NT), kPer a thread in
// (vals[j], ids[j]) with id < 0 for none, best first into out[0..k) (none-padded past the valid
// ones). For k >= kFloorK every thread gets the block's best candidate back (none if it has
// none), so callers need no block maximum of their own; for fewer picks, none. `lists` holds
// kGather<NT> entries of shared memory, `s_n` one and `s_cut` two; all three may be reused once
// the call returns. For k >= kFloorK and `sums` set (2 NT / 32 + 1 shared doubles),
// sums[2 NT / 32] gets the block's sum of exp(v - best) over its candidates (0 with none).
template <int NT>
LOOM_DEV Cand block_top_k(const float (&vals)[kPer], const int (&ids)[kPer], int k, Cand* out, Cand* lists, int* s_n,
                          Cand* s_cut, double* sums = nullptr) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int tid = static_cast<int>(threadIdx.x);
    Cand mine[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) mine[j] = ids[j] >= 0 ? Cand{vals[j], ids[j]} : Cand{0.0f, -1};
#pragma unroll
    for (int i = 1; i < kPer; ++i)  // insertion sort, best first
#pragma unroll
        for (int j = i; j > 0; --j)
            if (better(mine[j], mine[j - 1])) {
                const Cand x = mine[j];
                mine[j] = mine[j - 1];
                mine[j - 1] = x;
            }
    Cand cut{0.0f, -1}, top{0.0f, -1};
    if (k >= kFloorK) {  // k is the same in every thread
        if (tid == 0) *s_n = 0;
        cut = warp_floor(mine, k, lists, s_cut, &top, sums);  // its barriers publish *s_n = 0
        if (sums && warp == 0) {  // the warps' sums rescaled to the block's maximum, in warp order
            const int nw = NT / kWarp;
            const double wm = lane < nw ? sums[nw + lane] : -INFINITY;
            const double term = wm > -INFINITY ? sums[lane] * exp(wm - static_cast<double>(top.v)) : 0.0;
            const double tot = warp_sum_d(term);
            if (lane == 0) sums[2 * nw] = tot;  // published by the barriers below
        }
        if (cut.id >= 0) {
#pragma unroll
            for (int j = 0; j < kPer; ++j)
                if (mine[j].id >= 0 && !better(cut, mine[j])) {
                    const int at = atomicAdd(s_n, 1);
                    if (at < kGather<NT>) lists[at] = mine[j];
                }
        }
        __syncthreads();
        const int n = cut.id >= 0 ? *s_n : kGather<NT> + 1;
        if (n <= kGather<NT>) {
            place_by_rank(lists, n, NT, k, out);
            __syncthreads();  // `lists` is reused by the next call
            return top;
        }
        // Too many left at the floor: the exact merge, each warp stopping at the floor.
    }
    Cand* wl = lists + warp * kMaxTop;
    const int nw = NT / kWarp;
    for (int n = 0; n < k; ++n) {
        const Cand best = warp_best(mine[0]);
        if (best.id < 0 || better(cut, best)) {  // warp-uniform: the rest is below the floor
            for (int m = n + lane; m < k; m += kWarp) wl[m] = Cand{0.0f, -1};
            break;
        }
        if (lane == 0) wl[n] = best;
#pragma unroll
        for (int s = 0; s < kPer; ++s)
            if (mine[0].id >= 0 && !better(best, mine[0])) {
#pragma unroll
                for (int j = 0; j + 1 < kPer; ++j) mine[j] = mine[j + 1];
                mine[kPer - 1] = Cand{0.0f, -1};
            }
    }
    __syncthreads();
    if (warp == 0) {
        const Cand* my = lists + lane * kMaxTop;
        int head = 0;
        for (int n = 0; n < k; ++n) {
            const Cand c = lane < nw && head < k ? my[head] : Cand{0.0f, -1};
            const Cand best = warp_best(c);
            if (lane == 0) out[n] = best;
            while (lane < nw && head < k && my[head].id >= 0 && !better(best, my[head])) ++head;
        }
    }
    __syncthreads();  // `lists` is reused by the next call
    return top;
}

}  // namespace
}  // namespace loom::gpu
