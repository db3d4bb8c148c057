// The decode GEMM's fragment kernels (kernels.hpp qgemm, k_qgemm.cuh qgemm_frag): y[M x N]
// (+)= x[M x K] . w[N x K]^T for Q4_K or Q6_K weights and F16 activations, with no shared-memory
// copy of the weights. Each warp owns 16 weight rows; lane (g, t) = (lane / 4, lane % 4) loads,
// per 256-column block of rows g and g + 8, the bytes of two 32-column groups of the block (its
// "first" and "second" group) and decodes them straight into the A fragments of mma.sync
// m16n8k16, which are also a warp's share of the register A operand of Hopper's wgmma
// m64nNk16 (k_wgmma.cuh): from 17 activation rows the kernel multiplies each warpgroup's 64
// rows with all the block's activation rows in one wgmma a K step, asynchronously, decoding the
// next steps meanwhile (against mma.sync with ldmatrix B fragments: 64 / 128-row steps 0.89 /
// 0.87 of the time on an H100, docs/benchmarks.md); smaller blocks and the exact kernel keep
// mma.sync. The codecs:
//  - Q4_K (Q4Frag): the 16-byte header and the 32 quant bytes of sub-blocks 2t and 2t + 1 (bytes
//    32t.. of the block's 128). A nibble pair becomes an F16 pair through
//    (q & 0x000F000F) | 0x64006400 = 1024 + q (0x5400..: 64 + q for high nibbles), then one
//    exact subtraction and one F16x2 FMA n * f16(d * sc) - f16(dmin * m). About 1.8
//    instructions a weight, against 9 for the tile kernel's F32 decode and shared-memory round
//    trip.
//  - Q6_K (Q6Frag): lane t takes the groups of ql bytes 64n + 32o.. (n = t / 2, o = t % 2):
//    their low nibbles with qh bits 2o, 2o + 1 (columns 128n + 32o.., the first group) and
//    their high nibbles with qh bits 2o + 4, 2o + 5 (64 columns further, the second). A pair of
//    6-bit quants is assembled from the two, becomes 1024 + q the same way, q - 32 by one exact
//    subtraction. The scale d * sc (exact in F32) is split into F16 parts hi + lo, and the
//    weight is fma(q - 32, hi, (q - 32) * lo): one rounding of d * sc * (q - 32) to F16 but
//    for a term 2^-11 of it, as the tile kernel's F32 dequantization rounds it (rounding
//    d * sc to F16 first moved the wide Q6_K model's logprobs by 1.4e-2 against 1.1e-2).
//
//  - The exact kernel (QgArgs::x_lo set: --precision accurate, kernels.hpp QgLow) rounds no weight:
//    the A operands are integers exact in F16 (Q4_K: sc * q <= 945; Q6_K: v = sc * (q - 32),
//    |v| <= 4096, as f16(v) and the remainder v - f16(v), one fma), each multiplied with the
//    activations' high and low parts (two products, Q6_K three; vl . xl, below 2^-22 of the
//    product, is dropped) into a block accumulator, which the row's d scales in F32 once the
//    block's 16 k-steps are done; Q4_K then subtracts dmin * sum_sb m_sb (sum of x over sb) by
//    one more product of the mins with the block sums to_f16 wrote (F16 high and low parts).
//    Both parts are staged (an activation task a thread for each), so a block takes at most 32
//    rows; 128-168 registers (Q4_K's 2-tile blocks two to an SM). to_f16 writes the sums as
//    means (2^-5 times), so that they overflow F16 only where an activation does.
//
// The K order is permuted so that each lane's quants land in its fragment slots: in k-step s
// (0..15) of a block, A slot j (the pair of columns 2j, 2j + 1 of the step) holds pair s of the
// first group of lane j (j < 4) or the second group of lane j - 4 (j >= 4), that is columns
// 32 G(j) + 2s, + 1 with G the codec's group order (Q4_K: sub-block 2j or 2(j - 4) + 1). The
// activations are written to shared memory in the same order (16-byte stores of four pairs: the
// wgmma core-matrix layout, or rows for the exact kernel's ldmatrix B fragments), so the
// permutation costs nothing in the products. The
// next block's activations arrive meanwhile by cp.async in column order in a staging area, and
// each thread permutes the pieces it copied at the start of the block (against loads into
// registers a block ahead: 0.979-0.994 of the default step at 4-64 rows, 18-26 fewer
// registers; H100, docs/benchmarks.md).
// Split-K partials are added in split order by qgemm_reduce_kernel.
//
// Sources: GGUF Q4_K and Q6_K block layouts (ggml-quants.c block_q4_K: d, dmin, 12 bytes of
// 6-bit scales and mins, 128 bytes of nibbles, element 64c + i of a block in the low nibble of
// quant byte 32c + i, element 64c + 32 + i in its high nibble; block_q6_K and
// dequantize_row_q6_K: ql[128], qh[64], int8 scales[16], d, elements 128n + 32k + l from ql
// byte 64n + 32(k % 2) + l (low nibble for k < 2) and qh byte 32n + l bits 2k, 2k + 1, scale
// 8n + 2k + l / 16); PTX ISA 8.x "mma" (m16n8k16 fragment layouts), "ldmatrix", "prmt",
// "fma.f16x2"; IEEE 754 binary16 (an integer q < 1024 OR-ed into the mantissa of 1024.0 is
// 1024 + q exactly, the bit trick int4-to-F16 converters use; integers up to 2048 are exact);
// the high/low operand split for F32 accuracy on F16 tensor cores as in Ootomo and Yokota
// (2022), "Recovering single precision accuracy from Tensor Cores while surpassing the FP32
// theoretical peak performance".
#include <algorithm>

#include "engine/backends/gpu/k_qgemm.cuh"
#include "engine/backends/gpu/k_wgmma.cuh"

namespace loom::gpu::qg {

#if !defined(LOOM_GPU_HIP)

namespace {

constexpr int kQ4K = 256;         // columns a tile: one Q4_K or Q6_K block
constexpr int kQ4Ld = kQ4K + 8;   // activation row stride in halves (528 bytes: the eight rows an
                                  // ldmatrix phase reads fall in distinct banks)
constexpr int kStLd = kQ4K + 32;  // staging row stride in halves (576 bytes: the two rows a
                                  // quarter warp's 16-byte loads read fall in distinct banks)
// K steps a wgmma commit group, and groups left in flight while the next is decoded. Four steps
// a group: 64 / 128-row steps 0.95 / 0.94 of one step a group (two steps 0.95 / 0.95; one step
// with three groups in flight 1.01 / 1.02; H100, 8B Q4_K_M, docs/benchmarks.md).
constexpr int kWgSteps = 4, kWgInFlight = 1;
constexpr uint32_t kLo = 0x64006400u;  // (1024, 1024)
constexpr uint32_t kHi = 0x54005400u;  // (64, 64)

// Per-half F16x2 arithmetic, a - b (Op '-') or a * b (Op '*'), rounded to nearest even (.rn also
// keeps nvcc from contracting); the emulator rounds each half's float result to F16.
template <char Op>
LOOM_DEV uint32_t h2_op(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    uint32_t d;
    if constexpr (Op == '-') asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    else asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
#else
    auto one = [&](int sh) {
        const float x = h2f(static_cast<uint16_t>(a >> sh)), y = h2f(static_cast<uint16_t>(b >> sh));
        return static_cast<uint32_t>(f2h(Op == '-' ? x - y : x * y));
    };
    return one(0) | (one(16) << 16);
#endif
}
LOOM_DEV uint32_t h2_sub(uint32_t a, uint32_t b) { return h2_op<'-'>(a, b); }
LOOM_DEV uint32_t h2_mul(uint32_t a, uint32_t b) { return h2_op<'*'>(a, b); }

// a * b + c per half with one rounding.
LOOM_DEV uint32_t h2_fma(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    auto one = [](uint16_t x, uint16_t y, uint16_t z) { return f2h(fmaf(h2f(x), h2f(y), h2f(z))); };
    return one(static_cast<uint16_t>(a), static_cast<uint16_t>(b), static_cast<uint16_t>(c)) |
           (static_cast<uint32_t>(
                one(static_cast<uint16_t>(a >> 16), static_cast<uint16_t>(b >> 16), static_cast<uint16_t>(c >> 16)))
            << 16);
#endif
}

// Bytes a and b of w (0..3) as the low bytes of the two halves of a word, zeros above.
LOOM_DEV uint32_t spread(uint32_t w, uint32_t sel) { return __byte_perm(w, 0u, sel); }

/// Lane t's F16x2 operands of one row and block: scale and negated min of sub-block 2t (lo_*)
/// and 2t + 1 (hi_*), each broadcast to both halves.
struct Q4Scales {
    uint32_t lo_s, lo_m, hi_s, hi_m;
};

// The 6-bit scales and mins of sub-blocks 2t and 2t + 1 of the block whose header is h, as F16
// pairs (sc0, sc1) and (m0, m1): small integers, exact.
LOOM_DEV void q4_sc_mn(const uint4& h, int t, uint32_t& s2, uint32_t& m2) {
    // Sub-blocks 2t, 2t + 1 use bytes 2(t & 1), 2(t & 1) + 1 of the scale words (get_scale_min_k4).
    const int sh = 16 * (t & 1);
    const uint32_t ys = h.y >> sh, zs = h.z >> sh, ws = h.w >> sh;
    uint32_t sc, mn;  // bytes 0, 1: the 6-bit scales (mins) of the two sub-blocks
    if (t < 2) {
        sc = ys & 0x3F3Fu;
        mn = zs & 0x3F3Fu;
    } else {
        sc = (ws & 0x0F0Fu) | ((ys >> 2) & 0x3030u);
        mn = ((ws >> 4) & 0x0F0Fu) | ((zs >> 2) & 0x3030u);
    }
    s2 = h2_sub(spread(sc, 0x4140u) | kLo, kLo);
    m2 = h2_sub(spread(mn, 0x4140u) | kLo, kLo);
}

LOOM_DEV Q4Scales q4_scales(const uint4& h, int t) {
    uint32_t s2, m2;
    q4_sc_mn(h, t, s2, m2);
    const uint32_t ds = h2_mul(s2, __byte_perm(h.x, 0u, 0x1010u));                // times (d, d)
    const uint32_t dm = h2_mul(m2, __byte_perm(h.x, 0u, 0x3232u)) ^ 0x80008000u;  // -(dmin m)
    return Q4Scales{__byte_perm(ds, 0u, 0x1010u), __byte_perm(dm, 0u, 0x1010u), __byte_perm(ds, 0u, 0x3232u),
                    __byte_perm(dm, 0u, 0x3232u)};
}

// Quant word w (bytes 32t + 4(s / 2)..) of a row in k-step s: the step's nibble pairs as F16
// pairs, nl of sub-block 2t (slot t), nh of sub-block 2t + 1 (slot t + 4).
LOOM_DEV void q4_nibbles(uint32_t w, int s, uint32_t& nl, uint32_t& nh) {
    const uint32_t x = spread(w, (s & 1) ? 0x4342u : 0x4140u);
    nl = h2_sub((x & 0x000F000Fu) | kLo, kLo);
    nh = h2_sub((x & 0x00F000F0u) | kHi, kHi);
}

LOOM_DEV uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/// The Q4_K codec of the fragment kernel.
struct Q4Frag {
    static constexpr int kBlockBytes = 144;
    // Two blocks an SM at every row count: at most 128 registers a thread (nvcc 13.0: 4 bytes
    // spilled in 64-row blocks, from 49 rows; none in smaller ones), against 158 registers and
    // one block (H100, 8B Q4_K_M, mma.sync: 64-row steps 0.975 of that; docs/benchmarks.md).
    static constexpr bool kTwoBlocks = true;
    /// One weight row's share of a block for lane t: the block header and quant bytes 32t..32t+31.
    struct Raw {
        uint4 h, q0, q1;
    };
    using Scales = Q4Scales;
    /// The exact kernel's operands of one row and block for lane t: its sub-blocks' scales
    /// (sc0 and sc1 broadcast, F16 integers), their mins (m0, m1) and the block's d and dmin.
    struct Exact {
        uint32_t s_lo, s_hi, mins;
        float d, dmin;
    };
    static constexpr bool kMins = true;       // the exact kernel subtracts dmin * m * sum x
    static constexpr bool kLowParts = false;  // sc * q <= 945 is exact in F16
    /// 32-column group of the block whose step pairs fill slot j (0..7): sub-block 2j, 2(j - 4) + 1.
    static constexpr LOOM_HD int group(int j) { return j < 4 ? 2 * j : 2 * (j - 4) + 1; }
    static LOOM_DEV void load(const uint8_t* blk, int t, Raw& r) {
        r.h = ld16(blk);
        r.q0 = ld16(blk + 16 + 32 * t);
        r.q1 = ld16(blk + 32 + 32 * t);
    }
    static LOOM_DEV void zero(Raw& r) { r.h = r.q0 = r.q1 = uint4{0u, 0u, 0u, 0u}; }  // d = dmin = 0
    static LOOM_DEV Scales scales(const Raw& r, int t) { return q4_scales(r.h, t); }
    /// Step s's A pairs of the row: slot t (lo) and slot t + 4 (hi).
    static LOOM_DEV void pairs(const Raw& r, const Scales& k, int s, uint32_t& lo, uint32_t& hi) {
        const int wi = s >> 1;
        uint32_t nl, nh;
        q4_nibbles(wi < 4 ? word(r.q0, wi) : word(r.q1, wi - 4), s, nl, nh);
        lo = h2_fma(nl, k.lo_s, k.lo_m);
        hi = h2_fma(nh, k.hi_s, k.hi_m);
    }
    static LOOM_DEV Exact exact(const Raw& r, int t) {
        uint32_t s2, m2;
        q4_sc_mn(r.h, t, s2, m2);
        return Exact{__byte_perm(s2, 0u, 0x1010u), __byte_perm(s2, 0u, 0x3232u), m2,
                     h2f(static_cast<uint16_t>(r.h.x & 0xFFFFu)), h2f(static_cast<uint16_t>(r.h.x >> 16))};
    }
    /// Step s's exact A pairs sc * q of the row (slot t: lo, slot t + 4: hi); no low parts.
    static LOOM_DEV void exact_pairs(const Raw& r, const Exact& k, int s, uint32_t& lo, uint32_t& hi, uint32_t& lo_l,
                                     uint32_t& hi_l) {
        const int wi = s >> 1;
        uint32_t nl, nh;
        q4_nibbles(wi < 4 ? word(r.q0, wi) : word(r.q1, wi - 4), s, nl, nh);
        lo = h2_mul(nl, k.s_lo);
        hi = h2_mul(nh, k.s_hi);
        lo_l = hi_l = 0u;
    }
};

/// The Q6_K codec of the fragment kernel (224-byte device blocks: ql[128], qh[64], scales[16],
/// d, padding).
struct Q6Frag {
    static constexpr int kBlockBytes = 224;
    // One block an SM at every row count: in 128 registers (two blocks) its two register sets of
    // 19 words a row spilled 96-136 bytes a thread; in one block, 206 registers and none. (With
    // the cp.async staging, two blocks spilled 108-200 bytes and made 64-row steps 1.04 times
    // longer on an H100, ffn_down 2.80 against 2.45 ms.)
    static constexpr bool kTwoBlocks = false;
    /// Lane t's share of a row's block (n = t / 2, o = t % 2): ql bytes 64n + 32o.. (l0, l1),
    /// qh bytes 32n.. (h0, h1), int8 scales 8n..8n + 7 and d.
    struct Raw {
        uint4 l0, l1, h0, h1;
        uint2 sc;
        uint32_t d;
    };
    /// F16x2 high parts f16(d * sc) of the scales of the first group (f0: pairs 0-7, f1:
    /// 8-15) and the second (s0, s1), each in both halves; their low parts f16(d * sc - high)
    /// (lf0, lf1, ls0, ls1); the right shifts that bring the groups' qh bits to bits 0-1 of
    /// each byte.
    struct Scales {
        uint32_t f0, f1, s0, s1;
        uint32_t lf0, lf1, ls0, ls1;
        int shf, shs;
    };
    /// Slot j's group: 32-column index 4(j / 2) + j % 2 (first groups of lanes 0-3) or that + 2.
    static constexpr LOOM_HD int group(int j) {
        return j < 4 ? 4 * (j >> 1) + (j & 1) : 4 * ((j - 4) >> 1) + ((j - 4) & 1) + 2;
    }
    static LOOM_DEV void load(const uint8_t* blk, int t, Raw& r) {
        const int n = t >> 1, o = t & 1;
        r.l0 = ld16(blk + 64 * n + 32 * o);
        r.l1 = ld16(blk + 64 * n + 32 * o + 16);
        r.h0 = ld16(blk + 128 + 32 * n);
        r.h1 = ld16(blk + 144 + 32 * n);
        r.sc = *reinterpret_cast<const uint2*>(blk + 192 + 8 * n);
        r.d = *reinterpret_cast<const uint16_t*>(blk + 208);
    }
    static LOOM_DEV void zero(Raw& r) {  // d = 0: the row decodes to zeros
        r.l0 = r.l1 = r.h0 = r.h1 = uint4{0u, 0u, 0u, 0u};
        r.sc = uint2{0u, 0u};
        r.d = 0u;
    }
    static LOOM_DEV Scales scales(const Raw& r, int t) {
        const int o = t & 1;
        const float d = h2f(static_cast<uint16_t>(r.d));
        // Scale bytes 2o + i (first group, pairs 8i..) and 2o + 4 + i (second) of sc[8n..]:
        // d * sc (F16 times int8, exact in F32) as high and low F16 parts.
        Scales k;
        auto sc = [&](uint32_t w, int i, uint32_t& hi, uint32_t& lo) {
            const float v = d * static_cast<float>(static_cast<int8_t>(byte_of(w, 2 * o + i)));
            const float h = h2f(f2h(v));
            hi = pack2(h, h);
            lo = pack2(v - h, v - h);
        };
        sc(r.sc.x, 0, k.f0, k.lf0);
        sc(r.sc.x, 1, k.f1, k.lf1);
        sc(r.sc.y, 0, k.s0, k.ls0);
        sc(r.sc.y, 1, k.s1, k.ls1);
        k.shf = 2 * o;
        k.shs = 2 * o + 4;
        return k;
    }
    /// Step s's quant pairs q - 32 (F16, exact) of the first group (nf) and the second (ns),
    /// with shf, shs the groups' qh shifts.
    static LOOM_DEV void quants(const Raw& r, int shf, int shs, int s, uint32_t& nf, uint32_t& ns) {
        constexpr uint32_t kLo32 = 0x64206420u;  // (1056, 1056) = 1024 + 32
        const int wi = s >> 1;
        const uint32_t sel = (s & 1) ? 0x4342u : 0x4140u;
        const uint32_t x = spread(wi < 4 ? word(r.l0, wi) : word(r.l1, wi - 4), sel);
        const uint32_t xh = spread(wi < 4 ? word(r.h0, wi) : word(r.h1, wi - 4), sel);
        const uint32_t qf = (x & 0x000F000Fu) | (((xh >> shf) & 0x00030003u) << 4);
        const uint32_t qs = ((x >> 4) & 0x000F000Fu) | (((xh >> shs) & 0x00030003u) << 4);
        nf = h2_sub(qf | kLo, kLo32);
        ns = h2_sub(qs | kLo, kLo32);
    }
    static LOOM_DEV void pairs(const Raw& r, const Scales& k, int s, uint32_t& lo, uint32_t& hi) {
        uint32_t nf, ns;
        quants(r, k.shf, k.shs, s, nf, ns);
        lo = h2_fma(nf, s < 8 ? k.f0 : k.f1, h2_mul(nf, s < 8 ? k.lf0 : k.lf1));
        hi = h2_fma(ns, s < 8 ? k.s0 : k.s1, h2_mul(ns, s < 8 ? k.ls0 : k.ls1));
    }

    /// The exact kernel's operands of one row and block for lane t: the int8 scales of the
    /// first group (f0: pairs 0-7, f1: 8-15) and the second (s0, s1) as F16 pairs (exact), the
    /// qh shifts and the block's d.
    struct Exact {
        uint32_t f0, f1, s0, s1;
        int shf, shs;
        float d;
    };
    static constexpr bool kMins = false;
    static constexpr bool kLowParts = true;  // |sc (q - 32)| <= 4096: above 2048 F16 rounds it
    static LOOM_DEV Exact exact(const Raw& r, int t) {
        const int o = t & 1;
        auto sc = [&](uint32_t w, int i) {
            const auto v = static_cast<float>(static_cast<int8_t>(byte_of(w, 2 * o + i)));
            return pack2(v, v);
        };
        return Exact{sc(r.sc.x, 0),
                     sc(r.sc.x, 1),
                     sc(r.sc.y, 0),
                     sc(r.sc.y, 1),
                     2 * o,
                     2 * o + 4,
                     h2f(static_cast<uint16_t>(r.d))};
    }
    /// Step s's A pairs v = sc * (q - 32) as F16 high parts (lo: slot t, hi: slot t + 4) and
    /// their exact remainders v - f16(v) (-1, 0 or 1; lo_l, hi_l): one fma each, exact.
    static LOOM_DEV void exact_pairs(const Raw& r, const Exact& k, int s, uint32_t& lo, uint32_t& hi, uint32_t& lo_l,
                                     uint32_t& hi_l) {
        uint32_t nf, ns;
        quants(r, k.shf, k.shs, s, nf, ns);
        const uint32_t cf = s < 8 ? k.f0 : k.f1, cs = s < 8 ? k.s0 : k.s1;
        lo = h2_mul(nf, cf);
        hi = h2_mul(ns, cs);
        lo_l = h2_fma(nf, cf, lo ^ 0x80008000u);
        hi_l = h2_fma(ns, cs, hi ^ 0x80008000u);
    }
};

// Block (blockIdx.x: activation rows MT x.., blockIdx.y: weight rows 128 y.., blockIdx.z: K
// split) of y = x . w^T for the codec F, NT 8-row activation tiles. X (the exact kernel, split
// products): the A operands are F::exact_pairs' integers, multiplied with the activations' high
// and low parts (a.x16, a.x_lo) into a block accumulator that the row's d scales in F32 after
// the block; Q4_K subtracts dmin * sum m x through one more product with the block sums.
// Two blocks an SM where F allows (Q4_K); for the exact kernel only at 2 tiles, where Q4_K fits
// 128 registers unspilled (4-16 row split steps 0.91-0.93 of one block on an H100).
template <class F, int NT, bool X>
__global__ void __launch_bounds__(kQgThreads, (X ? NT <= 2 && F::kTwoBlocks : F::kTwoBlocks) ? 2 : 1)
    qgemm_frag_kernel(const LOOM_GRID_CONST QgArgs a) {
    constexpr int MT = 8 * NT;
    constexpr int kParts = X ? 2 : 1;  // activation parts staged: high (and low)
    static_assert(MT * 4 * kParts <= kQgThreads && NT % 2 == 0, "one activation task a thread");
    // Products on wgmma from 4 tiles up; the exact kernel and 2-tile blocks on mma.sync (8-16
    // row steps 1.01-1.02 times longer on wgmma; H100, docs/benchmarks.md).
    constexpr bool WG = !X && NT >= 4;
    // [kParts][MT][kQ4Ld]: one block of activations (each part), F16, permuted K order; then
    // [kParts][MT][kStLd]: the next block's, as cp.async copies them (column order).
    LOOM_DYN_SMEM(uint16_t, sx);
    uint16_t* stage = sx + kParts * MT * kQ4Ld;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid & 31, t = lane & 3;
    const int m0 = static_cast<int>(blockIdx.x) * MT, n0 = static_cast<int>(blockIdx.y) * kQgN + warp * 16;
    const int N = static_cast<int>(a.w.rows), tiles = static_cast<int>(a.w.cols) / kQ4K;
    const int t0 = static_cast<int>(blockIdx.z) * tiles / static_cast<int>(gridDim.z);
    const int t1 = (static_cast<int>(blockIdx.z) + 1) * tiles / static_cast<int>(gridDim.z);
    const int rw[2] = {n0 + (lane >> 2), n0 + (lane >> 2) + 8};

    // Activation task: row xm of the tile, steps 4 xq..4 xq + 3 (halves 8 xq.. of each
    // sub-block), of part xpart (X: 0 high, 1 low). The task's thread copies those halves of
    // the next block into its staging row with cp.async (no registers held while the copies
    // fly; loads into registers a tile ahead stalled on a register move: docs/benchmarks.md),
    // and reads back only what it copied itself, so its own wait suffices.
    const bool xtask = tid < MT * 4 * kParts;
    const int xq = tid & 3, xpart = X ? (tid >> 2) & 1 : 0, xm = tid >> (X ? 3 : 2);
    // (The low part's rows start 64 bytes further, so that the two parts of a row, which one
    // quarter warp reads, fall in distinct banks.)
    uint16_t* xstage = stage + (xpart * MT + xm) * kStLd + 32 * xpart + 8 * xq;

    using Raw = typename F::Raw;
    auto load_w = [&](int it, Raw(&r)[2]) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            if (rw[i] < N)
                F::load(a.w.data + static_cast<size_t>(rw[i]) * a.w.row_bytes + F::kBlockBytes * it, t, r[i]);
            else F::zero(r[i]);
        }
    };
    auto load_x = [&](int it) {
        if (!xtask) return;
        const bool in = m0 + xm < a.M;
        const uint16_t* p =
            (xpart ? a.x_lo : a.x16) + (in ? static_cast<int64_t>(m0 + xm) * a.ldx + kQ4K * it + 8 * xq : 0);
#pragma unroll
        for (int sb = 0; sb < 8; ++sb) cp_async16(xstage + 32 * sb, p + (in ? 32 * sb : 0), in);
        cp_async_commit();
    };
    auto store_x = [&]() {
        if (!xtask) return;
        cp_async_wait<0>();
        uint4 xr[8];  // sub-block sb's halves 8 xq..8 xq + 7: its pairs 4 xq..4 xq + 3
#pragma unroll
        for (int sb = 0; sb < 8; ++sb) xr[sb] = ld16(xstage + 32 * sb);
        uint16_t* row = sx + (xpart * MT + xm) * kQ4Ld;
#pragma unroll
        for (int u = 0; u < 4; ++u) {  // step s = 4 xq + u: slot j from group F::group(j)
            const int s = 4 * xq + u;
            // Slots 0-3 (columns 16s..16s + 7 of the permuted order) and 4-7: row-major for
            // ldmatrix, or two core matrices for wgmma.
            uint16_t* p0 = WG ? sx + WgLayout<MT>::at(xm, 16 * s) : row + 16 * s;
            uint16_t* p1 = WG ? p0 + WgLayout<MT>::kChunk : p0 + 8;
            st_shared16(p0, uint4{word(xr[F::group(0)], u), word(xr[F::group(1)], u), word(xr[F::group(2)], u),
                                  word(xr[F::group(3)], u)});
            st_shared16(p1, uint4{word(xr[F::group(4)], u), word(xr[F::group(5)], u), word(xr[F::group(6)], u),
                                  word(xr[F::group(7)], u)});
        }
        if constexpr (WG) fence_proxy_async();  // the stores, before the barrier, for wgmma
    };

    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    // wgmma: the warpgroup's 64 weight rows against all MT activation rows a K step, issued
    // asynchronously in groups of kWgSteps steps; the next group's A fragments are decoded while
    // kWgInFlight groups run. The tile's last group is waited for before the closing barrier.
    auto fence_acc = [&]() {  // acc is read or written only after the waits before this
#if defined(__CUDA_ARCH__)
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[i][e])::"memory");
#endif
    };
    auto compute = [&](const Raw(&r)[2]) {
        const typename F::Scales k0 = F::scales(r[0], t), k1 = F::scales(r[1], t);
        if constexpr (!WG) {
#pragma unroll
            for (int s = 0; s < 16; ++s) {
                uint32_t af[4];  // rows g, g + 8; slots t (af[0], af[1]) and t + 4 (af[2], af[3])
                F::pairs(r[0], k0, s, af[0], af[2]);
                F::pairs(r[1], k1, s, af[1], af[3]);
#pragma unroll
                for (int n2 = 0; n2 < NT / 2; ++n2) {
                    uint32_t bf[4];
                    frag_b2<kQ4Ld>(sx + n2 * 16 * kQ4Ld + 16 * s, bf);
                    mma16816(acc[2 * n2], af, bf[0], bf[1]);
                    mma16816(acc[2 * n2 + 1], af, bf[2], bf[3]);
                }
            }
        } else {
            const uint64_t desc = wg_desc<MT>(sx);
#pragma unroll
            for (int s0 = 0; s0 < 16; s0 += kWgSteps) {
                uint32_t af[kWgSteps][4];  // rows g, g + 8; slots t ([0], [1]) and t + 4 ([2], [3])
#pragma unroll
                for (int u = 0; u < kWgSteps; ++u) {
                    F::pairs(r[0], k0, s0 + u, af[u][0], af[u][2]);
                    F::pairs(r[1], k1, s0 + u, af[u][1], af[u][3]);
                }
                wg_fence();
#pragma unroll
                for (int u = 0; u < kWgSteps; ++u) {
                    const int off = WgLayout<MT>::at(0, 16 * (s0 + u));  // the step's halves
                    wgmma_f16<NT>(acc, af[u], desc + static_cast<uint64_t>(off * 2 >> 4), sx + off);
                }
                wg_commit();
                wg_wait<kWgInFlight>();
            }
        }
    };
    // The exact kernel's block it: sum over the block of v (xh + xl) for the integer weights v
    // (and v's low parts times xh), then acc += d * that (- dmin * sum_sb m (sum of x over sb)).
    auto compute_exact = [&](const Raw(&r)[2], int it) {
        const typename F::Exact e0 = F::exact(r[0], t), e1 = F::exact(r[1], t);
        // Q4_K: the block sums (times 2^-5) as B fragments (row g of n-tile i: words t, the high
        // parts of sub-blocks 2t and 2t + 1, and 4 + t, their low parts), loaded now, used after
        // the block.
        uint32_t bs[NT][2];
#pragma unroll
        for (int i = 0; i < NT; ++i) {
            const int m = m0 + 8 * i + (lane >> 2);
            const bool in = F::kMins && m < a.M;
            const auto* p = reinterpret_cast<const uint32_t*>(a.sums + (in ? m * a.ld_sums + 16 * it : 0));
            bs[i][0] = in ? p[t] : 0u;
            bs[i][1] = in ? p[4 + t] : 0u;
        }
        float blk[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i) blk[i][0] = blk[i][1] = blk[i][2] = blk[i][3] = 0.0f;
#pragma unroll
        for (int s = 0; s < 16; ++s) {
            uint32_t ah[4], al[4];  // the integers' high parts and (Q6_K) low parts, as af above
            F::exact_pairs(r[0], e0, s, ah[0], ah[2], al[0], al[2]);
            F::exact_pairs(r[1], e1, s, ah[1], ah[3], al[1], al[3]);
#pragma unroll
            for (int n2 = 0; n2 < NT / 2; ++n2) {
                uint32_t bh[4], bl[4];
                frag_b2<kQ4Ld>(sx + n2 * 16 * kQ4Ld + 16 * s, bh);
                frag_b2<kQ4Ld>(sx + (MT + n2 * 16) * kQ4Ld + 16 * s, bl);
                mma16816(blk[2 * n2], ah, bh[0], bh[1]);
                mma16816(blk[2 * n2 + 1], ah, bh[2], bh[3]);
                mma16816(blk[2 * n2], ah, bl[0], bl[1]);
                mma16816(blk[2 * n2 + 1], ah, bl[2], bl[3]);
                if constexpr (F::kLowParts) {  // vl . xl is below 2^-22 of the product: dropped
                    mma16816(blk[2 * n2], al, bh[0], bh[1]);
                    mma16816(blk[2 * n2 + 1], al, bh[2], bh[3]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < NT; ++i) {
            acc[i][0] = fmaf(e0.d, blk[i][0], acc[i][0]);
            acc[i][1] = fmaf(e0.d, blk[i][1], acc[i][1]);
            acc[i][2] = fmaf(e1.d, blk[i][2], acc[i][2]);
            acc[i][3] = fmaf(e1.d, blk[i][3], acc[i][3]);
        }
        if constexpr (F::kMins) {
            // A: row g's mins (m_2t, m_2t+1) against the high sums (k 2t, 2t + 1) and again
            // against the low sums (k 8 + 2t, ..); row g + 8's likewise. The sums are means
            // (2^-5 times), so dmin is taken 32 times (exact).
            const uint32_t am[4] = {e0.mins, e1.mins, e0.mins, e1.mins};
            const float dm0 = -32.0f * e0.dmin, dm1 = -32.0f * e1.dmin;
#pragma unroll
            for (int i = 0; i < NT; ++i) {
                float mn[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma16816(mn, am, bs[i][0], bs[i][1]);
                acc[i][0] = fmaf(dm0, mn[0], acc[i][0]);
                acc[i][1] = fmaf(dm0, mn[1], acc[i][1]);
                acc[i][2] = fmaf(dm1, mn[2], acc[i][2]);
                acc[i][3] = fmaf(dm1, mn[3], acc[i][3]);
            }
        }
    };
    // One tile: its activations to shared memory, the next tile's loads in flight, products.
    auto tile = [&](int it, const Raw(&cur)[2], Raw(&nxt)[2]) {
        store_x();
        __syncthreads();
        if (it + 1 < t1) {
            load_w(it + 1, nxt);
            load_x(it + 1);
        }
        if constexpr (X) compute_exact(cur, it);
        else compute(cur);
        if constexpr (WG) {  // the tile's products read sx: done before the next tile stores it
            wg_wait<0>();
            fence_acc();
        }
        __syncthreads();
    };

    Raw ra[2], rb[2];
    if (t0 < t1) {
        load_w(t0, ra);
        load_x(t0);
    }
    for (int it = t0; it < t1; it += 2) {  // two register sets, alternating without copies
        tile(it, ra, rb);
        if (it + 1 < t1) tile(it + 1, rb, ra);
    }
    store_acc<NT>(a, acc, n0, m0, lane);
}

template <class F, int NT, bool X>
void launch_frag(const QgArgs& a, int splits, gpuStream_t s) {
    constexpr int MT = 8 * NT;
    const size_t smem = (static_cast<size_t>(X ? 2 : 1) * MT * (kQ4Ld + kStLd) + (X ? 32 : 0)) * sizeof(uint16_t);
    auto k = qgemm_frag_kernel<F, NT, X>;
    smem_limit_once<qgemm_frag_kernel<F, NT, X>>(smem);
    const dim3 grid(static_cast<unsigned>((a.M + MT - 1) / MT), static_cast<unsigned>((a.w.rows + kQgN - 1) / kQgN),
                    static_cast<unsigned>(splits));
    LOOM_LAUNCH(k, grid, kQgThreads, smem, s, a);
    LOOM_GPU_CHECK_LAUNCH();
}

template <class F>
void frag_nt(const QgArgs& a, int nt, int splits, gpuStream_t s) {
    if (a.x_lo) {  // the exact kernel: at most 32 rows a block (two activation parts)
        if (nt == 2) launch_frag<F, 2, true>(a, splits, s);
        else launch_frag<F, 4, true>(a, splits, s);
    } else if (nt == 2) {
        launch_frag<F, 2, false>(a, splits, s);
    } else if (nt == 4) {
        launch_frag<F, 4, false>(a, splits, s);
    } else if (nt == 6) {
        launch_frag<F, 6, false>(a, splits, s);
    } else {
        launch_frag<F, 8, false>(a, splits, s);
    }
}

}  // namespace

void qgemm_frag(const QgArgs& a, int nt, int splits, gpuStream_t s) {
    if (a.w.type == kQ6_K) frag_nt<Q6Frag>(a, nt, splits, s);
    else frag_nt<Q4Frag>(a, nt, splits, s);
}

#endif  // !LOOM_GPU_HIP

}  // namespace loom::gpu::qg
