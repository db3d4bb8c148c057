// The device sampler's block-wide top-k (k_sample.cu stage 1): the k best candidates of a block
// of kST threads holding kPer candidates each, in engine/sampler.cpp's order (value descending,
// ties by lower id: better() in k_sample.cuh).
//
// For k >= kFloorK (top-K logprobs) it cuts at a floor and ranks what is left: the floor is the
// k-th best of the 32 warps' maxima, so at least k candidates are as good as it and the block's
// k best are among the candidates not worse than it; those (about 30 of 4,096 for k = 20 on
// normally distributed logits) are gathered into shared memory, and each is placed at its rank,
// the number of gathered candidates better than it. Should more than kGather be left (values
// tied at the floor, or fewer than k warps holding candidates), the block takes the exact merge
// below instead. For k < kFloorK, and as that fallback: each warp merges its lanes' sorted lists
// into its own top-k list, then warp 0 merges the warps' lists.
//
// Candidate ids must be distinct within a row (engine/sampling_params.cpp sorts and dedupes
// `allowed`): the rank of a candidate is then unique. Nsight Compute (2026-12-04, H200) put 45
// instructions a logit into the serial merge with top-20 logprobs, which this replaces.
#pragma once

#include "engine/backends/gpu/k_sample.cuh"

namespace loom::gpu {
namespace {

constexpr int kPer = 4;                         // candidates per thread in stage 1
constexpr int kFloorK = 4;                      // block_top_k cuts at a floor from this many picks
constexpr int kGather = kST / kWarp * kMaxTop;  // candidates the floor path ranks (the lists' room)

// Warp 0 finds the floor: the warp maximum that exactly k - 1 others beat (none when fewer than
// k warps hold a candidate); every thread gets it, and the block's best in *best. `lists` gets
// the warps' maxima at stride kMaxTop; s_cut is two shared entries. Two barriers.
LOOM_DEV Cand warp_floor(const Cand& wmax, int k, Cand* lists, Cand* s_cut, Cand* best) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int nw = static_cast<int>(blockDim.x) / kWarp;
    if (lane == 0) lists[warp * kMaxTop] = wmax;
    __syncthreads();
    if (warp == 0) {
        const Cand mx = lane < nw ? lists[lane * kMaxTop] : Cand{0.0f, -1};
        int rank = 0;
        for (int j = 0; j < nw; ++j) rank += better(lists[j * kMaxTop], mx) ? 1 : 0;
        const Cand cut = warp_best(mx.id >= 0 && rank == k - 1 ? mx : Cand{0.0f, -1});
        const Cand top = warp_best(mx);
        if (lane == 0) s_cut[0] = cut, s_cut[1] = top;
    }
    __syncthreads();
    *best = s_cut[1];
    return s_cut[0];
}

// The k best of the block's candidates, kPer a thread in (vals[j], ids[j]) with id < 0 for none,
// best first into out[0..k) (none-padded past the valid ones). For k >= kFloorK every thread
// gets the block's best candidate back (none if it has none), so callers need no block maximum
// of their own; for fewer picks, none. `lists` holds kGather entries of shared memory, `s_n` one
// and `s_cut` two; all three may be reused once the call returns.
LOOM_DEV Cand block_top_k(const float (&vals)[kPer], const int (&ids)[kPer], int k, Cand* out, Cand* lists, int* s_n,
                          Cand* s_cut) {
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
        cut = warp_floor(warp_best(mine[0]), k, lists, s_cut, &top);  // its barriers publish *s_n = 0
        if (cut.id >= 0) {
#pragma unroll
            for (int j = 0; j < kPer; ++j)
                if (mine[j].id >= 0 && !better(cut, mine[j])) {
                    const int at = atomicAdd(s_n, 1);
                    if (at < kGather) lists[at] = mine[j];
                }
        }
        __syncthreads();
        const int n = cut.id >= 0 ? *s_n : kGather + 1;
        if (n <= kGather) {
            for (int i = tid; i < n; i += kST) {
                const Cand x = lists[i];
                int rank = 0;
                for (int j = 0; j < n; ++j) {
                    const Cand y = lists[j];
                    rank += (y.v > x.v || (y.v == x.v && y.id < x.id)) ? 1 : 0;
                }
                if (rank < k) out[rank] = x;
            }
            for (int i = n + tid; i < k; i += kST) out[i] = Cand{0.0f, -1};
            __syncthreads();  // `lists` is reused by the next call
            return top;
        }
        // Too many left at the floor: the exact merge, each warp stopping at the floor.
    }
    Cand* wl = lists + warp * kMaxTop;
    const int nw = static_cast<int>(blockDim.x) / kWarp;
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
