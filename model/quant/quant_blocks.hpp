// Block decoders for every ggml type loom reads: one block of bytes -> floats.
//
// Source: the block structs of ggml (ggml-common.h) as described by the GGUF format
// (ggml/docs/gguf.md, "ggml_type"); all multi-byte fields are little-endian and all
// "d"/"dmin"/"m" scales are IEEE half floats. Shared by model/quant/quant.cpp
// (dequantize_row) and the CPU backend's dot kernels (engine/backends/cpu/matvec.cpp),
// which inline them; hence header-only and always_inline. Every decoder writes exactly
// Block::kSize floats and reads exactly Block::kBytes bytes. matvec.cpp's fused dot
// kernels compute each weight with the same float expression as these decoders (e.g.
// d * float(q - 8), or (d * sc) * float(q) - dmin * m), so both give identical values;
// keep them in step when changing either.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include "model/gguf/ggml_types.hpp"
#include "model/quant/quant.hpp"
#include "model/quant/quant_block_base.hpp"
#include "model/quant/quant_blocks_iq.hpp"

namespace loom::model::blocks {

/// The 16 signed levels of IQ4_NL and IQ4_XS, ascending (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/// The 16 E2M1 (FP4) values of MXFP4, doubled so that they are integers (0, 0.5, 1, 1.5,
/// 2, 3, 4, 6 and their negatives, times 2): ggml's kvalues_mxfp4 (ggml-common.h, MIT).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// MXFP4's E8M0 scale byte e as the float 2^(e - 128): the block scale 2^(e - 127) halved,
/// for the doubled kMxfp4Values (exact for every e, 2^-128 being a subnormal float).
LOOM_QB_INLINE float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

/// 6-bit scale j (0..7) and 6-bit min j of Q4_K / Q5_K's 12 packed scale bytes:
/// bytes 0-3 hold scales 0-3 (bits 0-5), bytes 4-7 mins 0-3 (bits 0-5); scales and
/// mins 4-7 keep their low nibbles in bytes 8-11 (scale low, min high) and their top
/// two bits in bits 6-7 of bytes 0-3 (scales) and 4-7 (mins).
LOOM_QB_INLINE void k4_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
    if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/// The scales and offsets of Q4_K/Q5_K chunk c (sub-blocks 2c and 2c+1): x = d_s*q - n_s for
/// the chunk's low (s = 0) and high (s = 1) half. d, dmin: the block's F16 super-scales, as floats.
struct K4Chunk {
    float d0, n0, d1, n1;
};
LOOM_QB_INLINE K4Chunk k4_chunk(const uint8_t* sc, float d, float dmin, int c) {
    int s0, m0, s1, m1;
    k4_scale_min(sc, 2 * c, s0, m0);
    k4_scale_min(sc, 2 * c + 1, s1, m1);
    return {d * static_cast<float>(s0), dmin * static_cast<float>(m0), d * static_cast<float>(s1),
            dmin * static_cast<float>(m1)};
}

/// Q3_K's 16 6-bit scales (stored with +32 bias) from 12 bytes: the low nibble of
/// scale i is byte i (i < 8) or the high nibble of byte i-8; its top two bits are
/// bits 2*(i/4)..+1 of byte 8 + i%4.
LOOM_QB_INLINE int q3k_scale(const uint8_t* s, int i) {
    const int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
    const int hi = (s[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
    return (lo | (hi << 4)) - 32;
}

/// Bit 4 of element j of a Q5_0 / Q5_1 block, as 0 or 16: bit j of its uint32 qh.
LOOM_QB_INLINE int32_t q5_high(uint32_t qh, int j) { return static_cast<int32_t>((qh >> j) & 1) << 4; }

/// The nibble layout of 32 elements in 16 bytes (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and each
/// IQ4_XS sub-block): element j < 16 is the low nibble of qs[j], element j + 16 its high
/// nibble. Sets y[e] = f(nibble, e) for e < 32; f returns float, the nibble is 0..15.
template <class F>
LOOM_QB_INLINE void split_nibbles(const uint8_t* qs, float* y, F f) {
    for (int j = 0; j < 16; ++j) {
        y[j] = f(qs[j] & 0xF, j);
        y[j + 16] = f(qs[j] >> 4, j + 16);
    }
}

/// Q8_0: {half d; int8 q[32]}, x = d * q.
struct Q8_0 : BlockOf<GgmlType::Q8_0, 32, 34> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        const auto* q = reinterpret_cast<const int8_t*>(b + 2);
        for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]);
    }
};

/// Q4_0: {half d; uint8 qs[16]}; element j is the low nibble of qs[j], element j+16
/// the high nibble; x = d * (nibble - 8).
struct Q4_0 : BlockOf<GgmlType::Q4_0, 32, 18> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        split_nibbles(b + 2, y, [d](int q, int) { return d * static_cast<float>(q - 8); });
    }
};

/// Q4_1: {half d; half m; uint8 qs[16]} (nibbles as Q4_0); x = d * nibble + m.
struct Q4_1 : BlockOf<GgmlType::Q4_1, 32, 20> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b), m = load_f16(b + 2);
        split_nibbles(b + 4, y, [d, m](int q, int) { return d * static_cast<float>(q) + m; });
    }
};

/// Q5_0: {half d; uint8 qh[4]; uint8 qs[16]}; bit j of the little-endian uint32 qh is
/// bit 4 of element j; nibbles as Q4_0; x = d * (q5 - 16).
struct Q5_0 : BlockOf<GgmlType::Q5_0, 32, 22> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        const uint32_t qh = load_le<uint32_t>(b + 2);
        split_nibbles(b + 6, y, [d, qh](int q, int e) { return d * static_cast<float>((q | q5_high(qh, e)) - 16); });
    }
};

/// Q5_1: {half d; half m; uint8 qh[4]; uint8 qs[16]} (bits as Q5_0); x = d * q5 + m.
struct Q5_1 : BlockOf<GgmlType::Q5_1, 32, 24> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b), m = load_f16(b + 2);
        const uint32_t qh = load_le<uint32_t>(b + 4);
        split_nibbles(b + 8, y, [d, m, qh](int q, int e) { return d * static_cast<float>(q | q5_high(qh, e)) + m; });
    }
};

/// IQ4_NL: {half d; uint8 qs[16]} (nibbles as Q4_0); x = d * kIq4nlValues[nibble].
struct IQ4_NL : BlockOf<GgmlType::IQ4_NL, 32, 18> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        split_nibbles(b + 2, y, [d](int q, int) { return d * static_cast<float>(kIq4nlValues[q]); });
    }
};

/// MXFP4 (OCP Microscaling, gpt-oss's expert weights): {uint8 e; uint8 qs[16]} (nibbles as
/// Q4_0); x = e8m0_half(e) * kMxfp4Values[nibble] (ggml's block_mxfp4).
struct MXFP4 : BlockOf<GgmlType::MXFP4, 32, 17> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = e8m0_half(b[0]);
        split_nibbles(b + 1, y, [d](int q, int) { return d * static_cast<float>(kMxfp4Values[q]); });
    }
};

/// Q2_K: {uint8 scales[16]; uint8 qs[64]; half d; half dmin}. Element e = 128n + 32j
/// + m (n<2, j<4, m<32) is bits 2j..2j+1 of qs[32n + m]; sub-block i = e/16 has
/// scale scales[i] & 15 and min scales[i] >> 4; x = d*scale*q - dmin*min.
struct Q2_K : BlockOf<GgmlType::Q2_K, 256, 84> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const uint8_t* sc = b;
        const uint8_t* qs = b + 16;
        const float d = load_f16(b + 80), dmin = load_f16(b + 82);
        for (int n = 0; n < 2; ++n)
            for (int j = 0; j < 4; ++j)
                for (int h = 0; h < 2; ++h) {
                    const int i = 8 * n + 2 * j + h;
                    const float dl = d * static_cast<float>(sc[i] & 0xF);
                    const float ml = dmin * static_cast<float>(sc[i] >> 4);
                    const uint8_t* q = qs + 32 * n + 16 * h;
                    float* o = y + 16 * i;
                    for (int l = 0; l < 16; ++l) o[l] = dl * static_cast<float>((q[l] >> (2 * j)) & 3) - ml;
                }
    }
};

/// Q3_K: {uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; half d}. Element e = 128n
/// + 32j + m: low two bits at bits 2j of qs[32n + m], high bit at bit 4n+j of
/// hmask[m]; q = low - (high ? 0 : 4) in -4..3; x = d * q3k_scale(e/16) * q.
struct Q3_K : BlockOf<GgmlType::Q3_K, 256, 110> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const uint8_t* hm = b;
        const uint8_t* qs = b + 32;
        const uint8_t* sc = b + 96;
        const float d = load_f16(b + 108);
        for (int n = 0; n < 2; ++n)
            for (int j = 0; j < 4; ++j)
                for (int h = 0; h < 2; ++h) {
                    const int i = 8 * n + 2 * j + h;
                    const float dl = d * static_cast<float>(q3k_scale(sc, i));
                    const uint8_t* q = qs + 32 * n + 16 * h;
                    const uint8_t* hb = hm + 16 * h;
                    const int bit = 4 * n + j;
                    float* o = y + 16 * i;
                    for (int l = 0; l < 16; ++l) {
                        const int v = ((q[l] >> (2 * j)) & 3) - (((hb[l] >> bit) & 1) ? 0 : 4);
                        o[l] = dl * static_cast<float>(v);
                    }
                }
    }
};

// The Q4_K/Q5_K decode: for chunk c < 4, element 64c + l is the low nibble of qs[32c + l]
// and element 64c + 32 + l its high nibble, with (kFifthBit) bit 2c, resp. 2c+1, of qh[l] as
// bit 4; sub-block s = e/32 uses k4_scale_min(s): x = d*sc*q - dmin*mn.
template <bool kFifthBit>
LOOM_QB_INLINE void decode_k4(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* sc = b + 4;
    for (int c = 0; c < 4; ++c) {
        const auto [d0, n0, d1, n1] = k4_chunk(sc, d, dmin, c);
        const uint8_t* q = qs + 32 * c;
        float* o = y + 64 * c;
        for (int l = 0; l < 32; ++l) {
            int h0 = 0, h1 = 0;
            if constexpr (kFifthBit) {
                h0 = ((qh[l] >> (2 * c)) & 1) << 4;
                h1 = ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            o[l] = d0 * static_cast<float>((q[l] & 0xF) | h0) - n0;
            o[l + 32] = d1 * static_cast<float>((q[l] >> 4) | h1) - n1;
        }
    }
}

/// Q4_K: {half d; half dmin; uint8 scales[12]; uint8 qs[128]}. For chunk c < 4,
/// element 64c + l is the low nibble of qs[32c + l] and element 64c + 32 + l its high
/// nibble; sub-block s = e/32 uses k4_scale_min(s): x = d*sc*q - dmin*mn.
struct Q4_K : BlockOf<GgmlType::Q4_K, 256, 144> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) { decode_k4<false>(b, nullptr, b + 16, y); }
};

/// Q5_K: {half d; half dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}: Q4_K
/// plus a fifth bit: element 64c + l takes bit 2c of qh[l], element 64c + 32 + l bit
/// 2c+1; x = d*sc*q5 - dmin*mn.
struct Q5_K : BlockOf<GgmlType::Q5_K, 256, 176> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) { decode_k4<true>(b, b + 16, b + 48, y); }
};

/// Q6_K: {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d}. In half n < 2, for
/// l < 32 and k < 4, element 128n + 32k + l takes its low nibble from ql[64n + l +
/// 32*(k&1)] (low nibble for k < 2, high for k >= 2) and its top two bits from bits
/// 2k..2k+1 of qh[32n + l]; x = d * scales[e/16] * (q6 - 32).
struct Q6_K : BlockOf<GgmlType::Q6_K, 256, 210> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
        const float d = load_f16(b + 208);
        for (int n = 0; n < 2; ++n) {
            const uint8_t* l0 = ql + 64 * n;
            const uint8_t* h = qh + 32 * n;
            float* o = y + 128 * n;
            for (int k = 0; k < 4; ++k)
                for (int half = 0; half < 2; ++half) {
                    const float dl = d * static_cast<float>(sc[8 * n + 2 * k + half]);
                    const uint8_t* lo = l0 + 32 * (k & 1) + 16 * half;
                    const uint8_t* hb = h + 16 * half;
                    const int shift = (k >> 1) * 4;
                    for (int l = 0; l < 16; ++l) {
                        const int q = ((lo[l] >> shift) & 0xF) | (((hb[l] >> (2 * k)) & 3) << 4);
                        o[32 * k + 16 * half + l] = dl * static_cast<float>(q - 32);
                    }
                }
        }
    }
};

/// IQ4_XS: {half d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128]}. Sub-block s <
/// 8 of 32 elements has the 6-bit scale ls = (nibble s%2 of scales_l[s/2]) | (bits
/// 2s..2s+1 of scales_h) << 4; its 16 bytes qs[16s..] hold elements 32s + j (low
/// nibble) and 32s + 16 + j (high); x = d * (ls - 32) * kIq4nlValues[nibble].
struct IQ4_XS : BlockOf<GgmlType::IQ4_XS, 256, 136> {
    static LOOM_QB_INLINE void decode(const uint8_t* b, float* y) {
        const float d = load_f16(b);
        const uint16_t sh = load_le<uint16_t>(b + 2);
        const uint8_t* sl = b + 4;
        const uint8_t* qs = b + 8;
        for (int s = 0; s < 8; ++s) {
            const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0xF) | (((sh >> (2 * s)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            split_nibbles(qs + 16 * s, y + 32 * s,
                          [dl](int q, int) { return dl * static_cast<float>(kIq4nlValues[q]); });
        }
    }
};

/// The block decoders above and those of quant_blocks_iq.hpp, as a list of types (see with_block).
template <class... Bs>
struct BlockList {};
using AllBlocks = BlockList<Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ2_XXS,
                            IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M>;

/// Calls `f.template operator()<B>()` for the decoder B in `list` whose kType is `type` and
/// returns true; returns false, not calling f, when none is.
template <class F, class... Bs>
bool with_block(BlockList<Bs...> /*list*/, uint32_t type, F&& f) {
    return ((type == static_cast<uint32_t>(Bs::kType) && (f.template operator()<Bs>(), true)) || ...);
}

/// with_block over every decoder (AllBlocks), e.g.
/// `with_block(type, [&]<class B>() { B::decode(p, y); })`.
template <class F>
bool with_block(uint32_t type, F&& f) {
    return with_block(AllBlocks{}, type, std::forward<F>(f));
}

}  // namespace loom::model::blocks
