// Block decoders of the low-bit IQ types: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.
//
// Source: the block structs of ggml-common.h (block_iq2_xxs ... block_iq1_m) as stored in GGUF
// files, their reading learned from ggml's dequantize_row_iq* (ggml/src/ggml-quants.c); the
// code is loom's own. Every block holds 256 weights in 8 sub-blocks of 32; multi-byte fields
// are little-endian, "d" is an IEEE half. Weights come in groups of 8 that name one grid entry
// (two for the 4-wide IQ3 grids) of model/quant/iq_grids.hpp, whose values are magnitudes
// (IQ2, IQ3) with 8 sign bits per group, or values in {-1, 0, 1} plus a shift (IQ1).
//
// Each decoder computes every weight with the float operations of ggml's reference decoder,
// in the same order: a sub-block scale such as (d * (0.5f + s)) * 0.25f, then
// scale * float(grid value), negated where the sign bit is set (ggml multiplies by -1.0f).
// The values are ggml's bit for bit (compared with ggml-quants.c's dequantize_row_iq* on
// 2000 random blocks a type); only a NaN weight, from a NaN d, may differ in its sign bit.
// Included by model/quant/quant_blocks.hpp, which lists these decoders with the others
// (AllBlocks); the CPU backend's dot kernels inline them.
#pragma once

#include <cstdint>
#include <cstring>

#include "model/gguf/ggml_types.hpp"
#include "model/quant/iq_grids.hpp"
#include "model/quant/quant_block_base.hpp"

namespace loom::model::blocks {

/// The sub-block scale of IQ2_XXS, IQ2_XS and IQ2_S for the 4-bit code c: (d * (0.5 + c)) * 0.25.
LOOM_QB_INLINE float iq2_scale(float d, uint32_t c) { return d * (0.5f + static_cast<float>(c)) * 0.25f; }

/// The sub-block scale of IQ3_XXS for the 4-bit code c: (d * (0.5 + c)) * 0.5.
LOOM_QB_INLINE float iq3xxs_scale(float d, uint32_t c) { return d * (0.5f + static_cast<float>(c)) * 0.5f; }

/// The sub-block scale of IQ3_S (4-bit c), IQ1_S and IQ1_M (3-bit c): d * (2c + 1).
LOOM_QB_INLINE float iq_odd_scale(float d, uint32_t c) { return d * static_cast<float>(2 * c + 1); }

/// The bytes of grid entry i (value j is byte j: the tables are little-endian, as the host).
template <class T>
LOOM_QB_INLINE const uint8_t* iq_entry(const T* grid, uint32_t i) {
    return reinterpret_cast<const uint8_t*>(grid + i);
}

// 8 lanes of int32 / uint32 / float (GCC and Clang vector extensions: one AVX register in
// the CPU backend's x86-64-v3 kernels, two SSE ones otherwise). Written as vectors because
// GCC does not vectorize the byte-to-float conversions and sign flips of a scalar loop here
// (that loop ran the IQ2 dot kernel about 2x slower).
using IqI8 = int32_t __attribute__((vector_size(32)));
using IqU8 = uint32_t __attribute__((vector_size(32)));
using IqF8 = float __attribute__((vector_size(32)));

/// y[j] = db * g[j] for j < 8, with g[0..3] = lo[0..3] (one 4-wide IQ3 entry) and g[4..7] =
/// hi[0..3] (another), negated where bit j of `signs` is set: the float's sign bit flipped,
/// which is what -v does.
LOOM_QB_INLINE void iq_put4x2(const uint8_t* lo, const uint8_t* hi, float db, uint32_t signs, float* y) {
    const IqI8 g = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    const IqF8 v = __builtin_convertvector(g, IqF8) * db;
    const IqU8 flip = ((IqU8{} + signs) << IqU8{31, 30, 29, 28, 27, 26, 25, 24}) & 0x80000000u;
    IqU8 u;
    std::memcpy(&u, &v, sizeof u);
    u ^= flip;
    std::memcpy(y, &u, sizeof u);
}

/// y[j] = db * g[j] for the 8 values of the 8-wide IQ2 entry g, signed as iq_put4x2.
LOOM_QB_INLINE void iq_put8(const uint8_t* g, float db, uint32_t signs, float* y) { iq_put4x2(g, g + 4, db, signs, y); }

/// y[j] = dl * (int8 value j of the IQ1 grid entry g + delta) for j < 8.
LOOM_QB_INLINE void iq1_put8(const uint8_t* g, float dl, float delta, float* y) {
    const auto* s = reinterpret_cast<const int8_t*>(g);
    const IqI8 gi = {s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]};
    const IqF8 v = (__builtin_convertvector(gi, IqF8) + delta) * dl;
    std::memcpy(y, &v, sizeof v);
}

/// IQ2_XXS (2.06 bits per weight): {half d; uint8 q[64]}. Sub-block s < 8 is the 8 bytes
/// q[8s..8s+7] read as two little-endian uint32: a (bytes 0-3) and b (bytes 4-7). Group l < 4
/// (weights 32s + 8l ..) uses grid entry kIq2xxsGrid[byte l of a] and signs
/// kSignsIq2xs[(b >> 7l) & 127]; the sub-block scale is (d * (0.5 + (b >> 28))) * 0.25.
struct IQ2_XXS : BlockOf<GgmlType::IQ2_XXS, 256, 66> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        for (int s = 0; s < 8; ++s) {
            const uint8_t* q = b + 2 + 8 * s;
            const uint32_t hi = load_le<uint32_t>(q + 4);
            const float db = iq2_scale(d, hi >> 28);
            for (int l = 0; l < 4; ++l)
                iq_put8(iq_entry(kIq2xxsGrid, q[l]), db, kSignsIq2xs[(hi >> (7 * l)) & 127], y + 32 * s + 8 * l);
        }
    }
};

/// IQ2_XS (2.31 bits per weight): {half d; uint16 q[32]; uint8 scales[8]}. Group g < 32
/// (weights 8g..8g+7) uses grid entry kIq2xsGrid[q[g] & 511] and signs kSignsIq2xs[q[g] >> 9];
/// in sub-block s, groups 0-1 have scale (d * (0.5 + (scales[s] & 15))) * 0.25 and groups 2-3
/// the same with scales[s] >> 4.
struct IQ2_XS : BlockOf<GgmlType::IQ2_XS, 256, 74> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        for (int s = 0; s < 8; ++s) {
            const uint8_t sc = b[66 + s];
            const float db[2] = {iq2_scale(d, sc & 0xfu), iq2_scale(d, sc >> 4u)};
            for (int l = 0; l < 4; ++l) {
                const uint16_t q = load_le<uint16_t>(b + 2 + 2 * (4 * s + l));
                iq_put8(iq_entry(kIq2xsGrid, q & 511u), db[l / 2], kSignsIq2xs[q >> 9], y + 32 * s + 8 * l);
            }
        }
    }
};

/// IQ2_S (2.56 bits per weight): {half d; uint8 qs[32]; uint8 signs[32]; uint8 qh[8]; uint8
/// scales[8]}. Group g = 4s + l uses grid entry kIq2sGrid[qs[g] | ((qh[s] >> 2l) & 3) << 8] and
/// the sign byte signs[g] itself; scales as IQ2_XS.
struct IQ2_S : BlockOf<GgmlType::IQ2_S, 256, 82> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        const uint8_t* qs = b + 2;
        const uint8_t* signs = b + 34;
        for (int s = 0; s < 8; ++s) {
            const uint8_t sc = b[74 + s], qh = b[66 + s];
            const float db[2] = {iq2_scale(d, sc & 0xfu), iq2_scale(d, sc >> 4u)};
            for (int l = 0; l < 4; ++l) {
                const int g = 4 * s + l;
                const uint32_t idx = qs[g] | (((static_cast<uint32_t>(qh) >> (2 * l)) & 3) << 8);
                iq_put8(iq_entry(kIq2sGrid, idx), db[l / 2], signs[g], y + 8 * g);
            }
        }
    }
};

/// IQ3_XXS (3.06 bits per weight): {half d; uint8 qs[64]; uint8 ss[32]}. Group l of sub-block
/// s uses the 4-wide grid entries kIq3xxsGrid[qs[8s + 2l]] (weights 0-3) and
/// kIq3xxsGrid[qs[8s + 2l + 1]] (weights 4-7); with a = the little-endian uint32 ss[4s..],
/// its signs are kSignsIq2xs[(a >> 7l) & 127] and the sub-block scale (d * (0.5 + (a >> 28))) * 0.5.
struct IQ3_XXS : BlockOf<GgmlType::IQ3_XXS, 256, 98> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        const uint8_t* qs = b + 2;
        for (int s = 0; s < 8; ++s) {
            const uint32_t a = load_le<uint32_t>(b + 66 + 4 * s);
            const float db = iq3xxs_scale(d, a >> 28);
            for (int l = 0; l < 4; ++l) {
                const uint8_t* q = qs + 8 * s + 2 * l;
                iq_put4x2(iq_entry(kIq3xxsGrid, q[0]), iq_entry(kIq3xxsGrid, q[1]), db,
                          kSignsIq2xs[(a >> (7 * l)) & 127], y + 32 * s + 8 * l);
            }
        }
    }
};

/// IQ3_S (3.44 bits per weight): {half d; uint8 qs[64]; uint8 qh[8]; uint8 signs[32]; uint8
/// scales[4]}. Group l of sub-block s uses the 4-wide grid entries kIq3sGrid[qs[8s + 2l] | bit 2l
/// of qh[s] << 8] (weights 0-3) and kIq3sGrid[qs[8s + 2l + 1] | bit 2l+1 of qh[s] << 8] (weights
/// 4-7), the sign byte signs[4s + l] itself, and the sub-block scale d * (1 + 2 * nibble), the
/// nibble being the low (even s) or high (odd s) half of scales[s / 2].
struct IQ3_S : BlockOf<GgmlType::IQ3_S, 256, 110> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        const uint8_t* qs = b + 2;
        const uint8_t* signs = b + 74;
        for (int s = 0; s < 8; ++s) {
            const uint32_t qh = b[66 + s];
            const float db = iq_odd_scale(d, (b[106 + s / 2] >> (4 * (s % 2))) & 0xfu);
            for (int l = 0; l < 4; ++l) {
                const uint8_t* q = qs + 8 * s + 2 * l;
                const uint32_t i0 = q[0] | (((qh >> (2 * l)) & 1) << 8);
                const uint32_t i1 = q[1] | (((qh >> (2 * l + 1)) & 1) << 8);
                iq_put4x2(iq_entry(kIq3sGrid, i0), iq_entry(kIq3sGrid, i1), db, signs[4 * s + l], y + 32 * s + 8 * l);
            }
        }
    }
};

/// IQ1_S (1.56 bits per weight): {half d; uint8 qs[32]; uint16 qh[8]}. Group l of sub-block s
/// uses grid entry kIq1sGrid[qs[4s + l] | ((qh[s] >> 3l) & 7) << 8]; weight j of it is
/// dl * (value j + delta) with dl = d * (2 * ((qh[s] >> 12) & 7) + 1) and delta = -kIq1Delta
/// when bit 15 of qh[s] is set, else +kIq1Delta.
struct IQ1_S : BlockOf<GgmlType::IQ1_S, 256, 50> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        const uint8_t* qs = b + 2;
        for (int s = 0; s < 8; ++s) {
            const uint32_t qh = load_le<uint16_t>(b + 34 + 2 * s);
            const float dl = iq_odd_scale(d, (qh >> 12) & 7);
            const float delta = (qh & 0x8000) ? -kIq1Delta : kIq1Delta;
            for (int l = 0; l < 4; ++l) {
                const uint32_t idx = qs[4 * s + l] | (((qh >> (3 * l)) & 7) << 8);
                iq1_put8(iq_entry(kIq1sGrid, idx), dl, delta, y + 32 * s + 8 * l);
            }
        }
    }
};

/// The half-float super-block scale of IQ1_M, spread over the top nibbles of its four
/// little-endian uint16 scale words w[0..3]: bits 0-3 from w[0], 4-7 from w[1], 8-11 from
/// w[2], 12-15 from w[3].
LOOM_QB_INLINE float iq1m_scale(const uint8_t* scales) {
    const uint32_t w0 = load_le<uint16_t>(scales), w1 = load_le<uint16_t>(scales + 2);
    const uint32_t w2 = load_le<uint16_t>(scales + 4), w3 = load_le<uint16_t>(scales + 6);
    return fp16_bits_to_fp32((w0 >> 12) | ((w1 >> 8) & 0xf0) | ((w2 >> 4) & 0xf00) | (w3 & 0xf000));
}

/// IQ1_M (1.75 bits per weight): {uint8 qs[32]; uint8 qh[16]; uint8 scales[8]}, no separate d
/// (iq1m_scale). Group g = 4s + l (l < 4) uses grid entry kIq1sGrid[qs[g] | ((h >> 4(l%2)) & 7)
/// << 8] with h = qh[2s + l/2], and delta = -kIq1Delta when bit 3 + 4(l%2) of h is set, else
/// +kIq1Delta. With w = scale word s/2 and k = 6(s%2), groups 0-1 have scale
/// d * (2 * ((w >> k) & 7) + 1), groups 2-3 d * (2 * ((w >> (k+3)) & 7) + 1); weight j of a
/// group is scale * (value j + delta).
struct IQ1_M : BlockOf<GgmlType::IQ1_M, 256, 56> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const uint8_t* qs = b;
        const uint8_t* qh = b + 32;
        const float d = iq1m_scale(b + 48);
        for (int s = 0; s < 8; ++s) {
            const uint32_t w = load_le<uint16_t>(b + 48 + 2 * (s / 2));
            const uint32_t k = 6 * (static_cast<uint32_t>(s) % 2);
            const float dl[2] = {iq_odd_scale(d, (w >> k) & 7), iq_odd_scale(d, (w >> (k + 3)) & 7)};
            for (int l = 0; l < 4; ++l) {
                const uint32_t h = static_cast<uint32_t>(qh[2 * s + l / 2]) >> (4 * (l % 2));
                const uint32_t idx = qs[4 * s + l] | ((h & 7) << 8);
                const float delta = (h & 8) ? -kIq1Delta : kIq1Delta;
                iq1_put8(iq_entry(kIq1sGrid, idx), dl[l / 2], delta, y + 32 * s + 8 * l);
            }
        }
    }
};

}  // namespace loom::model::blocks
