// The device sampler's stage-2 view of a row's stage-1 partials (k_sample.cu): the Partial each
// stage-1 block leaves, the row's totals over them (maxima and sums of exponentials, NaN and
// grammar counts), and the merge of the blocks' sorted top-K lists into the row's top-K, by floor
// and rank as block_top_k (k_topk.cuh) does within a block.
#pragma once

#include <cmath>

#include "engine/backends/gpu/k_sample.cuh"

namespace loom::gpu {
namespace {

/// What one stage-1 block leaves for stage 2: the raw logits' maximum and sum of exp(v - max),
/// the kept set's (processed values), its last kept candidate index, NaN and mask counts, and
/// its raw and processed top-K lists (best first, none-padded).
struct Partial {
    float raw_m, proc_m;
    double raw_s, proc_s;
    int32_t last_kept, nan;
    int32_t n_in;  // candidates the mask allows (rows with a mask)
    Cand raw[kMaxTop];
    Cand proc[kMaxTop];
};

// Entry e of block b's raw or processed top list.
LOOM_DEV Cand list_at(const Partial* part, int b, int e, bool raw) { return raw ? part[b].raw[e] : part[b].proc[e]; }

// This thread's best entry of the per-block top lists (entries t, t + kST, ...) that is
// strictly worse than prev.
LOOM_DEV Cand merge_pick(const Partial* part, int nblk, int k, bool raw, const Cand& prev) {
    Cand mine{0.0f, -1};
    for (int e = static_cast<int>(threadIdx.x); e < nblk * k; e += kST) {
        const Cand x = list_at(part, e / k, e % k, raw);
        if ((prev.id < 0 || better(prev, x)) && better(x, mine)) mine = x;
    }
    return mine;
}

// The k best entries of the row's nblk per-block lists (raw or processed; each sorted best first,
// none-padded) into top[0..k), none-padded past the valid ones. By floor and rank, as
// block_top_k: the floor is the k-th best of the lists' heads (so at least k entries are as good
// as it), the entries not worse than it (about k of them on normal logits) are gathered into
// `gath` (kST entries of shared memory) and each is written at its rank. With fewer than k heads,
// more lists than kST, or more than kST entries at the floor, k serial block-wide picks instead.
// `sh` holds kST / kWarp + 1 entries, s_n and s_cut one each.
LOOM_DEV void merge_lists(const Partial* part, int nblk, int k, bool raw, Cand* top, Cand* gath, Cand* sh, int* s_n,
                          Cand* s_cut) {
    const int t = static_cast<int>(threadIdx.x);
    if (k <= 0) return;
    if (t == 0) *s_n = 0, *s_cut = Cand{0.0f, -1};
    const Cand head = t < nblk ? list_at(part, t, 0, raw) : Cand{0.0f, -1};
    if (nblk <= kST) gath[t] = head;
    __syncthreads();
    if (nblk <= kST)
        rank_each(gath, nblk, kST, [&](int, const Cand& x, int rank) {
            if (x.id >= 0 && rank == k - 1) *s_cut = x;
        });
    __syncthreads();
    const Cand cut = *s_cut;
    __syncthreads();  // gath is rewritten below
    if (cut.id >= 0) {
        for (int e = t; e < nblk * k; e += kST) {
            const Cand x = list_at(part, e / k, e % k, raw);
            if (x.id >= 0 && !better(cut, x)) {
                const int at = atomicAdd(s_n, 1);
                if (at < kST) gath[at] = x;
            }
        }
    }
    __syncthreads();
    const int n = cut.id >= 0 ? *s_n : kST + 1;
    if (n <= kST) {
        place_by_rank(gath, n, kST, k, top);
    } else {
        Cand prev{0.0f, -1};
        for (int i = 0; i < k; ++i) {
            const Cand mine = merge_pick(part, nblk, k, raw, prev);
            prev = block_best(mine, sh);
            if (t == 0) top[i] = prev;
        }
    }
    __syncthreads();
}

// Block P's share of the row's kept mass, sum of exp(v - km) over its kept candidates (0 when
// it keeps none), given the row's kept maximum km.
LOOM_DEV double kept_share(const Partial& P, double km) {
    return P.proc_s > 0 ? P.proc_s * exp(static_cast<double>(P.proc_m) - km) : 0.0;
}

// A row's totals over its stage-1 partials, found by warp 0 (lane l takes blocks l, l + 32, ...
// in that order, then a fixed tree over the lanes, so the result depends only on the row).
struct RowTotals {
    int nan, n_in;
    double km, total;  // the kept set's maximum and sum of exp(v - km) (sampling, processed logprobs)
    float raw_m;       // the raw logits' maximum and sum of exp(v - raw_m) (raw logprobs)
    double raw_s;
};

LOOM_DEV void row_totals(const Partial* part, int nblk, bool proc, bool raw, RowTotals* out) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    if (static_cast<int>(threadIdx.x) >= kWarp) return;
    int nan = 0, n_in = 0;
    float km = -INFINITY, rm = -INFINITY;
    for (int i = lane; i < nblk; i += kWarp) {
        const Partial& P = part[i];
        nan |= P.nan;
        n_in += P.n_in;
        if (proc && P.proc_s > 0) km = fmaxf(km, P.proc_m);
        if (raw) rm = fmaxf(rm, P.raw_m);
    }
    nan = warp_reduce(nan, AddOp{});  // a count of the blocks that saw a NaN
    n_in = warp_reduce(n_in, AddOp{});
    km = warp_max(km);
    rm = warp_max(rm);
    double tot = 0, rs = 0;
    for (int i = lane; i < nblk; i += kWarp) {
        const Partial& P = part[i];
        if (proc) tot += kept_share(P, km);
        if (raw) rs += P.raw_s * exp(static_cast<double>(P.raw_m) - rm);
    }
    tot = warp_sum_d(tot);
    rs = warp_sum_d(rs);
    if (lane == 0) *out = RowTotals{nan, n_in, static_cast<double>(km), tot, rm, rs};
}

}  // namespace
}  // namespace loom::gpu
