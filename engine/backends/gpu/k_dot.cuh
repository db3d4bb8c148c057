// Per-type chunk loads, in-register dequantization and dot products of device weight rows (F32,
// F16, BF16, Q8_0, Q4_K, Q6_K), shared by the matvec kernel and the row dequantizers
// (k_matvec.cu).
//
// Block layouts follow ggml-common.h as the GGUF format stores them (model/quant/quant_blocks.hpp
// documents each); the device layouts are those of DevMatrix (kernels.hpp). A row is read in
// "chunks": 16-byte loads that each thread issues for several rows before it uses any of them,
// so that many loads are in flight (the CUDA C++ Best Practices Guide, "Coalesced Access to
// Global Memory"), and a chunk decodes to kRuns runs of kRunLen consecutive elements.
#pragma once

#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {
namespace {

LOOM_DEV uint32_t byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xFFu; }

// Byte e (0..3) of w, an unsigned value below 2^8, as a float without an int-to-float
// conversion: the bits 0x4B0000nn are the float 2^23 + nn, and subtracting 2^23 is exact.
LOOM_DEV float byte_as_float(uint32_t w, int e) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | static_cast<uint32_t>(e))) - 8388608.0f;
}

// byte_as_float(w, e) - off in one subtraction: (2^23 + nn) - (2^23 + off) is exact for
// integers nn, off below 2^8.
LOOM_DEV float byte_minus(uint32_t w, int e, float off) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | static_cast<uint32_t>(e))) - (8388608.0f + off);
}

/// The chunk codec of weight type T (a kernels.hpp type id). Each specialization has:
///  - kElems elements per chunk in kRuns runs of kRunLen; kPlain (float types: decode, no dot)
///    and kSums (dot() needs the runs' sums of x in sx);
///  - Raw, the chunk's loaded bytes; count(cols), chunks per row; run_start(c, run), the row
///    element at which run `run` of chunk c starts;
///  - load(row, c, cols, raw): reads chunk c of a device row; decode(raw, c, v): its kElems
///    values into v (run after run); Q8_0 and Q6_K also dot(raw, c, xv, sx): sum of w_i xv_i
///    (Q4_K's is q4_dot1 below).
template <uint32_t T>
struct Chunk;

/// The plain types (F32, F16, BF16): 8 elements per chunk, one run, no block scales.
struct PlainChunk {
    static constexpr int kElems = 8, kRuns = 1, kRunLen = 8;
    static constexpr bool kPlain = true;
    static constexpr bool kSums = false;
    static LOOM_DEV int count(int cols) { return (cols + 7) >> 3; }
    static LOOM_DEV int run_start(int c, int) { return 8 * c; }
};

/// The 16-bit float types: 8 elements per 16-byte chunk; H::lo and H::hi decode the low and
/// high half of a 32-bit word (elements 2i and 2i + 1).
template <class H>
struct HalfChunk : PlainChunk {
    struct Raw {
        uint4 q;
    };
    static LOOM_DEV void load(const uint8_t* row, int c, int, Raw& r) { r.q = ld16(row + 16 * c); }
    static LOOM_DEV void decode(const Raw& r, int, float* v) {
        const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = H::lo(w[i]);
            v[2 * i + 1] = H::hi(w[i]);
        }
    }
};

/// IEEE half bits to float.
struct F16Halves {
    static LOOM_DEV float lo(uint32_t w) { return h2f(static_cast<uint16_t>(w & 0xFFFFu)); }
    static LOOM_DEV float hi(uint32_t w) { return h2f(static_cast<uint16_t>(w >> 16)); }
};

/// bfloat16 bits to float (the upper half of a float's bits).
struct BF16Halves {
    static LOOM_DEV float lo(uint32_t w) { return __uint_as_float(w << 16); }
    static LOOM_DEV float hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
};

/// F16: 8 elements per 16-byte chunk.
template <>
struct Chunk<kF16> : HalfChunk<F16Halves> {};

/// BF16: 8 elements per 16-byte chunk.
template <>
struct Chunk<kBF16> : HalfChunk<BF16Halves> {};

/// F32: 8 elements per chunk (two 16-byte loads).
template <>
struct Chunk<kF32> : PlainChunk {
    struct Raw {
        uint4 a, b;
    };
    static LOOM_DEV void load(const uint8_t* row, int c, int, Raw& r) {
        r.a = ld16(row + 32 * c);
        r.b = ld16(row + 32 * c + 16);
    }
    static LOOM_DEV void decode(const Raw& r, int, float* v) {
        v[0] = __uint_as_float(r.a.x);
        v[1] = __uint_as_float(r.a.y);
        v[2] = __uint_as_float(r.a.z);
        v[3] = __uint_as_float(r.a.w);
        v[4] = __uint_as_float(r.b.x);
        v[5] = __uint_as_float(r.b.y);
        v[6] = __uint_as_float(r.b.z);
        v[7] = __uint_as_float(r.b.w);
    }
};

/// The quantized types: 32 elements per chunk (a Q8_0 block, or an eighth of a K-quant block)
/// in Runs runs; a dot product takes the place of decode-then-multiply.
template <int Runs>
struct QuantChunk {
    static constexpr int kElems = 32, kRuns = Runs, kRunLen = 32 / Runs;
    static constexpr bool kPlain = false;
    static LOOM_DEV int count(int cols) { return cols >> 5; }
};

/// Q8_0 (split layout): chunk c is block c, 32 int8 quants times the half scale d.
template <>
struct Chunk<kQ8_0> : QuantChunk<1> {
    struct Raw {
        uint4 q0, q1;
        uint16_t d;
    };
    static LOOM_DEV int run_start(int c, int) { return 32 * c; }
    static LOOM_DEV void load(const uint8_t* row, int c, int cols, Raw& r) {
        r.q0 = ld16(row + 32 * c);
        r.q1 = ld16(row + 32 * c + 16);
        r.d = *reinterpret_cast<const uint16_t*>(row + cols + 2 * c);
    }
    static constexpr bool kSums = false;
    // d * sum q_i x_i; the int8 quants become floats through byte_as_float of q + 128.
    static LOOM_DEV float dot(const Raw& r, int, const float* xv, const float*) {
        const uint32_t w[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t u = w[i] ^ 0x80808080u;
#pragma unroll
            for (int e = 0; e < 4; ++e) acc += byte_minus(u, e, 128.0f) * xv[4 * i + e];
        }
        return h2f(r.d) * acc;
    }
    static LOOM_DEV void decode(const Raw& r, int, float* v) {
        const float d = h2f(r.d);
        const uint32_t w[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t u = w[i] ^ 0x80808080u;  // q + 128, converted without I2F (as in dot)
#pragma unroll
            for (int e = 0; e < 4; ++e) v[4 * i + e] = d * byte_minus(u, e, 128.0f);
        }
    }
};

/// Q4_K (144-byte blocks): chunk c is 16 quant bytes j = c % 8 of block c / 8 plus the block's
/// 16-byte header {d, dmin, scales[12]}; low nibbles are elements 64(j/2) + 16(j%2) + i of the
/// block (sub-block 2(j/2)), high nibbles 32 further (sub-block 2(j/2) + 1).
template <>
struct Chunk<kQ4_K> : QuantChunk<2> {
    struct Raw {
        uint4 q, h;
    };
    static LOOM_DEV int run_start(int c, int run) {
        const int j = c & 7;
        return 256 * (c >> 3) + 64 * (j >> 1) + 16 * (j & 1) + 32 * run;
    }
    static LOOM_DEV void load(const uint8_t* row, int c, int, Raw& r) {
        const uint8_t* blk = row + 144 * (c >> 3);
        r.h = ld16(blk);
        r.q = ld16(blk + 16 + 16 * (c & 7));
    }
    // 6-bit scale and min of sub-block sb (0..7) from the 12 packed bytes in words y, z, w.
    static LOOM_DEV void scale_min(const uint4& h, int sb, int& sc, int& mn) {
        if (sb < 4) {
            sc = static_cast<int>(byte_of(h.y, sb) & 63u);
            mn = static_cast<int>(byte_of(h.z, sb) & 63u);
        } else {
            const int i = sb - 4;
            sc = static_cast<int>((byte_of(h.w, i) & 0xFu) | ((byte_of(h.y, i) >> 6) << 4));
            mn = static_cast<int>((byte_of(h.w, i) >> 4) | ((byte_of(h.z, i) >> 6) << 4));
        }
    }
    // Block scales d, dmin and the 6-bit scales and mins of chunk c's two sub-blocks (runs 0, 1):
    // element i of run k is d * sk * q_i - dmin * mk.
    struct Scales {
        float d, dmin;
        int s0, m0, s1, m1;
    };
    static LOOM_DEV Scales scales(const Raw& r, int c) {
        Scales k;
        k.d = h2f(static_cast<uint16_t>(r.h.x & 0xFFFFu));
        k.dmin = h2f(static_cast<uint16_t>(r.h.x >> 16));
        const int sb = 2 * ((c & 7) >> 1);
        scale_min(r.h, sb, k.s0, k.m0);
        scale_min(r.h, sb + 1, k.s1, k.m1);
        return k;
    }
    static constexpr bool kSums = true;  // q4_dot1 needs the runs' sums of x
    static LOOM_DEV void decode(const Raw& r, int c, float* v) {
        const Scales k = scales(r, c);
        const float d0 = k.d * static_cast<float>(k.s0), n0 = k.dmin * static_cast<float>(k.m0);
        const float d1 = k.d * static_cast<float>(k.s1), n1 = k.dmin * static_cast<float>(k.m1);
        const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            // The nibbles as floats through byte_as_float (exact; no I2F instruction).
            const uint32_t lo = w[i] & 0x0F0F0F0Fu, hi = (w[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                v[4 * i + e] = fmaf(d0, byte_as_float(lo, e), -n0);
                v[16 + 4 * i + e] = fmaf(d1, byte_as_float(hi, e), -n1);
            }
        }
    }
};

/// Q6_K (224-byte padded blocks): chunk c is j = c % 8 of block c / 8 with n = j/4, kk = (j/2)%2,
/// h = j%2: ql bytes 16j..16j+15 (low nibbles: elements 128n + 32kk + 16h + i, high nibbles:
/// 64 further) and qh bytes 32n + 16h + i (bits 2k..2k+1 for k = kk and kk + 2).
template <>
struct Chunk<kQ6_K> : QuantChunk<2> {
    struct Raw {
        uint4 ql, qh;
        uint32_t s0, s1;
        uint16_t d;
    };
    static LOOM_DEV int run_start(int c, int run) {
        const int j = c & 7;
        return 256 * (c >> 3) + 128 * (j >> 2) + 32 * ((j >> 1) & 1) + 16 * (j & 1) + 64 * run;
    }
    static LOOM_DEV void load(const uint8_t* row, int c, int, Raw& r) {
        const int j = c & 7;
        const uint8_t* blk = row + 224 * (c >> 3);
        const int n = j >> 2, kk = (j >> 1) & 1, h = j & 1;
        r.ql = ld16(blk + 16 * j);
        r.qh = ld16(blk + 128 + 32 * n + 16 * h);
        const int idx0 = 8 * n + 2 * kk + h;  // scale of k = kk; k = kk + 2 is idx0 + 4
        r.s0 = *reinterpret_cast<const uint32_t*>(blk + 192 + 4 * (idx0 >> 2));
        r.s1 = *reinterpret_cast<const uint32_t*>(blk + 192 + 4 * ((idx0 >> 2) + 1));
        r.d = *reinterpret_cast<const uint16_t*>(blk + 208);
    }
    // Chunk c's run scales dl0, dl1 (d times the int8 scale of k = kk, kk + 2) and the shifts
    // sh0, sh1 of the runs' 2-bit high parts in the qh bytes.
    static LOOM_DEV void run_scales(const Raw& r, int c, float& dl0, float& dl1, int& sh0, int& sh1) {
        const int j = c & 7;
        const int kk = (j >> 1) & 1, h = j & 1;
        const int e0 = (2 * kk + h) & 3;  // byte of idx0 within its word
        const float d = h2f(r.d);
        dl0 = d * static_cast<float>(static_cast<int8_t>(byte_of(r.s0, e0)));
        dl1 = d * static_cast<float>(static_cast<int8_t>(byte_of(r.s1, e0)));
        sh0 = 2 * kk, sh1 = 2 * kk + 4;
    }
    // Chunk c's run scales and its 6-bit quants q + 32, four a word: q0[i] byte e is element
    // 4i + e of run 0, q1[i] of run 1.
    static LOOM_DEV void unpack(const Raw& r, int c, float& dl0, float& dl1, uint32_t (&q0)[4], uint32_t (&q1)[4]) {
        int sh0, sh1;
        run_scales(r, c, dl0, dl1, sh0, sh1);
        const uint32_t wl[4] = {r.ql.x, r.ql.y, r.ql.z, r.ql.w};
        const uint32_t wh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            q0[i] = (wl[i] & 0x0F0F0F0Fu) | (((wh[i] >> sh0) & 0x03030303u) << 4);
            q1[i] = ((wl[i] >> 4) & 0x0F0F0F0Fu) | (((wh[i] >> sh1) & 0x03030303u) << 4);
        }
    }
    static constexpr bool kSums = false;
    // d * scale * sum (q_i - 32) x_i per run (q - 32 through byte_minus: exact, no I2F).
    static LOOM_DEV float dot(const Raw& r, int c, const float* xv, const float*) {
        float dl0, dl1;
        uint32_t q0[4], q1[4];
        unpack(r, c, dl0, dl1, q0, q1);
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                a0 += byte_minus(q0[i], e, 32.0f) * xv[4 * i + e];
                a1 += byte_minus(q1[i], e, 32.0f) * xv[16 + 4 * i + e];
            }
        return dl0 * a0 + dl1 * a1;
    }
    static LOOM_DEV void decode(const Raw& r, int c, float* v) {
        float dl0, dl1;
        uint32_t q0[4], q1[4];
        unpack(r, c, dl0, dl1, q0, q1);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                v[4 * i + e] = dl0 * byte_minus(q0[i], e, 32.0f);
                v[16 + 4 * i + e] = dl1 * byte_minus(q1[i], e, 32.0f);
            }
    }
};

/// Zeroes the elements of a plain-type chunk that lie past the end of the row.
template <class C>
LOOM_DEV void mask_tail(int c, int cols, float* v) {
    if constexpr (C::kPlain) {
        if (C::kElems * c + C::kElems > cols) {
#pragma unroll
            for (int i = 0; i < C::kElems; ++i)
                if (C::kElems * c + i >= cols) v[i] = 0.0f;
        }
    }
}

/// The activations matching chunk c's elements (zero past cols), normalised as x * scale * w
/// when nw (RMSNorm weights) is set.
template <class C>
LOOM_DEV void load_x(const float* __restrict__ x, int c, int cols, float* xv, const float* __restrict__ nw,
                     float scale) {
#pragma unroll
    for (int run = 0; run < C::kRuns; ++run) {
        const int s0 = C::run_start(c, run);
        if (!C::kPlain || s0 + C::kRunLen <= cols) {
#pragma unroll
            for (int i = 0; i < C::kRunLen; i += 4) {
                const float4 f = *reinterpret_cast<const float4*>(x + s0 + i);
                float* o = xv + run * C::kRunLen + i;
                if (nw) {
                    const float4 g = *reinterpret_cast<const float4*>(nw + s0 + i);
                    o[0] = f.x * scale * g.x, o[1] = f.y * scale * g.y, o[2] = f.z * scale * g.z;
                    o[3] = f.w * scale * g.w;
                } else {
                    o[0] = f.x, o[1] = f.y, o[2] = f.z, o[3] = f.w;
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < C::kRunLen; ++i)
                xv[run * C::kRunLen + i] = s0 + i < cols ? (nw ? x[s0 + i] * scale * nw[s0 + i] : x[s0 + i]) : 0.0f;
        }
    }
}

// Row contribution of chunk c: Q8_0's and Q6_K's dot(), or for the plain types
// decode-then-multiply with the weights past cols zeroed.
template <class C>
LOOM_DEV float chunk_dot(const typename C::Raw& raw, int c, int cols, const float* xv, const float* sx) {
    if constexpr (C::kPlain) {
        float w[C::kElems];
        C::decode(raw, c, w);
        mask_tail<C>(c, cols, w);
        float sdot = 0.0f;
#pragma unroll
        for (int i = 0; i < C::kElems; ++i) sdot += w[i] * xv[i];
        return sdot;
    } else {
        return C::dot(raw, c, xv, sx);
    }
}

// Per-run sums of the activations (for types with a min offset, Q4_K).
template <class C>
LOOM_DEV void run_sums(const float* xv, float* sx) {
#pragma unroll
    for (int run = 0; run < C::kRuns; ++run) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < C::kRunLen; ++i) s += xv[run * C::kRunLen + i];
        sx[run] = s;
    }
}

// Q4_K, per thread: byte selectors and masks that give the packed 6-bit scales and mins of the
// thread's sub-block pair p (fixed per thread: chunk c = t + 128 k has c % 8 = t % 8) from the
// header words y (scales[0..3]), z (scales[4..7]) and w (scales[8..11]) without branches.
struct Q4Sel {
    uint32_t sel_s, sel_m, mask_a, mask_b, shift_a;
};
LOOM_DEV Q4Sel q4_sel(int p) {
    Q4Sel s;
    if (p < 2) {  // sub-blocks 2p, 2p+1 < 4: scales[2p..] & 63, mins scales[4 + 2p..] & 63
        s.sel_s = s.sel_m = static_cast<uint32_t>(2 * p) | (static_cast<uint32_t>(2 * p + 1) << 4);
        s.mask_a = 0x3F3Fu;
        s.mask_b = 0u;
        s.shift_a = 0u;
    } else {  // low 4 bits from scales[8 + i..] (low / high nibble), top 2 from the bytes' bits 6-7
        const uint32_t i = static_cast<uint32_t>(2 * p - 4);
        s.sel_s = s.sel_m = (4u + i) | ((5u + i) << 4) | (i << 8) | ((i + 1u) << 12);
        s.mask_a = 0x0F0Fu;
        s.mask_b = 0x3030u;
        s.shift_a = 4u;
    }
    return s;
}

// Q4_K chunk dot product (the matvec kernel). xv are the chunk's activations times 2^64, sx
// the runs' sums (unscaled). Each nibble is masked in place and used as the bits of a float: a
// denormal q * 2^(k - 149) for a nibble at bit k (k = 0, 4, 8, 12 of the word or of its upper
// half), which is exact, so each product is q * x times a power of two, rounded once; four
// accumulators keep one k each and are combined with exact power-of-two factors. One LOP3 and
// one FFMA per weight (a magic-number float conversion takes a PRMT, an FADD and an FFMA). The
// 2^64 keeps the products normal floats for |x| >= 2^-41 (smaller activations contribute below
// 1e-11 each and lose bits gradually) and cannot overflow for |x| < 2^63. Needs denormals kept
// (no -ftz / fast math).
LOOM_DEV float q4_dot1(const Chunk<kQ4_K>::Raw& r, const float* xv, const float* sx, const Q4Sel& sel) {
    const uint32_t w4[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    float a0 = 0.0f, a8 = 0.0f, b4 = 0.0f, b12 = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t w = w4[i], u = w >> 16;
        a0 = fmaf(__uint_as_float(w & 0xFu), xv[4 * i + 0], a0);
        b4 = fmaf(__uint_as_float(w & 0xF0u), xv[16 + 4 * i + 0], b4);
        a8 = fmaf(__uint_as_float(w & 0xF00u), xv[4 * i + 1], a8);
        b12 = fmaf(__uint_as_float(w & 0xF000u), xv[16 + 4 * i + 1], b12);
        a0 = fmaf(__uint_as_float(u & 0xFu), xv[4 * i + 2], a0);
        b4 = fmaf(__uint_as_float(u & 0xF0u), xv[16 + 4 * i + 2], b4);
        a8 = fmaf(__uint_as_float(u & 0xF00u), xv[4 * i + 3], a8);
        b12 = fmaf(__uint_as_float(u & 0xF000u), xv[16 + 4 * i + 3], b12);
    }
    // With x' = x * 2^64: q0 = sum over run 0 of q x * 2^-77, q1 = sum over run 1 of q x * 2^-73.
    const float q0 = fmaf(a0, 256.0f, a8);
    const float q1 = fmaf(b4, 256.0f, b12);
    const float d = h2f(static_cast<uint16_t>(r.h.x & 0xFFFFu));
    const float dmin = h2f(static_cast<uint16_t>(r.h.x >> 16));
    const uint32_t qs = __byte_perm(r.h.y, r.h.w, sel.sel_s);
    const uint32_t qm = __byte_perm(r.h.z, r.h.w, sel.sel_m);
    const uint32_t sc = (qs & sel.mask_a) | ((qs >> 18) & sel.mask_b);
    const uint32_t mn = ((qm >> sel.shift_a) & sel.mask_a) | ((qm >> 18) & sel.mask_b);
    const float dd = d * 0x1p73f;  // exact
    const float t0 = dd * byte_as_float(sc, 0), t1 = dd * byte_as_float(sc, 1);
    const float nmin = fmaf(dmin * byte_as_float(mn, 0), sx[0], dmin * byte_as_float(mn, 1) * sx[1]);
    return fmaf(t0, q0 * 16.0f, fmaf(t1, q1, -nmin));
}

// Q6_K chunk dot product by the same denormal trick (the single-vector kernel, k_matvec1.cu).
// xv are chunk c's activations times 2^64 (run 0, then run 1), sx the runs' sums (unscaled).
// Each word's 6-bit quants are assembled by one bit select of the low nibbles (ql) and the
// qh bits shifted to bits 4-5 (bits 6-7 of a byte then hold other bits, which the per-element
// masks drop); an element masked in place at bit 0 or 8 of the word (or of its upper half) is
// the float q * 2^(k - 149), exact, so sum q x' is accumulated by one LOP3 and one FFMA a
// weight, and sum (q - 32) x = sum q x - 32 sum x per run with d times the run's int8 scale.
LOOM_DEV float q6_dot1(const Chunk<kQ6_K>::Raw& r, int c, const float* xv, const float* sx) {
    const int kk = ((c & 7) >> 1) & 1;
    const uint32_t wl[4] = {r.ql.x, r.ql.y, r.ql.z, r.ql.w};
    const uint32_t wh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
    float a0 = 0.0f, a8 = 0.0f, b0 = 0.0f, b8 = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        // Run 0: qh bits 2kk, 2kk + 1 of each byte to bits 4-5; run 1: bits 2kk + 4, 2kk + 5.
        const uint32_t h0 = kk ? wh[i] << 2 : wh[i] << 4, h1 = kk ? wh[i] >> 2 : wh[i];
        const uint32_t q0 = (wl[i] & 0x0F0F0F0Fu) | (h0 & 0xF0F0F0F0u);
        const uint32_t q1 = ((wl[i] >> 4) & 0x0F0F0F0Fu) | (h1 & 0xF0F0F0F0u);
        const uint32_t u0 = q0 >> 16, u1 = q1 >> 16;
        a0 = fmaf(__uint_as_float(q0 & 0x3Fu), xv[4 * i + 0], a0);
        a8 = fmaf(__uint_as_float(q0 & 0x3F00u), xv[4 * i + 1], a8);
        a0 = fmaf(__uint_as_float(u0 & 0x3Fu), xv[4 * i + 2], a0);
        a8 = fmaf(__uint_as_float(u0 & 0x3F00u), xv[4 * i + 3], a8);
        b0 = fmaf(__uint_as_float(q1 & 0x3Fu), xv[16 + 4 * i + 0], b0);
        b8 = fmaf(__uint_as_float(q1 & 0x3F00u), xv[16 + 4 * i + 1], b8);
        b0 = fmaf(__uint_as_float(u1 & 0x3Fu), xv[16 + 4 * i + 2], b0);
        b8 = fmaf(__uint_as_float(u1 & 0x3F00u), xv[16 + 4 * i + 3], b8);
    }
    // With x' = x * 2^64: s0, s1 = sum over the run of q x * 2^-77.
    const float s0 = fmaf(a0, 256.0f, a8), s1 = fmaf(b0, 256.0f, b8);
    float dl0, dl1;
    int sh0, sh1;
    Chunk<kQ6_K>::run_scales(r, c, dl0, dl1, sh0, sh1);
    const float off = fmaf(dl0 * 32.0f, sx[0], dl1 * 32.0f * sx[1]);
    return fmaf(dl0 * 0x1p77f, s0, fmaf(dl1 * 0x1p77f, s1, -off));
}

}  // namespace
}  // namespace loom::gpu
