// Simple quantizers for the IQ1/IQ2/IQ3 types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
// IQ1_M), for random test weights.
//
// Each writes one 256-weight block in the layout that model/quant/quant_blocks_iq.hpp documents
// (ggml-common.h, as stored in GGUF files), choosing entries of the grids of
// model/quant/iq_grids.hpp. The method is loom's own and deliberately simple (ggml's
// quantizers search far more and weight the error by importance; these do neither):
//   1. each group of 8 weights takes the grid entry nearest to it at a given scale, among the
//      16 entries nearest to the group rounded value by value to the grid's levels (a table
//      per grid, built on first use); signs come from the weights (IQ2, IQ3: where the format
//      allows only an even number of negatives, the smallest weight's sign is flipped) and
//      IQ1's +-1/8 shift is whichever fits better;
//   2. each sub-block's scale is the best of a few starting guesses, each refit once by least
//      squares on the entries it chose;
//   3. the half-float block scale d maps the largest sub-block scale to the largest code; every
//      sub-block then tries the code whose scale is nearest its own and the two beside it (the
//      scale as the decoder computes it) and keeps the one of least squared error.
// Relative RMS error on N(0, 1) weights: tests/unit/quants.cpp states it per type (13% for
// IQ3_S to 46% for IQ1_S). Speed: 60-130 us of CPU time a block (trying every code and six
// guesses gained 1-3% in error for 3x the time).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "model/quant/iq_grids.hpp"
#include "model/quant/quant_blocks.hpp"
#include "model/quant/quant_internal.hpp"

namespace loom::model::qdetail {
namespace {

namespace qb = model::blocks;

// A grid (entries of k = 8 or 4 values) and an approximate nearest-entry search: the target
// is rounded value by value to the grid's levels, and the exact distance decides among the
// kCandidates entries nearest to that rounded point.
class GridSearch {
public:
    static constexpr int kCandidates = 16;

    // `table`: n entries; value j of entry i is byte j of table[i], as int8 when `is_signed`.
    template <class T>
    GridSearch(const T* table, int n, bool is_signed) : k_(static_cast<int>(sizeof(T))) {
        vals_.resize(static_cast<size_t>(n * k_));
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < k_; ++j) {
                const auto byte = static_cast<uint8_t>((static_cast<uint64_t>(table[i]) >> (8 * j)) & 0xff);
                vals_[static_cast<size_t>(i * k_ + j)] =
                    is_signed ? static_cast<float>(static_cast<int8_t>(byte)) : static_cast<float>(byte);
            }
        levels_ = vals_;
        std::sort(levels_.begin(), levels_.end());
        levels_.erase(std::unique(levels_.begin(), levels_.end()), levels_.end());
        for (size_t l = 0; l + 1 < levels_.size(); ++l) mids_.push_back(0.5f * (levels_[l] + levels_[l + 1]));
        size_t codes = 1;
        for (int j = 0; j < k_; ++j) codes *= levels_.size();
        cand_.resize(codes * kCandidates);
        std::vector<std::pair<float, uint16_t>> dist(static_cast<size_t>(n));
        float p[8];
        for (size_t c = 0; c < codes; ++c) {
            size_t rest = c;
            for (int j = 0; j < k_; ++j, rest /= levels_.size()) p[j] = levels_[rest % levels_.size()];
            for (int i = 0; i < n; ++i) dist[static_cast<size_t>(i)] = {distance(p, i), static_cast<uint16_t>(i)};
            std::partial_sort(dist.begin(), dist.begin() + kCandidates, dist.end());
            for (int m = 0; m < kCandidates; ++m)
                cand_[c * kCandidates + static_cast<size_t>(m)] = dist[static_cast<size_t>(m)].second;
        }
    }

    int k() const { return k_; }
    float top() const { return levels_.back(); }      // the largest value of any entry
    float bottom() const { return levels_.front(); }  // the smallest
    float value(int i, int j) const { return vals_[static_cast<size_t>(i * k_ + j)]; }

    // The entry nearest to the k values t (in grid units) found as described above. Any t,
    // NaN included, gives a valid index.
    int nearest(const float* t) const {
        size_t code = 0;
        for (int j = k_ - 1; j >= 0; --j) {
            size_t l = 0;
            while (l < mids_.size() && t[j] > mids_[l]) ++l;
            code = code * levels_.size() + l;
        }
        const uint16_t* c = &cand_[code * kCandidates];
        int best = c[0];
        float best_d = distance(t, best);
        for (int m = 1; m < kCandidates; ++m) {
            const float dd = distance(t, c[m]);
            if (dd < best_d) best_d = dd, best = c[m];
        }
        return best;
    }

private:
    float distance(const float* t, int i) const {
        float s = 0;
        for (int j = 0; j < k_; ++j) {
            const float e = t[j] - vals_[static_cast<size_t>(i * k_ + j)];
            s += e * e;
        }
        return s;
    }

    int k_;
    std::vector<float> vals_, levels_, mids_;
    std::vector<uint16_t> cand_;
};

// The search of grid table `kTable` (its bytes int8 when kSigned), built on first use.
template <const auto& kTable, bool kSigned = false>
const GridSearch& grid() {
    static const GridSearch g(kTable, static_cast<int>(std::size(kTable)), kSigned);
    return g;
}

// What a sub-block's choice costs at scale s: the squared error and, for the least-squares
// refit, sum x * u and sum u * u over its weights, u being the decoded value at scale 1.
struct Stats {
    float err = 0, num = 0, den = 0;
    void add(float x, float s, float u) {
        const float e = x - s * u;
        err += e * e, num += x * u, den += u * u;
    }
    Stats& operator+=(const Stats& o) {
        err += o.err, num += o.num, den += o.den;
        return *this;
    }
};

// A sub-block's grid entries (up to 4 groups of 8 weights, two entries per group on the
// 4-wide grids) and per group its sign byte (IQ2, IQ3) or shift sign (IQ1: 1 = -1/8).
struct Choice {
    uint16_t idx[8] = {};
    uint8_t signs[4] = {};
};

// IQ2/IQ3: magnitudes on `g`, signs from the weights; with `parity` an odd number of negatives
// flips the sign of the weight of least magnitude.
struct SignedGrid {
    const GridSearch& g;
    bool parity;

    float top() const { return g.top(); }
    float bottom() const { return g.bottom(); }

    Stats assign(const float* x, int len, float s, Choice& c) const {
        Stats st;
        const float inv = s > 0 ? 1.0f / s : 0.0f;
        for (int gi = 0; gi < len / 8; ++gi) {
            const float* xg = x + 8 * gi;
            uint32_t signs = 0;
            int jmin = 0;
            for (int j = 0; j < 8; ++j) {
                if (xg[j] < 0) signs |= 1u << j;
                if (std::fabs(xg[j]) < std::fabs(xg[jmin])) jmin = j;
            }
            if (parity && (std::popcount(signs) & 1)) signs ^= 1u << jmin;
            float t[8];
            for (int j = 0; j < 8; ++j) t[j] = (((signs >> j) & 1) ? -xg[j] : xg[j]) * inv;
            c.signs[gi] = static_cast<uint8_t>(signs);
            for (int h = 0; h < 8 / g.k(); ++h) {
                const int i = g.nearest(t + h * g.k());
                c.idx[gi * (8 / g.k()) + h] = static_cast<uint16_t>(i);
                for (int j = 0; j < g.k(); ++j) {
                    const int w = h * g.k() + j;
                    const float u = g.value(i, j);
                    st.add(xg[w], s, ((signs >> w) & 1) ? -u : u);
                }
            }
        }
        return st;
    }
};

// IQ1: values in {-1, 0, 1} plus a shift of +-kIq1Delta, one shift per group (IQ1_M) or per
// sub-block (IQ1_S, `shared_shift`).
struct ShiftedGrid {
    bool shared_shift;

    float top() const { return 1.0f + qb::kIq1Delta; }
    float bottom() const { return 1.0f - qb::kIq1Delta; }  // of the non-zero magnitudes

    Stats assign_group(const float* x, float s, bool neg, uint16_t& idx) const {
        const float delta = neg ? -qb::kIq1Delta : qb::kIq1Delta, inv = s > 0 ? 1.0f / s : 0.0f;
        float t[8];
        for (int j = 0; j < 8; ++j) t[j] = x[j] * inv - delta;
        const GridSearch& g = grid<qb::kIq1sGrid, true>();
        idx = static_cast<uint16_t>(g.nearest(t));
        Stats st;
        for (int j = 0; j < 8; ++j) st.add(x[j], s, g.value(idx, j) + delta);
        return st;
    }

    Stats assign(const float* x, int len, float s, Choice& c) const {
        Stats st[2];  // shared shift: each sign's total; per group: the chosen ones'
        Choice by[2];
        for (int gi = 0; gi < len / 8; ++gi) {
            Stats g[2];
            for (int n = 0; n < 2; ++n) g[n] = assign_group(x + 8 * gi, s, n == 1, by[n].idx[gi]);
            if (shared_shift) {
                st[0] += g[0], st[1] += g[1];
            } else {
                const int n = g[1].err < g[0].err ? 1 : 0;
                c.idx[gi] = by[n].idx[gi], c.signs[gi] = static_cast<uint8_t>(n), st[0] += g[n];
            }
        }
        if (!shared_shift) return st[0];
        const int n = st[1].err < st[0].err ? 1 : 0;
        c = by[n];
        for (int gi = 0; gi < len / 8; ++gi) c.signs[gi] = static_cast<uint8_t>(n);
        return st[n];
    }
};

// A good float scale for the sub-block x[0..len): the best of a few guesses, each refit once.
// The guesses put the largest |x| at a fraction of the grid's top value, or at its bottom one
// (for nearly constant sub-blocks: every grid has an entry of equal values).
template <class Kind>
float fit_scale(const Kind& kind, const float* x, int len) {
    float amax = 0;
    for (int j = 0; j < len; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    if (!(amax > 0) || !std::isfinite(amax)) return amax > 0 ? amax : 0.0f;
    float best_s = amax / kind.top(), best_err = std::numeric_limits<float>::infinity();
    for (const float f : {0.65f, 0.8f, 1.0f, kind.bottom() / kind.top()}) {
        Choice c;
        float s = amax / (kind.top() * f);
        const Stats st = kind.assign(x, len, s, c);
        if (st.num > 0 && st.den > 0) s = st.num / st.den;
        const float err = kind.assign(x, len, s, c).err;
        if (err < best_err) best_err = err, best_s = s;
    }
    return best_s;
}

// A fitted block of kSubs sub-blocks: the half d's bits, each sub-block's code and choice.
template <int kSubs>
struct BlockFit {
    uint16_t d = 0;
    int codes[kSubs] = {};
    Choice ch[kSubs];
};

// Fits a whole block of kSubs sub-blocks (of 256 / kSubs weights), codes 0..max_code whose
// scale is scale(d, code) (the decoder's expression), and stores d at d_at (null: not stored).
template <int kSubs, class Kind, class ScaleFn>
BlockFit<kSubs> fit_block(const Kind& kind, const float* x, int max_code, ScaleFn scale, uint8_t* d_at) {
    constexpr int len = 256 / kSubs;
    BlockFit<kSubs> f;
    float sig[kSubs], smax = 0;
    for (int i = 0; i < kSubs; ++i) smax = std::fmax(smax, sig[i] = fit_scale(kind, x + i * len, len));
    f.d = fp32_to_fp16(smax / scale(1.0f, max_code));
    if (d_at) std::memcpy(d_at, &f.d, 2);
    const float d = fp16_to_fp32(f.d);
    for (int i = 0; i < kSubs; ++i) {
        float best = std::numeric_limits<float>::infinity();
        kind.assign(x + i * len, len, scale(d, 0), f.ch[i]);
        // The code whose scale is nearest sig[i], and its neighbours.
        int c0 = 0;
        for (int c = 1; c <= max_code; ++c)
            if (std::fabs(scale(d, c) - sig[i]) < std::fabs(scale(d, c0) - sig[i])) c0 = c;
        for (int c = std::max(0, c0 - 1); c <= std::min(max_code, c0 + 1); ++c) {
            Choice ch;
            const float err = kind.assign(x + i * len, len, scale(d, c), ch).err;
            if (err < best) best = err, f.codes[i] = c, f.ch[i] = ch;
        }
    }
    return f;
}

// The decoders' sub-block scales (quant_blocks_iq.hpp), for an int code.
float scale_iq2(float d, int c) { return qb::iq2_scale(d, static_cast<uint32_t>(c)); }
float scale_iq3xxs(float d, int c) { return qb::iq3xxs_scale(d, static_cast<uint32_t>(c)); }
float scale_odd(float d, int c) { return qb::iq_odd_scale(d, static_cast<uint32_t>(c)); }  // IQ3_S, IQ1_S, IQ1_M

void put_u16(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 2); }  // the low half of v, little-endian
void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

}  // namespace

void quantize_block_iq2_xxs(const float* x, uint8_t* b) {
    const auto f = fit_block<8>(SignedGrid{grid<qb::kIq2xxsGrid>(), true}, x, 15, scale_iq2, b);
    for (int s = 0; s < 8; ++s) {
        uint8_t* q = b + 2 + 8 * s;
        uint32_t hi = static_cast<uint32_t>(f.codes[s]) << 28;
        for (int l = 0; l < 4; ++l) {
            q[l] = static_cast<uint8_t>(f.ch[s].idx[l]);
            hi |= static_cast<uint32_t>(f.ch[s].signs[l] & 127) << (7 * l);
        }
        put_u32(q + 4, hi);
    }
}

void quantize_block_iq2_xs(const float* x, uint8_t* b) {
    const auto f = fit_block<16>(SignedGrid{grid<qb::kIq2xsGrid>(), true}, x, 15, scale_iq2, b);
    for (int h = 0; h < 16; ++h)  // half h of sub-block h / 2: groups 2h, 2h + 1
        for (int l = 0; l < 2; ++l)
            put_u16(b + 2 + 2 * (2 * h + l), f.ch[h].idx[l] | static_cast<uint32_t>(f.ch[h].signs[l] & 127) << 9);
    for (int s = 0; s < 8; ++s) b[66 + s] = static_cast<uint8_t>(f.codes[2 * s] | (f.codes[2 * s + 1] << 4));
}

void quantize_block_iq2_s(const float* x, uint8_t* b) {
    const auto f = fit_block<16>(SignedGrid{grid<qb::kIq2sGrid>(), false}, x, 15, scale_iq2, b);
    std::memset(b + 66, 0, 8);
    for (int h = 0; h < 16; ++h)
        for (int l = 0; l < 2; ++l) {
            const int g = 2 * h + l, idx = f.ch[h].idx[l];
            b[2 + g] = static_cast<uint8_t>(idx & 255);
            b[34 + g] = f.ch[h].signs[l];
            b[66 + g / 4] = static_cast<uint8_t>(b[66 + g / 4] | ((idx >> 8) << (2 * (g % 4))));
        }
    for (int s = 0; s < 8; ++s) b[74 + s] = static_cast<uint8_t>(f.codes[2 * s] | (f.codes[2 * s + 1] << 4));
}

void quantize_block_iq3_xxs(const float* x, uint8_t* b) {
    const auto f = fit_block<8>(SignedGrid{grid<qb::kIq3xxsGrid>(), true}, x, 15, scale_iq3xxs, b);
    for (int s = 0; s < 8; ++s) {
        uint32_t a = static_cast<uint32_t>(f.codes[s]) << 28;
        for (int l = 0; l < 4; ++l) {
            b[2 + 8 * s + 2 * l] = static_cast<uint8_t>(f.ch[s].idx[2 * l]);
            b[2 + 8 * s + 2 * l + 1] = static_cast<uint8_t>(f.ch[s].idx[2 * l + 1]);
            a |= static_cast<uint32_t>(f.ch[s].signs[l] & 127) << (7 * l);
        }
        put_u32(b + 66 + 4 * s, a);
    }
}

void quantize_block_iq3_s(const float* x, uint8_t* b) {
    const auto f = fit_block<8>(SignedGrid{grid<qb::kIq3sGrid>(), false}, x, 15, scale_odd, b);
    for (int s = 0; s < 8; ++s) {
        uint32_t qh = 0;
        for (int e = 0; e < 8; ++e) {  // entry e: weights 4e..4e+3 of the sub-block
            b[2 + 8 * s + e] = static_cast<uint8_t>(f.ch[s].idx[e] & 255);
            qh |= static_cast<uint32_t>(f.ch[s].idx[e] >> 8) << e;
        }
        b[66 + s] = static_cast<uint8_t>(qh);
        for (int l = 0; l < 4; ++l) b[74 + 4 * s + l] = f.ch[s].signs[l];
    }
    for (int s = 0; s < 4; ++s) b[106 + s] = static_cast<uint8_t>(f.codes[2 * s] | (f.codes[2 * s + 1] << 4));
}

void quantize_block_iq1_s(const float* x, uint8_t* b) {
    const auto f = fit_block<8>(ShiftedGrid{true}, x, 7, scale_odd, b);
    for (int s = 0; s < 8; ++s) {
        uint32_t qh = static_cast<uint32_t>(f.codes[s]) << 12 | static_cast<uint32_t>(f.ch[s].signs[0]) << 15;
        for (int l = 0; l < 4; ++l) {
            b[2 + 4 * s + l] = static_cast<uint8_t>(f.ch[s].idx[l] & 255);
            qh |= static_cast<uint32_t>(f.ch[s].idx[l] >> 8) << (3 * l);
        }
        put_u16(b + 34 + 2 * s, qh);
    }
}

void quantize_block_iq1_m(const float* x, uint8_t* b) {
    const auto f = fit_block<16>(ShiftedGrid{false}, x, 7, scale_odd, nullptr);
    uint32_t w[4] = {};  // the scale words: codes, then the top nibbles hold d's bits
    std::memset(b + 32, 0, 16);
    for (int h = 0; h < 16; ++h) {  // half h % 2 of sub-block s = h / 2
        const int s = h / 2;
        w[s / 2] |= static_cast<uint32_t>(f.codes[h]) << (6 * (s % 2) + 3 * (h % 2));
        for (int l = 0; l < 2; ++l) {
            const int g = 2 * h + l;  // group g % 4 of sub-block s
            b[g] = static_cast<uint8_t>(f.ch[h].idx[l] & 255);
            const uint32_t nib = static_cast<uint32_t>(f.ch[h].idx[l] >> 8) | static_cast<uint32_t>(f.ch[h].signs[l])
                                                                                  << 3;
            b[32 + g / 2] = static_cast<uint8_t>(b[32 + g / 2] | (nib << (4 * (g % 2))));
        }
    }
    for (int i = 0; i < 4; ++i) put_u16(b + 48 + 2 * i, w[i] | ((static_cast<uint32_t>(f.d) >> (4 * i)) & 15) << 12);
}

}  // namespace loom::model::qdetail
