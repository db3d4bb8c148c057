// Row dot-product kernels on quantized GGUF blocks for the CPU backend; see matvec.hpp.
//
// dot_row: one fused kernel per type. For each 32 elements it widens the packed bytes
// into small int32 arrays, then one 8-iteration loop turns them into floats and
// multiply-adds them into four 8-lane accumulators. GCC (12, -O3, no -ffast-math)
// vectorizes exactly this shape well: separate 1-D widened arrays, one k-loop,
// accumulators that stay in registers (2-D widened arrays, structs or a decode buffer
// each cost a factor 2-4, measured with tools/bench_matvec.cpp). The IQ1/IQ2/IQ3 types
// are the exception: their grid lookups do not vectorize, so each 256-element block is
// decoded into a buffer by its shared decoder, then multiplied (fused_decoded).
// dot_row_multi: decodes the whole row with model/quant/quant_blocks.hpp's decoders (which
// compute each weight with the same expression as the fused kernel), then multiplies
// the buffer into three vectors at a time, 3 x 32 accumulators in registers, in the
// same lane order (2x faster than one vector at a time with spilled accumulators).
//
// Lane order (both paths): element e of a row goes to accumulator a[(e / 8) % 4][e % 8],
// in increasing e; reduce() then sums the 32 lanes by a fixed tree.
#include "engine/backends/cpu/matvec.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "model/gguf/ggml_types.hpp"
#include "model/quant/quant.hpp"
#include "model/quant/quant_blocks.hpp"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(LOOM_NO_CLONES)
#define LOOM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOM_CLONES
#endif

namespace loom::cpu {
namespace {

namespace qb = model::blocks;
using model::GgmlType;
using qb::q5_high;
using Acc = float[4][8];

// IQ4_NL level kIq4nlValues[i] for a nibble i, computed instead of looked up: GCC does
// not vectorize a 16-entry table lookup (it loads element by element, 4x slower). A
// degree-4 polynomial fitted to the 16 levels is within 0.44 of each (checked for all
// 16 in tests/unit/quants.cpp), so rounding it (adding and subtracting 1.5 * 2^23,
// exact for |p| < 2^22) gives the level exactly in every rounding of the Horner steps.
LOOM_QB_INLINE float iq4_level(int32_t i) {
    const float t = static_cast<float>(i);
    float p = 0.00151926093f;
    p = p * t + 0.0335359834f;
    p = p * t - 1.40159237f;
    p = p * t + 24.2999096f;
    p = p * t - 126.661545f;
    return (p + 12582912.0f) - 12582912.0f;
}

LOOM_QB_INLINE float reduce(const Acc& a) {
    float s[8];
    for (int k = 0; k < 8; ++k) s[k] = (a[0][k] + a[1][k]) + (a[2][k] + a[3][k]);
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// a[g][k] += V<g> * xx[8g + k] for the four groups of 32 consecutive elements, in
// one loop over k (the shape GCC keeps in vector registers). V0..V3 may use k.
#define LOOM_ACC4(V0, V1, V2, V3)                         \
    _Pragma("GCC unroll 1") for (int k = 0; k < 8; ++k) { \
        a[0][k] += (V0)*xx[k];                            \
        a[1][k] += (V1)*xx[8 + k];                        \
        a[2][k] += (V2)*xx[16 + k];                       \
        a[3][k] += (V3)*xx[24 + k];                       \
    }

// Widens bytes p[0..8) and p[8..16) into int32 lanes w0, w1.
#define LOOM_WIDEN2(w0, w1, p)    \
    int32_t w0[8], w1[8];         \
    for (int k = 0; k < 8; ++k) { \
        w0[k] = (p)[k];           \
        w1[k] = (p)[8 + k];       \
    }

// Widens bytes p[0..32) into int32 lanes w0..w3 (8 each).
#define LOOM_WIDEN4(w0, w1, w2, w3, p)  \
    int32_t w0[8], w1[8], w2[8], w3[8]; \
    for (int k = 0; k < 8; ++k) {       \
        w0[k] = (p)[k];                 \
        w1[k] = (p)[8 + k];             \
        w2[k] = (p)[16 + k];            \
        w3[k] = (p)[24 + k];            \
    }

// ---- plain types --------------------------------------------------------------

LOOM_QB_INLINE float fused_f32(const uint8_t* row, const float* x, int64_t n) {
    const auto* w = reinterpret_cast<const float*>(row);
    Acc a = {};
    int64_t e = 0;
    for (; e + 32 <= n; e += 32) {
        const float* ww = w + e;
        const float* xx = x + e;
        LOOM_ACC4(ww[k], ww[8 + k], ww[16 + k], ww[24 + k])
    }
    for (; e < n; ++e) a[(e >> 3) & 3][e & 7] += w[e] * x[e];
    return reduce(a);
}

LOOM_QB_INLINE float f16_at(const uint8_t* p, int64_t i) { return qb::load_f16(p + 2 * i); }
LOOM_QB_INLINE float f16_bits(int32_t h) { return model::fp16_bits_to_fp32(static_cast<uint32_t>(h)); }
LOOM_QB_INLINE float bf16_bits(int32_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

LOOM_QB_INLINE float fused_f16(const uint8_t* row, const float* x, int64_t n) {
    Acc a = {};
    int64_t e = 0;
    for (; e + 32 <= n; e += 32) {
        const uint8_t* p = row + 2 * e;
        const float* xx = x + e;
        const auto* h = reinterpret_cast<const uint16_t*>(p);
        LOOM_WIDEN4(w0, w1, w2, w3, h)
        LOOM_ACC4(f16_bits(w0[k]), f16_bits(w1[k]), f16_bits(w2[k]), f16_bits(w3[k]))
    }
    for (; e < n; ++e) a[(e >> 3) & 3][e & 7] += f16_at(row, e) * x[e];
    return reduce(a);
}

LOOM_QB_INLINE float fused_bf16(const uint8_t* row, const float* x, int64_t n) {
    Acc a = {};
    int64_t e = 0;
    for (; e + 32 <= n; e += 32) {
        const uint8_t* p = row + 2 * e;
        const float* xx = x + e;
        const auto* h = reinterpret_cast<const uint16_t*>(p);
        LOOM_WIDEN4(w0, w1, w2, w3, h)
        LOOM_ACC4(bf16_bits(w0[k]), bf16_bits(w1[k]), bf16_bits(w2[k]), bf16_bits(w3[k]))
    }
    for (; e < n; ++e) {
        uint16_t h;
        std::memcpy(&h, row + 2 * e, 2);
        a[(e >> 3) & 3][e & 7] += bf16_bits(h) * x[e];
    }
    return reduce(a);
}

// ---- 32-element blocks --------------------------------------------------------

LOOM_QB_INLINE float fused_q8_0(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 32, r += 34) {
        const float d = qb::load_f16(r);
        const auto* q = reinterpret_cast<const int8_t*>(r + 2);
        const float* xx = x + e;
        LOOM_WIDEN4(w0, w1, w2, w3, q)
        LOOM_ACC4(d * static_cast<float>(w0[k]), d * static_cast<float>(w1[k]), d * static_cast<float>(w2[k]),
                  d * static_cast<float>(w3[k]))
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q4_0(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 32, r += 18) {
        const float d = qb::load_f16(r);
        const float* xx = x + e;
        LOOM_WIDEN2(w0, w1, r + 2)
        LOOM_ACC4(d * static_cast<float>((w0[k] & 15) - 8), d * static_cast<float>((w1[k] & 15) - 8),
                  d * static_cast<float>((w0[k] >> 4) - 8), d * static_cast<float>((w1[k] >> 4) - 8))
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q4_1(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 32, r += 20) {
        const float d = qb::load_f16(r), m = qb::load_f16(r + 2);
        const float* xx = x + e;
        LOOM_WIDEN2(w0, w1, r + 4)
        LOOM_ACC4(d * static_cast<float>(w0[k] & 15) + m, d * static_cast<float>(w1[k] & 15) + m,
                  d * static_cast<float>(w0[k] >> 4) + m, d * static_cast<float>(w1[k] >> 4) + m)
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q5_0(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 32, r += 22) {
        const float d = qb::load_f16(r);
        uint32_t qh;
        std::memcpy(&qh, r + 2, 4);
        const float* xx = x + e;
        LOOM_WIDEN2(w0, w1, r + 6)
        LOOM_ACC4(d * static_cast<float>(((w0[k] & 15) | q5_high(qh, k)) - 16),
                  d * static_cast<float>(((w1[k] & 15) | q5_high(qh, 8 + k)) - 16),
                  d * static_cast<float>(((w0[k] >> 4) | q5_high(qh, 16 + k)) - 16),
                  d * static_cast<float>(((w1[k] >> 4) | q5_high(qh, 24 + k)) - 16))
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q5_1(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 32, r += 24) {
        const float d = qb::load_f16(r), m = qb::load_f16(r + 2);
        uint32_t qh;
        std::memcpy(&qh, r + 4, 4);
        const float* xx = x + e;
        LOOM_WIDEN2(w0, w1, r + 8)
        LOOM_ACC4(d * static_cast<float>((w0[k] & 15) | q5_high(qh, k)) + m,
                  d * static_cast<float>((w1[k] & 15) | q5_high(qh, 8 + k)) + m,
                  d * static_cast<float>((w0[k] >> 4) | q5_high(qh, 16 + k)) + m,
                  d * static_cast<float>((w1[k] >> 4) | q5_high(qh, 24 + k)) + m)
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_iq4_nl(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 32, r += 18) {
        const float d = qb::load_f16(r);
        const float* xx = x + e;
        LOOM_WIDEN2(w0, w1, r + 2)
        LOOM_ACC4(d * iq4_level(w0[k] & 15), d * iq4_level(w1[k] & 15), d * iq4_level(w0[k] >> 4),
                  d * iq4_level(w1[k] >> 4))
    }
    return reduce(a);
}

// MXFP4: the level looked up (16 entries; gpt-oss's experts are its only users).
LOOM_QB_INLINE float fused_mxfp4(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 32, r += 17) {
        const float d = qb::e8m0_half(r[0]);
        const float* xx = x + e;
        LOOM_WIDEN2(w0, w1, r + 1)
        LOOM_ACC4(
            d * static_cast<float>(qb::kMxfp4Values[w0[k] & 15]), d * static_cast<float>(qb::kMxfp4Values[w1[k] & 15]),
            d * static_cast<float>(qb::kMxfp4Values[w0[k] >> 4]), d * static_cast<float>(qb::kMxfp4Values[w1[k] >> 4]))
    }
    return reduce(a);
}

// ---- 256-element super-blocks, one 32-element part p at a time ----------------

LOOM_QB_INLINE float fused_q2_k(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 256, r += 84) {
        const float d = qb::load_f16(r + 80), dmin = qb::load_f16(r + 82);
        for (int p = 0; p < 8; ++p) {
            const int half = p >> 2, j = p & 3, sh = 2 * j;
            const uint8_t s0 = r[8 * half + 2 * j], s1 = r[8 * half + 2 * j + 1];
            const float d0 = d * static_cast<float>(s0 & 0xF), m0 = dmin * static_cast<float>(s0 >> 4);
            const float d1 = d * static_cast<float>(s1 & 0xF), m1 = dmin * static_cast<float>(s1 >> 4);
            const float* xx = x + e + 32 * p;
            LOOM_WIDEN4(w0, w1, w2, w3, r + 16 + 32 * half)
            LOOM_ACC4(d0 * static_cast<float>((w0[k] >> sh) & 3) - m0, d0 * static_cast<float>((w1[k] >> sh) & 3) - m0,
                      d1 * static_cast<float>((w2[k] >> sh) & 3) - m1, d1 * static_cast<float>((w3[k] >> sh) & 3) - m1)
        }
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q3_k(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 256, r += 110) {
        const float d = qb::load_f16(r + 108);
        float ds[16];  // scales first: the loop below is vector code only
        for (int i = 0; i < 16; ++i) ds[i] = d * static_cast<float>(qb::q3k_scale(r + 96, i));
        for (int p = 0; p < 8; ++p) {
            const int half = p >> 2, j = p & 3, sh = 2 * j, bit = 4 * half + j;
            const float d0 = ds[8 * half + 2 * j];
            const float d1 = ds[8 * half + 2 * j + 1];
            const float* xx = x + e + 32 * p;
            LOOM_WIDEN4(w0, w1, w2, w3, r + 32 + 32 * half)
            LOOM_WIDEN4(h0, h1, h2, h3, r)
#define LOOM_Q3(W, H) static_cast<float>(((W[k] >> sh) & 3) - 4 + (((H[k] >> bit) & 1) << 2))
            LOOM_ACC4(d0 * LOOM_Q3(w0, h0), d0 * LOOM_Q3(w1, h1), d1 * LOOM_Q3(w2, h2), d1 * LOOM_Q3(w3, h3))
#undef LOOM_Q3
        }
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q4_k(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 256, r += 144) {
        const float d = qb::load_f16(r), dmin = qb::load_f16(r + 2);
        // The 8 sub-blocks' scales first (scalar), then vector code only; each pair
        // of sub-blocks shares 32 bytes (low, then high nibbles), widened once.
        float dp[8], mp[8];
        for (int p = 0; p < 8; ++p) {
            int sc, mn;
            qb::k4_scale_min(r + 4, p, sc, mn);
            dp[p] = d * static_cast<float>(sc), mp[p] = dmin * static_cast<float>(mn);
        }
        for (int c = 0; c < 4; ++c) {
            LOOM_WIDEN4(w0, w1, w2, w3, r + 16 + 32 * c) {
                const float* xx = x + e + 64 * c;
                const float d0 = dp[2 * c], m0 = mp[2 * c];
                LOOM_ACC4(d0 * static_cast<float>(w0[k] & 15) - m0, d0 * static_cast<float>(w1[k] & 15) - m0,
                          d0 * static_cast<float>(w2[k] & 15) - m0, d0 * static_cast<float>(w3[k] & 15) - m0)
            }
            {
                const float* xx = x + e + 64 * c + 32;
                const float d1 = dp[2 * c + 1], m1 = mp[2 * c + 1];
                LOOM_ACC4(d1 * static_cast<float>(w0[k] >> 4) - m1, d1 * static_cast<float>(w1[k] >> 4) - m1,
                          d1 * static_cast<float>(w2[k] >> 4) - m1, d1 * static_cast<float>(w3[k] >> 4) - m1)
            }
        }
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q5_k(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 256, r += 176) {
        const float d = qb::load_f16(r), dmin = qb::load_f16(r + 2);
        for (int p = 0; p < 8; ++p) {
            int sc, mn;
            qb::k4_scale_min(r + 4, p, sc, mn);
            const float dp = d * static_cast<float>(sc), mp = dmin * static_cast<float>(mn);
            const int sh = 4 * (p & 1);
            const float* xx = x + e + 32 * p;
            LOOM_WIDEN4(w0, w1, w2, w3, r + 48 + 32 * (p >> 1))
            LOOM_WIDEN4(h0, h1, h2, h3, r + 16)
#define LOOM_Q5(W, H) static_cast<float>(((W[k] >> sh) & 15) | (((H[k] >> p) & 1) << 4))
            LOOM_ACC4(dp * LOOM_Q5(w0, h0) - mp, dp * LOOM_Q5(w1, h1) - mp, dp * LOOM_Q5(w2, h2) - mp,
                      dp * LOOM_Q5(w3, h3) - mp)
#undef LOOM_Q5
        }
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_q6_k(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 256, r += 210) {
        const float d = qb::load_f16(r + 208);
        const auto* sc = reinterpret_cast<const int8_t*>(r + 192);
        for (int p = 0; p < 8; ++p) {
            const int half = p >> 2, kk = p & 3, sh = 4 * (kk >> 1), hs = 2 * kk;
            const float d0 = d * static_cast<float>(sc[8 * half + 2 * kk]);
            const float d1 = d * static_cast<float>(sc[8 * half + 2 * kk + 1]);
            const float* xx = x + e + 32 * p;
            LOOM_WIDEN4(w0, w1, w2, w3, r + 64 * half + 32 * (kk & 1))
            LOOM_WIDEN4(h0, h1, h2, h3, r + 128 + 32 * half)
#define LOOM_Q6(W, H) static_cast<float>((((W[k] >> sh) & 15) | (((H[k] >> hs) & 3) << 4)) - 32)
            LOOM_ACC4(d0 * LOOM_Q6(w0, h0), d0 * LOOM_Q6(w1, h1), d1 * LOOM_Q6(w2, h2), d1 * LOOM_Q6(w3, h3))
#undef LOOM_Q6
        }
    }
    return reduce(a);
}

LOOM_QB_INLINE float fused_iq4_xs(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    for (int64_t e = 0; e < n; e += 256, r += 136) {
        const float d = qb::load_f16(r);
        uint16_t sh;
        std::memcpy(&sh, r + 2, 2);
        float dls[8];  // scales first: the loop below is vector code only
        for (int p = 0; p < 8; ++p) {
            const int ls = ((r[4 + p / 2] >> (4 * (p % 2))) & 0xF) | (((sh >> (2 * p)) & 3) << 4);
            dls[p] = d * static_cast<float>(ls - 32);
        }
        for (int p = 0; p < 8; ++p) {
            const float dl = dls[p];
            const float* xx = x + e + 32 * p;
            LOOM_WIDEN2(w0, w1, r + 8 + 16 * p)
            LOOM_ACC4(dl * iq4_level(w0[k] & 15), dl * iq4_level(w1[k] & 15), dl * iq4_level(w0[k] >> 4),
                      dl * iq4_level(w1[k] >> 4))
        }
    }
    return reduce(a);
}

// ---- IQ1/IQ2/IQ3: decode each block, then multiply ------------------------------
// Their weights come from grid lookups, which GCC does not vectorize; decoding a block into
// a small buffer with the shared decoder and then multiplying it in the lane order keeps the
// multiply-adds in vector code and gives exactly dot_row_multi's weights.

template <class B>
LOOM_QB_INLINE float fused_decoded(const uint8_t* r, const float* x, int64_t n) {
    Acc a = {};
    float w[B::kSize];
    for (int64_t e = 0; e < n; e += B::kSize, r += B::kBytes) {
        B::decode(r, w);
        for (int p = 0; p < B::kSize; p += 32) {
            const float* ww = w + p;
            const float* xx = x + e + p;
            LOOM_ACC4(ww[k], ww[8 + k], ww[16 + k], ww[24 + k])
        }
    }
    return reduce(a);
}

#define LOOM_DECODED(NAME, B) \
    LOOM_QB_INLINE float fused_##NAME(const uint8_t* r, const float* x, int64_t n) { return fused_decoded<B>(r, x, n); }
LOOM_DECODED(iq2_xxs, qb::IQ2_XXS)
LOOM_DECODED(iq2_xs, qb::IQ2_XS)
LOOM_DECODED(iq2_s, qb::IQ2_S)
LOOM_DECODED(iq3_xxs, qb::IQ3_XXS)
LOOM_DECODED(iq3_s, qb::IQ3_S)
LOOM_DECODED(iq1_s, qb::IQ1_S)
LOOM_DECODED(iq1_m, qb::IQ1_M)
#undef LOOM_DECODED

// ---- dot_row_multi: decode the row once, then vectors three at a time ------------
//
// The row is decoded into a float buffer (F32 rows are used in place), then a
// register-blocked kernel multiplies it into three vectors at once: 3 x 32 lane
// accumulators in twelve 8-float vector registers, fed by four weight loads per 32
// elements. Each vector's lanes get exactly the fused kernels' sequence of updates
// a[(e / 8) % 4][e % 8] += w[e] * x[e] (GCC contracts both into the same FMAs on
// x86-64-v3 and into separate mul + add on the baseline), so results are bit-identical
// to dot_row.

struct F32 {
    static constexpr int kSize = 1;
};
struct F16 {
    static constexpr int kSize = 1;
};
struct BF16 {
    static constexpr int kSize = 1;
};

// 8 floats in one AVX register on x86-64-v3 (two SSE ones on the baseline). Only used
// inside always-inlined functions, so -Wpsabi's note about passing it by value in
// the baseline clone concerns no real call.
#pragma GCC diagnostic ignored "-Wpsabi"
using V8 = float __attribute__((vector_size(32)));

LOOM_QB_INLINE V8 load8(const float* p) {
    V8 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The n elements of a row of B as floats: the row itself for F32, else `buf` filled.
template <class B>
LOOM_QB_INLINE const float* decode_row(const uint8_t* row, int64_t n, std::vector<float>& buf) {
    if constexpr (std::is_same_v<B, F32>) {
        (void)n, (void)buf;
        return reinterpret_cast<const float*>(row);
    } else {
        if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
        float* t = buf.data();
        if constexpr (std::is_same_v<B, F16>) {
            for (int64_t i = 0; i < n; ++i) t[i] = f16_at(row, i);
        } else if constexpr (std::is_same_v<B, BF16>) {
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, row + 2 * i, 2);
                t[i] = bf16_bits(h);
            }
        } else {
            const uint8_t* p = row;
            for (int64_t o = 0; o < n; o += B::kSize, p += B::kBytes) B::decode(p, t + o);
        }
        return t;
    }
}

// out[j * out_stride] = w . xs[j * x_stride ..] for j < V, in the lane order above.
template <int V>
LOOM_QB_INLINE void multi_block(const float* w, int64_t n, const float* xs, int64_t x_stride, float* out,
                                int64_t out_stride) {
    V8 a[V][4];
    for (int j = 0; j < V; ++j)
        for (int g = 0; g < 4; ++g) a[j][g] = V8{};
    int64_t e = 0;
    for (; e + 32 <= n; e += 32) {
        const V8 w0 = load8(w + e), w1 = load8(w + e + 8), w2 = load8(w + e + 16), w3 = load8(w + e + 24);
        for (int j = 0; j < V; ++j) {
            const float* x = xs + j * x_stride + e;
            a[j][0] += w0 * load8(x);
            a[j][1] += w1 * load8(x + 8);
            a[j][2] += w2 * load8(x + 16);
            a[j][3] += w3 * load8(x + 24);
        }
    }
    for (int j = 0; j < V; ++j) {
        Acc acc;
        std::memcpy(acc, a[j], sizeof acc);
        const float* x = xs + j * x_stride;
        for (int64_t i = e; i < n; ++i) acc[(i >> 3) & 3][i & 7] += w[i] * x[i];  // e % 32 == 0: same lanes
        out[j * out_stride] = reduce(acc);
    }
}

template <class B>
LOOM_QB_INLINE void multi_impl(const uint8_t* row, int64_t n, const float* xs, int64_t x_stride, int64_t n_vec,
                               float* out, int64_t out_stride) {
    thread_local std::vector<float> buf;
    const float* w = decode_row<B>(row, n, buf);
    int64_t v = 0;
    for (; v + 3 <= n_vec; v += 3) multi_block<3>(w, n, xs + v * x_stride, x_stride, out + v * out_stride, out_stride);
    if (n_vec - v == 2) multi_block<2>(w, n, xs + v * x_stride, x_stride, out + v * out_stride, out_stride);
    else if (n_vec - v == 1) multi_block<1>(w, n, xs + v * x_stride, x_stride, out + v * out_stride, out_stride);
}

using DotFn = float (*)(const uint8_t*, const float*, int64_t);
using MultiFn = void (*)(const uint8_t*, int64_t, const float*, int64_t, int64_t, float*, int64_t);

#define LOOM_KERNELS(NAME, B)                                                                                       \
    LOOM_CLONES float dot_##NAME(const uint8_t* row, const float* x, int64_t n) { return fused_##NAME(row, x, n); } \
    LOOM_CLONES void multi_##NAME(const uint8_t* row, int64_t n, const float* xs, int64_t x_stride, int64_t n_vec,  \
                                  float* out, int64_t out_stride) {                                                 \
        multi_impl<B>(row, n, xs, x_stride, n_vec, out, out_stride);                                                \
    }

LOOM_KERNELS(f32, F32)
LOOM_KERNELS(f16, F16)
LOOM_KERNELS(bf16, BF16)
LOOM_KERNELS(q8_0, qb::Q8_0)
LOOM_KERNELS(q4_0, qb::Q4_0)
LOOM_KERNELS(q4_1, qb::Q4_1)
LOOM_KERNELS(q5_0, qb::Q5_0)
LOOM_KERNELS(q5_1, qb::Q5_1)
LOOM_KERNELS(q2_k, qb::Q2_K)
LOOM_KERNELS(q3_k, qb::Q3_K)
LOOM_KERNELS(q4_k, qb::Q4_K)
LOOM_KERNELS(q5_k, qb::Q5_K)
LOOM_KERNELS(q6_k, qb::Q6_K)
LOOM_KERNELS(iq4_nl, qb::IQ4_NL)
LOOM_KERNELS(mxfp4, qb::MXFP4)
LOOM_KERNELS(iq4_xs, qb::IQ4_XS)
LOOM_KERNELS(iq2_xxs, qb::IQ2_XXS)
LOOM_KERNELS(iq2_xs, qb::IQ2_XS)
LOOM_KERNELS(iq2_s, qb::IQ2_S)
LOOM_KERNELS(iq3_xxs, qb::IQ3_XXS)
LOOM_KERNELS(iq3_s, qb::IQ3_S)
LOOM_KERNELS(iq1_s, qb::IQ1_S)
LOOM_KERNELS(iq1_m, qb::IQ1_M)
#undef LOOM_KERNELS

struct Kernels {
    DotFn dot = nullptr;
    MultiFn multi = nullptr;
    int64_t block = 1;  // elements per block
};

Kernels kernels(uint32_t type) {
    switch (static_cast<GgmlType>(type)) {
#define LOOM_CASE(T, NAME, B) \
    case GgmlType::T: return {dot_##NAME, multi_##NAME, B::kSize};
        LOOM_CASE(F32, f32, F32)
        LOOM_CASE(F16, f16, F16)
        LOOM_CASE(BF16, bf16, BF16)
        LOOM_CASE(Q8_0, q8_0, qb::Q8_0)
        LOOM_CASE(Q4_0, q4_0, qb::Q4_0)
        LOOM_CASE(Q4_1, q4_1, qb::Q4_1)
        LOOM_CASE(Q5_0, q5_0, qb::Q5_0)
        LOOM_CASE(Q5_1, q5_1, qb::Q5_1)
        LOOM_CASE(Q2_K, q2_k, qb::Q2_K)
        LOOM_CASE(Q3_K, q3_k, qb::Q3_K)
        LOOM_CASE(Q4_K, q4_k, qb::Q4_K)
        LOOM_CASE(Q5_K, q5_k, qb::Q5_K)
        LOOM_CASE(Q6_K, q6_k, qb::Q6_K)
        LOOM_CASE(IQ4_NL, iq4_nl, qb::IQ4_NL)
        LOOM_CASE(MXFP4, mxfp4, qb::MXFP4)
        LOOM_CASE(IQ4_XS, iq4_xs, qb::IQ4_XS)
        LOOM_CASE(IQ2_XXS, iq2_xxs, qb::IQ2_XXS)
        LOOM_CASE(IQ2_XS, iq2_xs, qb::IQ2_XS)
        LOOM_CASE(IQ2_S, iq2_s, qb::IQ2_S)
        LOOM_CASE(IQ3_XXS, iq3_xxs, qb::IQ3_XXS)
        LOOM_CASE(IQ3_S, iq3_s, qb::IQ3_S)
        LOOM_CASE(IQ1_S, iq1_s, qb::IQ1_S)
        LOOM_CASE(IQ1_M, iq1_m, qb::IQ1_M)
#undef LOOM_CASE
        default: return {};
    }
}

// The kernels for `type`, after checking that n is a whole number of its blocks.
Kernels checked(uint32_t type, int64_t n) {
    const Kernels k = kernels(type);
    if (!k.dot) throw std::invalid_argument("no dot kernel for weight type " + model::type_name(type));
    if (n < 0 || n % k.block != 0)
        throw std::invalid_argument("row of " + std::to_string(n) + " elements is not a whole number of " +
                                    model::type_name(type) + " blocks");
    return k;
}

}  // namespace

bool can_dot(uint32_t type) { return kernels(type).dot != nullptr; }

float dot_row(uint32_t type, const uint8_t* row, const float* x, int64_t n) { return checked(type, n).dot(row, x, n); }

void dot_row_multi(uint32_t type, const uint8_t* row, int64_t n, const float* xs, int64_t x_stride, int64_t n_vec,
                   float* out, int64_t out_stride) {
    const Kernels k = checked(type, n);
    if (n_vec == 1) *out = k.dot(row, xs, n);  // the fused kernel: faster, and bit-identical
    else k.multi(row, n, xs, x_stride, n_vec, out, out_stride);
}

}  // namespace loom::cpu
