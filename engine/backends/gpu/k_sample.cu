// Sampling and logprobs on the device, reproducing engine/sampler.cpp: raw logprobs are the
// log-softmax of the raw logits over the candidates (the allowed ids, or all), the processed
// distribution applies bias, penalties, temperature, top-k, top-p and min-p, and the token is
// the argmax (greedy) or the first kept id whose cumulative probability exceeds u * total.
// Every launch covers all the rows of a step (blockIdx.y or blockIdx.x is the row); a row's
// configuration and state are its slot's SampleCfg (kernels.hpp), and the processed logits are
// computed where they are read, from the raw logits and the slot's bias and penalty state.
//
// A row with a grammar mask (SampleRow::mask) takes its raw logprobs over all its candidates and
// everything else (filters, draw, processed logprobs) over the candidates the mask allows, as
// sampler.cpp removes the masked ones after the raw logprobs; a row without one reads no mask.
//
// The kept set of the filters is a prefix of the candidates ordered by (value desc, id asc), so
// it is described by its last member, the "pivot": with key = (order-preserving bits of the
// value) << 32 | (2^32 - 1 - id), an element is kept when its key >= the pivot's. The pivot is
// found by radix selection over the keys (8 passes of 8 bits; counts for top-k, probability
// mass for top-p). Sums of exponentials are in double, as in the reference, but for the raw
// logprobs' few terms a thread, added in float first. Three launches: select_kernel (the
// pivot), stage1_kernel (per block of kChunk candidates: maxima, sums and top-K lists; the block
// top-K in k_topk.cuh) and stage2_kernel (per row: the blocks' partials merged, k_merge.cuh, then
// the draw and the logprobs).
#include <cmath>

#include "engine/backends/gpu/k_sample.cuh"
#include "engine/backends/gpu/k_merge.cuh"
#include "engine/backends/gpu/k_topk.cuh"

namespace loom::gpu {
namespace {

// Stage 1 runs blocks of kS1 threads, 1,024 threads an SM (at most 64 registers each), so that one
// block's barriers and serial merges overlap the others' loads; kChunk candidates a block.
constexpr int kS1 = 256;
constexpr int kChunk = kS1 * kPer;   // candidates per stage-1 block (kPer: k_topk.cuh)
constexpr int kDraw = kChunk / kST;  // candidates per stage-2 thread in the draw's chunk
static_assert(kChunk % kST == 0, "a stage-2 thread draws over whole candidates");

struct Scratch {
    uint64_t pivot;  // 0: every candidate kept
    uint64_t pad[7];
};

LOOM_HD inline int blocks_of(int n_cand) { return n_cand <= 0 ? 1 : (n_cand + kChunk - 1) / kChunk; }

// Bytes of one row's scratch: its Scratch, then the Partials of up to blocks_of(n_vocab) blocks.
size_t row_scratch_bytes(int n_vocab) {
    return (sizeof(Scratch) + sizeof(Partial) * static_cast<size_t>(blocks_of(n_vocab)) + 255) / 256 * 256;
}

// One row's view of a launch: its configuration, logits and scratch.
struct RowView {
    SampleCfg c;
    const float* logits;
    Scratch* sc;
    Partial* part;
    const uint32_t* mask;  // null: no grammar
};

LOOM_DEV RowView row_view(const float* logits, int64_t ld, const SampleCfg* cfgs, const SampleRow* rows, int r,
                          void* scratch, size_t row_bytes) {
    const SampleRow sr = rows[r];
    RowView v;
    v.c = cfgs[sr.slot];
    v.logits = logits + sr.logits_row * ld;
    auto* base = static_cast<uint8_t*>(scratch) + static_cast<size_t>(r) * row_bytes;
    v.sc = reinterpret_cast<Scratch*>(base);
    v.part = reinterpret_cast<Partial*>(base + sizeof(Scratch));
    v.mask = sr.mask;
    return v;
}

LOOM_DEV int cand_id(const SampleCfg& c, const int32_t* allowed, int i) { return c.has_allowed ? allowed[i] : i; }

// Whether the row's grammar mask allows id (always, without a mask).
LOOM_DEV bool in_mask(const uint32_t* mask, int id) {
    return mask == nullptr || ((mask[id >> 5] >> (id & 31)) & 1u) != 0;
}

// The processed logit of id (sampler.cpp's order): logit bias (the entries of an id named more
// than once in order), repetition penalty over prompt and output, frequency and presence
// penalties over the output, temperature.
LOOM_DEV float proc_val(const SampleCfg& c, const float* logits, int id) {
    float v = logits[id];
    if (c.has_bias) {
        const float b = c.bias[id];
        if (b == b) {
            v += b;
        } else {
            for (int j = 0; j < c.n_multi; ++j)
                if (c.multi[j].id == id) v += c.multi[j].bias;
        }
    }
    if (c.penalties) {
        const uint32_t p = c.pen[id];
        if (c.rep_penalty != 1.0f && (p & kSeenBit)) v = v > 0 ? v / c.rep_penalty : v * c.rep_penalty;
        const uint32_t n = p & ~kSeenBit;
        if (n > 0) v -= c.frequency * static_cast<float>(n) + c.presence;
    }
    if (!c.greedy && c.temperature != 1.0f) v /= c.temperature;
    return v;
}

// Finds the pivot of the top-k / top-p / min-p filters (one block per row; rows without a
// filter return at once).
__global__ void __launch_bounds__(kST) select_kernel(const float* logits_all, int64_t ld, const SampleCfg* cfgs,
                                                     const SampleRow* rows, void* scratch, size_t row_bytes) {
    __shared__ Cand shc[kST / 32 + 1];
    __shared__ double shd[kST / 32];
    __shared__ int hist[256];
    __shared__ double mass[256];
    __shared__ uint64_t s_prefix;
    __shared__ int s_rank, s_ok, s_in;
    __shared__ double s_cum;
    const RowView rv = row_view(logits_all, ld, cfgs, rows, static_cast<int>(blockIdx.y), scratch, row_bytes);
    const SampleCfg& c = rv.c;
    if (!c.filter) return;
    const float* logits = rv.logits;
    const int32_t* allowed = c.allowed;
    const uint32_t* mask = rv.mask;
    Scratch* sc = rv.sc;
    const int n = c.n_cand, t = static_cast<int>(threadIdx.x);

    if (t == 0) s_in = 0;
    __syncthreads();
    Cand best{0.0f, -1};
    int n_in = 0;
    for (int i = t; i < n; i += kST) {
        const int id = cand_id(c, allowed, i);
        if (!in_mask(mask, id)) continue;
        ++n_in;
        const Cand x{proc_val(c, logits, id), id};
        if (better(x, best)) best = x;
    }
    if (n_in) atomicAdd(&s_in, n_in);
    best = block_best(best, shc);  // its syncs publish s_in
    if (best.id < 0) {             // the mask allows no candidate: stage 2 reports it
        if (t == 0) sc->pivot = 0;
        return;
    }
    const int n_kept_max = s_in;  // candidates the filters choose from (sampler.cpp: after the mask)
    const double m = best.v;
    uint64_t pivot = 0;

    // top-k: the element of rank top_k.
    if (c.top_k > 0 && c.top_k < n_kept_max) {
        if (t == 0) s_prefix = 0, s_rank = c.top_k;
        __syncthreads();
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int i = t; i < 256; i += kST) hist[i] = 0;
            __syncthreads();
            const uint64_t prefix = s_prefix;
            for (int i = t; i < n; i += kST) {
                const int id = cand_id(c, allowed, i);
                if (!in_mask(mask, id)) continue;
                const uint64_t k = key_of(proc_val(c, logits, id), id);
                if (shift == 56 || (k >> (shift + 8)) == (prefix >> (shift + 8)))
                    atomicAdd(&hist[(k >> shift) & 255u], 1);
            }
            __syncthreads();
            if (t == 0) {
                int r = s_rank, bin = 255;
                for (; bin > 0; --bin) {
                    if (r <= hist[bin]) break;
                    r -= hist[bin];
                }
                s_rank = r;
                s_prefix = prefix | (static_cast<uint64_t>(bin) << shift);
            }
            __syncthreads();
        }
        pivot = s_prefix;
    }

    // Total probability mass of the kept set, around the maximum.
    double tot = 0;
    for (int i = t; i < n; i += kST) {
        const int id = cand_id(c, allowed, i);
        if (!in_mask(mask, id)) continue;
        const float v = proc_val(c, logits, id);
        if (key_of(v, id) >= pivot) tot += exp(static_cast<double>(v) - m);
    }
    tot = block_sum(tot, shd);

    // top-p: the first element whose inclusive cumulative probability reaches top_p.
    if (c.top_p < 1.0f) {
        if (t == 0) s_prefix = 0, s_cum = 0, s_ok = 1;
        __syncthreads();
        for (int shift = 56; shift >= 0 && s_ok; shift -= 8) {
            for (int i = t; i < 256; i += kST) mass[i] = 0;
            __syncthreads();
            const uint64_t prefix = s_prefix;
            for (int i = t; i < n; i += kST) {
                const int id = cand_id(c, allowed, i);
                if (!in_mask(mask, id)) continue;
                const float v = proc_val(c, logits, id);
                const uint64_t k = key_of(v, id);
                if (k >= pivot && (shift == 56 || (k >> (shift + 8)) == (prefix >> (shift + 8))))
                    atomicAdd(&mass[(k >> shift) & 255u], exp(static_cast<double>(v) - m) / tot);
            }
            __syncthreads();
            if (t == 0) {
                double cum = s_cum;
                int bin = 255, chosen = -1, lowest = -1;
                for (; bin >= 0; --bin) {
                    if (mass[bin] > 0) lowest = bin;
                    if (mass[bin] > 0 && cum + mass[bin] >= static_cast<double>(c.top_p)) {
                        chosen = bin;
                        break;
                    }
                    cum += mass[bin];
                }
                if (chosen < 0 && shift == 56) s_ok = 0;  // the mass never reaches top_p: no cut
                else {
                    if (chosen < 0) chosen = lowest, cum = s_cum;
                    s_cum = cum;
                    s_prefix = prefix | (static_cast<uint64_t>(chosen) << shift);
                }
            }
            __syncthreads();
        }
        if (s_ok) pivot = s_prefix;
        __syncthreads();
    }

    // min-p: keep the elements with p >= min_p * p_max (at least the first).
    if (c.min_p > 0.0f) {
        const double cut = log(static_cast<double>(c.min_p));
        Cand worst{0.0f, -1};  // the kept element with the smallest key meeting the cut
        for (int i = t; i < n; i += kST) {
            const int id = cand_id(c, allowed, i);
            if (!in_mask(mask, id)) continue;
            const float v = proc_val(c, logits, id);
            if (key_of(v, id) >= pivot && static_cast<double>(v) - m >= cut) {
                const Cand x{v, id};
                if (worst.id < 0 || better(worst, x)) worst = x;
            }
        }
        // Reduce to the worst: negate the order by comparing with swapped arguments.
        const int lane = t % kWarp, warp = t / kWarp, nw = kST / kWarp;
#pragma unroll
        for (int s = kWarp / 2; s > 0; s >>= 1) {
            Cand o;
            o.v = shfl_xor(worst.v, s);
            o.id = shfl_xor(worst.id, s);
            if (o.id >= 0 && (worst.id < 0 || better(worst, o))) worst = o;
        }
        if (lane == 0) shc[warp] = worst;
        __syncthreads();
        if (t == 0) {
            Cand w = shc[0];
            for (int i = 1; i < nw; ++i)
                if (shc[i].id >= 0 && (w.id < 0 || better(w, shc[i]))) w = shc[i];
            shc[nw] = w;
        }
        __syncthreads();
        const Cand w = shc[nw];
        pivot = w.id >= 0 ? key_of(w.v, w.id) : key_of(best.v, best.id);
    }
    if (t == 0) sc->pivot = pivot;
}

// Per-block statistics over kChunk candidates: raw max/sum and top-K, processed top-K, and the
// kept set's max/sum and last member. Block (b, r) covers candidates b * kChunk.. of row r;
// blocks past the row's candidates return at once.
__global__ void __launch_bounds__(kS1, 1024 / kS1)
    stage1_kernel(const float* logits_all, int64_t ld, const SampleCfg* cfgs, const SampleRow* rows, void* scratch,
                  size_t row_bytes) {
    __shared__ Cand shc[kGather<kS1>];  // block_top_k's lists
    __shared__ Cand s_cut[2];
    __shared__ int s_gathered;
    __shared__ float shf[kS1 / 32];
    __shared__ double shd[2 * kS1 / 32 + 1];
    __shared__ int s_nan, s_in;
    const RowView rv = row_view(logits_all, ld, cfgs, rows, static_cast<int>(blockIdx.y), scratch, row_bytes);
    const SampleCfg& c = rv.c;
    const int t = static_cast<int>(threadIdx.x), b = static_cast<int>(blockIdx.x);
    const int nblk = blocks_of(c.n_cand);
    if (b >= nblk) return;
    const float* logits = rv.logits;
    const int32_t* allowed = c.allowed;
    Partial* part = rv.part;
    const bool filter = c.filter != 0;
    const uint64_t pivot = filter ? rv.sc->pivot : 0;
    const uint32_t* mask = rv.mask;
    if (t == 0) s_nan = 0, s_in = 0;
    __syncthreads();
    // A NaN anywhere in the row's logits fails the row: without `allowed` the candidates are the
    // whole vocabulary and are checked as they are read; with it, each block scans its share.
    bool nan = false;
    if (c.has_allowed) {
        const int per = (c.n_vocab + nblk - 1) / nblk;
        const int lo = b * per, hi = min(c.n_vocab, lo + per);
        for (int i = lo + t; i < hi; i += kS1) nan |= logits[i] != logits[i];
    }
    float raw[kPer], pv[kPer];
    int ids[kPer], pids[kPer];  // the candidate ids (raw logprobs), those the mask allows (-1 else)
    bool kept[kPer];
    int n_in = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int i = b * kChunk + t + kS1 * j;
        ids[j] = pids[j] = -1;
        raw[j] = pv[j] = -INFINITY;
        kept[j] = false;
        if (i < c.n_cand) {
            const int id = cand_id(c, allowed, i);
            ids[j] = id;
            raw[j] = logits[id];
            nan |= raw[j] != raw[j];
            if (in_mask(mask, id)) {
                pids[j] = id;
                ++n_in;
                pv[j] = proc_val(c, logits, id);
                kept[j] = !filter || key_of(pv[j], id) >= pivot;
            }
        }
    }
    if (nan) s_nan = 1;
    if (mask && n_in) atomicAdd(&s_in, n_in);
    Partial& P = part[b];
    // Whether the processed values are the raw ones (no mask, bias, penalties or temperature),
    // so that the greedy token is the raw top-K's first.
    const bool proc_is_raw = c.k_proc == 1 && c.k_raw >= kFloorK && !mask && !c.has_bias && !c.penalties &&
                             (c.greedy || c.temperature == 1.0f);
    if (c.k_raw >= 0) {
        float m = -INFINITY;
        double s = 0;
        if (c.k_raw >= kFloorK) {  // the top-K's floor search has the maximum and the sum
            const Cand top = block_top_k<kS1>(raw, ids, c.k_raw, P.raw, shc, &s_gathered, s_cut, shd);
            if (top.id >= 0) m = top.v;
            s = shd[2 * kS1 / 32];
            if (proc_is_raw && t == 0) P.proc[0] = top;
        } else {
#pragma unroll
            for (int j = 0; j < kPer; ++j)
                if (ids[j] >= 0) m = fmaxf(m, raw[j]);
            m = block_max(m, shf);
            block_top_k<kS1>(raw, ids, c.k_raw, P.raw, shc, &s_gathered, s_cut);
            // A thread's kPer terms in float (expf: within 2 ulp), the block's sum in double: the
            // raw logprobs need no draw to agree with, and exp in double cost more than the top-K.
            float sf = 0.0f;
#pragma unroll
            for (int j = 0; j < kPer; ++j)
                if (ids[j] >= 0) sf += expf(raw[j] - m);
            s = block_sum(static_cast<double>(sf), shd);
        }
        if (t == 0) P.raw_m = m, P.raw_s = s;
    }
    if (!proc_is_raw)
        block_top_k<kS1>(pv, pids, c.k_proc, P.proc, shc, &s_gathered, s_cut);  // the ids the mask allows (-1 else)
    if (!c.greedy || c.processed_lp) {
        float m = -INFINITY;
        int last = -1;
#pragma unroll
        for (int j = 0; j < kPer; ++j)
            if (ids[j] >= 0 && kept[j]) m = fmaxf(m, pv[j]), last = max(last, b * kChunk + t + kS1 * j);
        m = block_max(m, shf);
        double s = 0;
#pragma unroll
        for (int j = 0; j < kPer; ++j)
            if (ids[j] >= 0 && kept[j]) s += exp(static_cast<double>(pv[j]) - m);
        s = block_sum(s, shd);
        __shared__ int s_last;
        if (t == 0) s_last = -1;
        __syncthreads();
        if (last >= 0) atomicMax(&s_last, last);
        __syncthreads();
        if (t == 0) P.proc_m = m, P.proc_s = s, P.last_kept = s_last;
    }
    __syncthreads();
    if (t == 0) P.nan = s_nan, P.n_in = s_in;
}

// Merges the partials, draws the token, writes the result and counts the token in the slot's
// penalty state (one block per row).
__global__ void __launch_bounds__(kST)
    stage2_kernel(const float* logits_all, int64_t ld, const SampleCfg* cfgs, const SampleRow* rows, void* scratch,
                  size_t row_bytes, SampleOut* out_all) {
    __shared__ Cand shc[kST / 32 + 1];
    __shared__ Cand top[kMaxTop], rtop[kMaxTop];
    __shared__ Cand gath[kST];
    __shared__ Cand s_cut;
    __shared__ RowTotals s_tot;
    __shared__ double sh_scan[kST];
    __shared__ double sh_w[kST / 32 + 1];
    __shared__ int s_first, s_bc, s_token, s_n;
    __shared__ double s_cum;
    const int r = static_cast<int>(blockIdx.x);
    const RowView rv = row_view(logits_all, ld, cfgs, rows, r, scratch, row_bytes);
    const SampleCfg& c = rv.c;
    const float* logits = rv.logits;
    const int32_t* allowed = c.allowed;
    const Partial* part = rv.part;
    const int nblk = blocks_of(c.n_cand);
    const double u = rows[r].u;
    SampleOut* out = out_all + r;
    const int t = static_cast<int>(threadIdx.x);
    const bool filter = c.filter != 0;
    const uint64_t pivot = filter ? rv.sc->pivot : 0;
    const bool need_kept = !c.greedy || c.processed_lp;
    row_totals(part, nblk, need_kept, !c.processed_lp && c.k_raw >= 0, &s_tot);
    __syncthreads();
    const RowTotals tots = s_tot;
    if (tots.nan) {
        if (t == 0) out->nan = 1, out->token = -1, out->n_top = 0;
        return;
    }
    const uint32_t* mask = rv.mask;
    if (mask && tots.n_in == 0) {
        if (t == 0) out->nan = kMaskEmpty, out->token = -1, out->n_top = 0;
        return;
    }
    // Kept-set totals (sampling and processed logprobs).
    const double KM = need_kept ? tots.km : -INFINITY, total = need_kept ? tots.total : 0;
    // Merge the processed top lists (top-1 is the greedy token).
    const int kp = c.k_proc;
    merge_lists(part, nblk, kp, false, top, gath, shc, &s_n, &s_cut);
    int token = -1;
    if (c.greedy) {
        token = top[0].id;
    } else {
        // Each block's share of the kept mass (thread i for block i), then thread 0 finds the
        // block where the cumulative mass passes u * total.
        if (t < nblk) sh_scan[t] = kept_share(part[t], KM);
        __syncthreads();
        if (t == 0) {
            const double target = u * total;
            double cum = 0;
            int bc = -1, last = -1;
            for (int i = 0; i < nblk; ++i) {
                if (part[i].last_kept >= 0) last = part[i].last_kept;
                if (part[i].proc_s <= 0) continue;
                const double tb = i < kST ? sh_scan[i] : kept_share(part[i], KM);
                if (cum + tb > target) {
                    bc = i;
                    break;
                }
                cum += tb;
            }
            s_bc = bc;
            s_cum = cum;
            s_token = bc < 0 ? cand_id(c, allowed, last) : -1;
            s_first = kST;
        }
        __syncthreads();
        if (s_bc >= 0) {
            const int bc = s_bc;
            const double target = u * total;
            double e[kDraw];
            double ts = 0;
#pragma unroll
            for (int j = 0; j < kDraw; ++j) {
                const int i = bc * kChunk + kDraw * t + j;
                e[j] = -1;  // not a kept candidate
                if (i < c.n_cand) {
                    const int id = cand_id(c, allowed, i);
                    if (in_mask(mask, id)) {
                        const float v = proc_val(c, logits, id);
                        if (!filter || key_of(v, id) >= pivot) e[j] = exp(static_cast<double>(v) - KM);
                    }
                }
                if (e[j] >= 0) ts += e[j];
            }
            sh_scan[t] = ts;
            __syncthreads();
            if (t < kST / 32) {
                double w = 0;
                for (int i = 0; i < 32; ++i) w += sh_scan[t * 32 + i];
                sh_w[t] = w;
            }
            __syncthreads();
            if (t == 0) {
                double run = 0;
                for (int i = 0; i < kST / 32; ++i) {
                    const double w = sh_w[i];
                    sh_w[i] = run;
                    run += w;
                }
            }
            __syncthreads();
            double excl = s_cum + sh_w[t / 32];
            for (int i = (t / 32) * 32; i < t; ++i) excl += sh_scan[i];
            if (ts > 0 && excl + ts > target) atomicMin(&s_first, t);
            __syncthreads();
            // The last kept candidate of the block, should rounding leave the draw past its end.
            int mylast = -1;
#pragma unroll
            for (int j = 0; j < kDraw; ++j)
                if (e[j] >= 0) mylast = bc * kChunk + kDraw * t + j;
            __shared__ int s_last;
            if (t == 0) s_last = -1;
            __syncthreads();
            if (mylast >= 0) atomicMax(&s_last, mylast);
            __syncthreads();
            if (t == s_first) {
                double cum = excl;
                int pick = -1;
#pragma unroll
                for (int j = 0; j < kDraw; ++j)
                    if (e[j] >= 0 && pick < 0) {
                        cum += e[j];
                        if (cum > target) pick = bc * kChunk + kDraw * t + j;
                    }
                if (pick < 0) pick = mylast;
                s_token = cand_id(c, allowed, pick);
            }
            if (t == 0 && s_first == kST) s_token = cand_id(c, allowed, s_last);
            __syncthreads();
        }
        token = s_token;
    }

    // Logprobs.
    if (c.processed_lp) {
        const double lz = KM + log(total);
        if (t == 0) {
            const float v = proc_val(c, logits, token);
            const bool k = !filter || key_of(v, token) >= pivot;
            out->logprob = k ? static_cast<float>(v - lz) : -INFINITY;
            int nt = 0;  // fewer than kp when the mask allows fewer candidates
            for (int i = 0; i < kp && top[i].id >= 0; ++i, ++nt) {
                const Cand x = top[i];
                const bool kx = !filter || key_of(x.v, x.id) >= pivot;
                out->top_id[i] = x.id;
                out->top_lp[i] = kx ? static_cast<float>(x.v - lz) : -INFINITY;
            }
            out->n_top = nt;
        }
    } else if (c.k_raw >= 0) {
        const double lz = static_cast<double>(tots.raw_m) + log(tots.raw_s);
        const int kr = c.k_raw;
        merge_lists(part, nblk, kr, true, rtop, gath, shc, &s_n, &s_cut);
        for (int k = t; k < kr; k += kST) {
            out->top_id[k] = rtop[k].id;
            out->top_lp[k] = static_cast<float>(rtop[k].v - lz);
        }
        if (t == 0) {
            out->logprob = static_cast<float>(logits[token] - lz);
            out->n_top = kr;
        }
    } else if (t == 0) {
        out->logprob = 0;
        out->n_top = 0;
    }
    __syncthreads();
    if (t == 0) {
        out->token = token, out->nan = 0;
        if (c.penalties && token >= 0) c.pen[token] = ((c.pen[token] & ~kSeenBit) + 1u) | kSeenBit;
    }
}

}  // namespace

int sample_blocks(int n_cand) { return blocks_of(n_cand); }

size_t sample_scratch_bytes(int n_vocab, int rows) {
    return row_scratch_bytes(n_vocab) * static_cast<size_t>(rows < 1 ? 1 : rows);
}

void sample_rows(const float* logits, int64_t ld, int n_vocab, const SampleCfg* cfgs, const SampleRow* rows, int n,
                 int nblk, void* scratch, SampleOut* out, gpuStream_t s) {
    if (n <= 0) return;
    const size_t rb = row_scratch_bytes(n_vocab);
    const auto rows_u = static_cast<unsigned>(n);
    auto k0 = select_kernel;
    LOOM_LAUNCH(k0, dim3(1, rows_u), kST, 0, s, logits, ld, cfgs, rows, scratch, rb);
    LOOM_GPU_CHECK_LAUNCH();
    auto k1 = stage1_kernel;
    LOOM_LAUNCH(k1, dim3(static_cast<unsigned>(nblk), rows_u), kS1, 0, s, logits, ld, cfgs, rows, scratch, rb);
    LOOM_GPU_CHECK_LAUNCH();
    auto k2 = stage2_kernel;
    LOOM_LAUNCH(k2, rows_u, kST, 0, s, logits, ld, cfgs, rows, scratch, rb, out);
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace loom::gpu
