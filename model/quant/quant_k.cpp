// Round-to-nearest quantizers for the 256-element super-block types (Q2_K..Q6_K, IQ4_XS).
//
// Each writes one block in the layout documented in model/quant/quant_blocks.hpp (ggml's
// ggml-common.h, as stored in GGUF files). Sub-block scales are chosen from each
// sub-block's extremes, then themselves quantized against the super-block scale;
// the elements are rounded against the scales the decoder will actually use.
#include <cmath>

#include "model/quant/quant_blocks.hpp"
#include "model/quant/quant_internal.hpp"

namespace loom::model::qdetail {
namespace {

// Sub-block scale and (non-negative) min for "x = scale * q - min" types with q in
// [0, levels]: the range always includes 0, like ggml's, so that min >= 0.
void range_fit(const float* x, int n, int levels, float& scale, float& min) {
    float lo = 0, hi = 0;
    for (int j = 0; j < n; ++j) lo = std::fmin(lo, x[j]), hi = std::fmax(hi, x[j]);
    scale = (hi - lo) / static_cast<float>(levels);
    min = -lo;
}

// Quantizes the super-block scales and mins of an "x = d*sc*q - dmin*m" type:
// sc (rounded up, so the sub-block's range stays covered) and m (rounded) get
// `max_code` levels; d and dmin are written as halves at pd / pdm.
void scale_min_codes(const float* sc, const float* mn, int count, int max_code, uint8_t* pd, uint8_t* pdm, int* lsc,
                     int* lmn, float& d, float& dmin) {
    float msc = 0, mmn = 0;
    for (int i = 0; i < count; ++i) msc = std::fmax(msc, sc[i]), mmn = std::fmax(mmn, mn[i]);
    store_f16(pd, msc / static_cast<float>(max_code), d);
    store_f16(pdm, mmn / static_cast<float>(max_code), dmin);
    for (int i = 0; i < count; ++i) {
        lsc[i] = d > 0 ? clampi(static_cast<int>(std::ceil(sc[i] / d - 1e-3f)), 0, max_code) : 0;
        lmn[i] = dmin > 0 ? clampi(round_int(mn[i] / dmin), 0, max_code) : 0;
    }
}

// q = round((x + m) / s) in [0, levels] for the decoded scale s and min m.
inline int level(float x, float s, float m, int levels) {
    return s > 0 ? clampi(round_int((x + m) / s), 0, levels) : 0;
}

// Packs Q4_K / Q5_K's eight 6-bit scales and mins into 12 bytes (see k4_scale_min).
void pack_k4_scales(const int* sc, const int* mn, uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
}

// Shared body of Q4_K (kBits 4) and Q5_K (kBits 5).
template <int kBits>
void quantize_k45(const float* x, uint8_t* b) {
    constexpr int kLevels = (1 << kBits) - 1;
    float sc[8], mn[8], d, dmin;
    int lsc[8], lmn[8];
    for (int s = 0; s < 8; ++s) range_fit(x + 32 * s, 32, kLevels, sc[s], mn[s]);
    scale_min_codes(sc, mn, 8, 63, b, b + 2, lsc, lmn, d, dmin);
    pack_k4_scales(lsc, lmn, b + 4);
    uint8_t* qh = b + 16;
    uint8_t* qs = b + (kBits == 5 ? 48 : 16);
    if constexpr (kBits == 5) std::memset(qh, 0, 32);
    for (int c = 0; c < 4; ++c) {
        const float s0 = d * static_cast<float>(lsc[2 * c]), m0 = dmin * static_cast<float>(lmn[2 * c]);
        const float s1 = d * static_cast<float>(lsc[2 * c + 1]), m1 = dmin * static_cast<float>(lmn[2 * c + 1]);
        for (int l = 0; l < 32; ++l) {
            const int q0 = level(x[64 * c + l], s0, m0, kLevels);
            const int q1 = level(x[64 * c + 32 + l], s1, m1, kLevels);
            qs[32 * c + l] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
            if constexpr (kBits == 5)
                qh[l] = static_cast<uint8_t>(qh[l] | ((q0 >> 4) << (2 * c)) | ((q1 >> 4) << (2 * c + 1)));
        }
    }
}

// Largest-magnitude value of x[0..n), sign kept.
float signed_max(const float* x, int n) {
    float amax = 0, mx = 0;
    for (int j = 0; j < n; ++j)
        if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), mx = x[j];
    return mx;
}

// Scales for the 16 sub-blocks of 16 of a 256-element super-block x (Q3_K, Q6_K): s[i] maps
// the sub-block's largest magnitude to `level` (a negative level of the format's range).
// Returns max |s[i]|, which the f16 super-block scale then divides.
float sub_block_scales(const float* x, float level, float s[16]) {
    float smax = 0;
    for (int i = 0; i < 16; ++i) {
        s[i] = signed_max(x + 16 * i, 16) / level;
        smax = std::fmax(smax, std::fabs(s[i]));
    }
    return smax;
}

}  // namespace

void quantize_block_q4_k(const float* x, uint8_t* b) { quantize_k45<4>(x, b); }
void quantize_block_q5_k(const float* x, uint8_t* b) { quantize_k45<5>(x, b); }

void quantize_block_q2_k(const float* x, uint8_t* b) {
    float sc[16], mn[16], d, dmin;
    int lsc[16], lmn[16];
    for (int i = 0; i < 16; ++i) range_fit(x + 16 * i, 16, 3, sc[i], mn[i]);
    scale_min_codes(sc, mn, 16, 15, b + 80, b + 82, lsc, lmn, d, dmin);
    for (int i = 0; i < 16; ++i) b[i] = static_cast<uint8_t>(lsc[i] | (lmn[i] << 4));
    uint8_t* qs = b + 16;
    std::memset(qs, 0, 64);
    for (int e = 0; e < 256; ++e) {
        const int i = e / 16, n = e / 128, j = (e / 32) % 4, m = e % 32;
        const int q = level(x[e], d * static_cast<float>(lsc[i]), dmin * static_cast<float>(lmn[i]), 3);
        qs[32 * n + m] = static_cast<uint8_t>(qs[32 * n + m] | (q << (2 * j)));
    }
}

void quantize_block_q3_k(const float* x, uint8_t* b) {
    // Per sub-block of 16: the largest magnitude maps to level -4.
    float s[16];
    const float smax = sub_block_scales(x, -4.0f, s);
    float d;
    store_f16(b + 108, smax / 31.0f, d);
    int ls[16];
    for (int i = 0; i < 16; ++i) ls[i] = d > 0 ? clampi(round_int(s[i] / d), -32, 31) : 0;
    uint8_t* hm = b;
    uint8_t* qs = b + 32;
    uint8_t* sc = b + 96;
    std::memset(b, 0, 108);
    for (int i = 0; i < 16; ++i) {  // inverse of q3k_scale
        const int v = ls[i] + 32;
        if (i < 8) sc[i] = static_cast<uint8_t>(sc[i] | (v & 0xF));
        else sc[i - 8] = static_cast<uint8_t>(sc[i - 8] | ((v & 0xF) << 4));
        sc[8 + (i & 3)] = static_cast<uint8_t>(sc[8 + (i & 3)] | ((v >> 4) << (2 * (i >> 2))));
    }
    for (int e = 0; e < 256; ++e) {
        const int i = e / 16, n = e / 128, j = (e / 32) % 4, m = e % 32;
        const float step = d * static_cast<float>(ls[i]);
        const int q = (step != 0 ? clampi(round_int(x[e] / step), -4, 3) : 0) + 4;  // 0..7
        qs[32 * n + m] = static_cast<uint8_t>(qs[32 * n + m] | ((q & 3) << (2 * j)));
        hm[m] = static_cast<uint8_t>(hm[m] | ((q >> 2) << (4 * n + j)));
    }
}

void quantize_block_q6_k(const float* x, uint8_t* b) {
    float s[16];
    const float smax = sub_block_scales(x, -32.0f, s);
    float d;
    store_f16(b + 208, smax / 127.0f, d);
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    for (int i = 0; i < 16; ++i) sc[i] = static_cast<int8_t>(d > 0 ? clampi(round_int(s[i] / d), -127, 127) : 0);
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    std::memset(b, 0, 192);
    for (int e = 0; e < 256; ++e) {
        const float step = d * static_cast<float>(sc[e / 16]);
        const int q = (step != 0 ? clampi(round_int(x[e] / step), -32, 31) : 0) + 32;  // 0..63
        const int n = e / 128, k = (e / 32) % 4, l = e % 32;
        uint8_t& lo = ql[64 * n + 32 * (k & 1) + l];
        lo = static_cast<uint8_t>(lo | ((q & 0xF) << (4 * (k >> 1))));
        qh[32 * n + l] = static_cast<uint8_t>(qh[32 * n + l] | ((q >> 4) << (2 * k)));
    }
}

void quantize_block_iq4_xs(const float* x, uint8_t* b) {
    float s[8], smax = 0;
    for (int i = 0; i < 8; ++i) {
        s[i] = iq4_fit(x + 32 * i, 32);
        smax = std::fmax(smax, std::fabs(s[i]));
    }
    float d;
    store_f16(b, smax / 31.0f, d);
    uint16_t sh = 0;
    uint8_t* sl = b + 4;
    uint8_t* qs = b + 8;
    sl[0] = sl[1] = sl[2] = sl[3] = 0;
    for (int i = 0; i < 8; ++i) {
        const int l = d > 0 ? clampi(round_int(s[i] / d), -32, 31) : 0;
        const int v = l + 32;
        sl[i / 2] = static_cast<uint8_t>(sl[i / 2] | ((v & 0xF) << (4 * (i % 2))));
        sh = static_cast<uint16_t>(sh | ((v >> 4) << (2 * i)));
        const float step = d * static_cast<float>(l);
        const float inv = step != 0 ? 1.0f / step : 0.0f;
        for (int j = 0; j < 16; ++j)
            qs[16 * i + j] =
                static_cast<uint8_t>(iq4_index(x[32 * i + j] * inv) | (iq4_index(x[32 * i + 16 + j] * inv) << 4));
    }
    std::memcpy(b + 2, &sh, 2);
}

}  // namespace loom::model::qdetail
