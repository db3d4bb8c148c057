// Decode matrix-vector products over device weights (F32, F16, BF16, Q8_0, Q4_K, Q6_K), with the
// quantized blocks dequantized in registers, and the row dequantizers built from the same code.
//
// Block layouts follow ggml-common.h as the GGUF format stores them (model/quant_blocks.hpp
// documents each); the device layouts are those of DevMatrix (kernels.hpp). A row is read in
// "chunks": 16-byte loads that each thread issues for several rows before it uses any of them,
// so that many loads are in flight (the CUDA C++ Best Practices Guide, "Coalesced Access to
// Global Memory"), and a chunk decodes to kRuns runs of kRunLen consecutive elements.
#include <algorithm>

#include "engine/backends/cuda/kernels.hpp"

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

template <uint32_t T>
struct Chunk;

/// F16: 8 elements per 16-byte chunk.
template <>
struct Chunk<kF16> {
    static constexpr int kElems = 8, kRuns = 1, kRunLen = 8;
    static constexpr bool kPlain = true;
    static constexpr bool kSums = false;
    struct Raw {
        uint4 q;
    };
    static LOOM_DEV int count(int cols) { return (cols + 7) >> 3; }
    static LOOM_DEV int run_start(int c, int) { return 8 * c; }
    static LOOM_DEV void load(const uint8_t* row, int c, int, Raw& r) { r.q = ld16(row + 16 * c); }
    static LOOM_DEV void decode(const Raw& r, int, float* v) {
        const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = h2f(static_cast<uint16_t>(w[i] & 0xFFFFu));
            v[2 * i + 1] = h2f(static_cast<uint16_t>(w[i] >> 16));
        }
    }
};

/// BF16: 8 elements per 16-byte chunk.
template <>
struct Chunk<kBF16> {
    static constexpr int kElems = 8, kRuns = 1, kRunLen = 8;
    static constexpr bool kPlain = true;
    static constexpr bool kSums = false;
    struct Raw {
        uint4 q;
    };
    static LOOM_DEV int count(int cols) { return (cols + 7) >> 3; }
    static LOOM_DEV int run_start(int c, int) { return 8 * c; }
    static LOOM_DEV void load(const uint8_t* row, int c, int, Raw& r) { r.q = ld16(row + 16 * c); }
    static LOOM_DEV void decode(const Raw& r, int, float* v) {
        const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = __uint_as_float(w[i] << 16);
            v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
    }
};

/// F32: 8 elements per chunk (two 16-byte loads).
template <>
struct Chunk<kF32> {
    static constexpr int kElems = 8, kRuns = 1, kRunLen = 8;
    static constexpr bool kPlain = true;
    static constexpr bool kSums = false;
    struct Raw {
        uint4 a, b;
    };
    static LOOM_DEV int count(int cols) { return (cols + 7) >> 3; }
    static LOOM_DEV int run_start(int c, int) { return 8 * c; }
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

/// Q8_0 (split layout): chunk c is block c, 32 int8 quants times the half scale d.
template <>
struct Chunk<kQ8_0> {
    static constexpr int kElems = 32, kRuns = 1, kRunLen = 32;
    static constexpr bool kPlain = false;
    struct Raw {
        uint4 q0, q1;
        uint16_t d;
    };
    static LOOM_DEV int count(int cols) { return cols >> 5; }
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
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                v[4 * i + e] = d * static_cast<float>(static_cast<int8_t>(byte_of(w[i], e)));
    }
};

/// Q4_K (144-byte blocks): chunk c is 16 quant bytes j = c % 8 of block c / 8 plus the block's
/// 16-byte header {d, dmin, scales[12]}; low nibbles are elements 64(j/2) + 16(j%2) + i of the
/// block (sub-block 2(j/2)), high nibbles 32 further (sub-block 2(j/2) + 1).
template <>
struct Chunk<kQ4_K> {
    static constexpr int kElems = 32, kRuns = 2, kRunLen = 16;
    static constexpr bool kPlain = false;
    struct Raw {
        uint4 q, h;
    };
    static LOOM_DEV int count(int cols) { return cols >> 5; }
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
    static constexpr bool kSums = true;
    // d0 * sum q_i x_i - n0 * sum x_i per run (sx holds the runs' sums of x).
    static LOOM_DEV float dot(const Raw& r, int c, const float* xv, const float* sx) {
        const float d = h2f(static_cast<uint16_t>(r.h.x & 0xFFFFu));
        const float dmin = h2f(static_cast<uint16_t>(r.h.x >> 16));
        const int sb = 2 * ((c & 7) >> 1);
        int s0, m0, s1, m1;
        scale_min(r.h, sb, s0, m0);
        scale_min(r.h, sb + 1, s1, m1);
        const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t lo = w[i] & 0x0F0F0F0Fu, hi = (w[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                a0 += byte_as_float(lo, e) * xv[4 * i + e];
                a1 += byte_as_float(hi, e) * xv[16 + 4 * i + e];
            }
        }
        return d * static_cast<float>(s0) * a0 - dmin * static_cast<float>(m0) * sx[0] +
               d * static_cast<float>(s1) * a1 - dmin * static_cast<float>(m1) * sx[1];
    }
    static LOOM_DEV void decode(const Raw& r, int c, float* v) {
        const float d = h2f(static_cast<uint16_t>(r.h.x & 0xFFFFu));
        const float dmin = h2f(static_cast<uint16_t>(r.h.x >> 16));
        const int sb = 2 * ((c & 7) >> 1);
        int s0, m0, s1, m1;
        scale_min(r.h, sb, s0, m0);
        scale_min(r.h, sb + 1, s1, m1);
        const float d0 = d * static_cast<float>(s0), n0 = dmin * static_cast<float>(m0);
        const float d1 = d * static_cast<float>(s1), n1 = dmin * static_cast<float>(m1);
        const uint32_t w[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const uint32_t b = byte_of(w[i], e);
                v[4 * i + e] = d0 * static_cast<float>(b & 0xFu) - n0;
                v[16 + 4 * i + e] = d1 * static_cast<float>(b >> 4) - n1;
            }
    }
};

/// Q6_K (224-byte padded blocks): chunk c is j = c % 8 of block c / 8 with n = j/4, kk = (j/2)%2,
/// h = j%2: ql bytes 16j..16j+15 (low nibbles: elements 128n + 32kk + 16h + i, high nibbles:
/// 64 further) and qh bytes 32n + 16h + i (bits 2k..2k+1 for k = kk and kk + 2).
template <>
struct Chunk<kQ6_K> {
    static constexpr int kElems = 32, kRuns = 2, kRunLen = 16;
    static constexpr bool kPlain = false;
    struct Raw {
        uint4 ql, qh;
        uint32_t s0, s1;
        uint16_t d;
    };
    static LOOM_DEV int count(int cols) { return cols >> 5; }
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
    static constexpr bool kSums = false;
    // d * scale * sum (q_i - 32) x_i per run, the 6-bit q assembled four at a time.
    static LOOM_DEV float dot(const Raw& r, int c, const float* xv, const float*) {
        const int j = c & 7;
        const int kk = (j >> 1) & 1, h = j & 1;
        const int e0 = (2 * kk + h) & 3;
        const float d = h2f(r.d);
        const float dl0 = d * static_cast<float>(static_cast<int8_t>(byte_of(r.s0, e0)));
        const float dl1 = d * static_cast<float>(static_cast<int8_t>(byte_of(r.s1, e0)));
        const uint32_t wl[4] = {r.ql.x, r.ql.y, r.ql.z, r.ql.w};
        const uint32_t wh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
        const int sh0 = 2 * kk, sh1 = 2 * kk + 4;
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t q0 = (wl[i] & 0x0F0F0F0Fu) | (((wh[i] >> sh0) & 0x03030303u) << 4);
            const uint32_t q1 = ((wl[i] >> 4) & 0x0F0F0F0Fu) | (((wh[i] >> sh1) & 0x03030303u) << 4);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                a0 += byte_minus(q0, e, 32.0f) * xv[4 * i + e];
                a1 += byte_minus(q1, e, 32.0f) * xv[16 + 4 * i + e];
            }
        }
        return dl0 * a0 + dl1 * a1;
    }
    static LOOM_DEV void decode(const Raw& r, int c, float* v) {
        const int j = c & 7;
        const int kk = (j >> 1) & 1, h = j & 1;
        const int e0 = (2 * kk + h) & 3;  // byte of idx0 within its word
        const float d = h2f(r.d);
        const float dl0 = d * static_cast<float>(static_cast<int8_t>(byte_of(r.s0, e0)));
        const float dl1 = d * static_cast<float>(static_cast<int8_t>(byte_of(r.s1, e0)));
        const uint32_t wl[4] = {r.ql.x, r.ql.y, r.ql.z, r.ql.w};
        const uint32_t wh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
        const int sh0 = 2 * kk, sh1 = 2 * kk + 4;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const uint32_t lo = byte_of(wl[i], e), hi = byte_of(wh[i], e);
                const int q0 = static_cast<int>((lo & 0xFu) | (((hi >> sh0) & 3u) << 4));
                const int q1 = static_cast<int>((lo >> 4) | (((hi >> sh1) & 3u) << 4));
                v[4 * i + e] = dl0 * static_cast<float>(q0 - 32);
                v[16 + 4 * i + e] = dl1 * static_cast<float>(q1 - 32);
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
                xv[run * C::kRunLen + i] =
                    s0 + i < cols ? (nw ? x[s0 + i] * scale * nw[s0 + i] : x[s0 + i]) : 0.0f;
        }
    }
}

// Row contribution of chunk c: the quantized types' dot(), or decode-then-multiply.
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

constexpr int kMvThreads = 128;

// Locates logical row o of a (non-SwiGLU) launch: its segment and row within it. Segments are
// picked by selects, not by a run-time index into the parameter struct (which would copy it
// to local memory).
LOOM_DEV int seg_of(const MatvecArgs& a, int o, int& local) {
    local = o;
    if (a.nseg > 1 && local >= a.seg[0].rows) {
        local -= a.seg[0].rows;
        if (a.nseg > 2 && local >= a.seg[1].rows) {
            local -= a.seg[1].rows;
            return 2;
        }
        return 1;
    }
    return 0;
}
LOOM_DEV const uint8_t* seg_w(const MatvecArgs& a, int s) { return s == 0 ? a.seg[0].w : s == 1 ? a.seg[1].w : a.seg[2].w; }
LOOM_DEV float* seg_y(const MatvecArgs& a, int s) { return s == 0 ? a.seg[0].y : s == 1 ? a.seg[1].y : a.seg[2].y; }

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

// Q4_K chunk dot product (both matvec kernels). xv are the chunk's activations times 2^64, sx
// the runs' sums (unscaled). Each nibble is masked in place and used as the bits of a float: a
// denormal q * 2^(k - 149) for a nibble at bit k (k = 0, 4, 8, 12 of the word or of its upper
// half), which is exact, so each product is q * x times a power of two, rounded once, as in
// Chunk<kQ4_K>::dot; four accumulators keep one k each and are combined with exact power-of-two
// factors. One LOP3 and one FFMA per weight, against a PRMT, an FADD and an FFMA there. The 2^64
// keeps the products normal floats for |x| >= 2^-41 (smaller activations contribute below 1e-11
// each and lose bits gradually) and cannot overflow for |x| < 2^63. Needs denormals kept
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

// Writes row `local` of segment s for activation vector b: a plain store or residual add, or
// (seg_role, decode) RoPE on the pair (v, vp) where vp is the partner row's sum, and the q
// store or K/V cache store at slots[b]'s position, as rope_store computes them.
LOOM_DEV void store_row(const MatvecArgs& a, int s, int local, int b, float v, float vp) {
    const int role = s == 0 ? a.seg_role[0] : s == 1 ? a.seg_role[1] : a.seg_role[2];
    if (role == 0) {
        float* y = seg_y(a, s) + b * a.y_stride + local;
        if (a.mode == MvMode::Add) *y += v;
        else *y = v;
        return;
    }
    const SlotDesc& slot = a.slots[b];
    const int pos = slot.pos;
    float out = v;
    const int i = local % a.head_dim;
    if (role != 3 && i < a.rope_dim) {
        const int half = a.rope_dim / 2, ip = i / 2;
        const float cs = a.rope_cs[(int64_t{pos} * half + ip) * 2], sn = a.rope_cs[(int64_t{pos} * half + ip) * 2 + 1];
        if ((i & 1) == 0) {
            const float x0 = v, x1 = vp;
            out = x0 * cs - x1 * sn;
        } else {
            const float x0 = vp, x1 = v;
            out = x0 * sn + x1 * cs;
        }
    }
    if (role == 1) {
        seg_y(a, s)[b * a.y_stride + local] = out;
    } else {
        const int64_t off =
            ((static_cast<int64_t>(a.layer) * 2 + (role == 2 ? 0 : 1)) * slot.cap + pos) * a.kv_dim + local;
        if (a.kv_f16) static_cast<uint16_t*>(slot.kv)[off] = f2h(out);
        else static_cast<float*>(slot.kv)[off] = out;
    }
}

/// One block computes R weight rows (R/2 outputs in SwiGLU mode) for NB activation vectors.
template <uint32_t T, int NB, int R>
__global__ void __launch_bounds__(kMvThreads) matvec_kernel(MatvecArgs a) {
    using C = Chunk<T>;
    const bool swiglu = a.mode == MvMode::SwiGLU;
    const int per_block = swiglu ? R / 2 : R;
    const int o0 = static_cast<int>(blockIdx.x) * per_block;
    const int total = swiglu ? a.seg[0].rows
                             : a.seg[0].rows + (a.nseg > 1 ? a.seg[1].rows : 0) + (a.nseg > 2 ? a.seg[2].rows : 0);

    const uint8_t* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        int local, s;
        if (swiglu) {
            local = o0 + (r % (R / 2));
            s = r < R / 2 ? 0 : 1;
        } else {
            s = seg_of(a, o0 + r, local);
        }
        const bool valid = (swiglu ? local : o0 + r) < total;
        wr[r] = valid ? seg_w(a, s) + static_cast<size_t>(local) * a.row_bytes : a.seg[0].w;
    }

    constexpr int kWarps = kMvThreads / kWarp;
    // Fused RMSNorm: every block computes the scale of each activation vector.
    __shared__ float s_scale[NB];
    if (a.norm_w) {
        __shared__ double s_red[kWarps];
        for (int b = 0; b < a.nb && b < NB; ++b) {
            const float* xb = a.x + b * a.x_stride;
            double ss = 0;
#pragma unroll 8
            for (int i = static_cast<int>(threadIdx.x); i < a.cols; i += kMvThreads)
                ss += static_cast<double>(xb[i]) * xb[i];
            ss = warp_sum_d(ss);
            if (static_cast<int>(threadIdx.x) % kWarp == 0) s_red[threadIdx.x / kWarp] = ss;
            __syncthreads();
            if (threadIdx.x == 0) {
                double t = 0;
                for (int w = 0; w < kWarps; ++w) t += s_red[w];
                s_scale[b] = static_cast<float>(1.0 / sqrt(t / a.cols + static_cast<double>(a.norm_eps)));
            }
            __syncthreads();
        }
    }

    float acc[R][NB];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < NB; ++b) acc[r][b] = 0.0f;

    const int nch = C::count(a.cols);
    Q4Sel q4s{};
    if constexpr (T == kQ4_K) q4s = q4_sel((static_cast<int>(threadIdx.x) & 7) >> 1);  // c % 8 == t % 8
    for (int c = static_cast<int>(threadIdx.x); c < nch; c += kMvThreads) {
        typename C::Raw raw[R];
#pragma unroll
        for (int r = 0; r < R; ++r) C::load(wr[r], c, a.cols, raw[r]);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            if (b < a.nb) {
                float xv[C::kElems], sx[C::kRuns];
                load_x<C>(a.x + b * a.x_stride, c, a.cols, xv, a.norm_w, a.norm_w ? s_scale[b] : 1.0f);
                if constexpr (C::kSums) run_sums<C>(xv, sx);
                if constexpr (T == kQ4_K) {
                    if (!a.q4_magic) {  // the denormal-nibble dot product (q4_dot1)
#pragma unroll
                        for (int i = 0; i < C::kElems; ++i) xv[i] *= 0x1p64f;  // exact
#pragma unroll
                        for (int r = 0; r < R; ++r) acc[r][b] += q4_dot1(raw[r], xv, sx, q4s);
                        continue;
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r][b] += chunk_dot<C>(raw[r], c, a.cols, xv, sx);
            }
        }
    }

    __shared__ float red[R * NB][kWarps];
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const float v = warp_sum(acc[r][b]);
            if (lane == 0) red[r * NB + b][warp] = v;
        }
    __syncthreads();
    const int t = static_cast<int>(threadIdx.x);
    if (swiglu) {
        if (t < (R / 2) * NB) {
            const int r = t / NB, b = t % NB;
            const int o = o0 + r;
            if (o < total && b < a.nb) {
                float g = 0.0f, u = 0.0f;
                for (int w = 0; w < kWarps; ++w) {
                    g += red[r * NB + b][w];
                    u += red[(r + R / 2) * NB + b][w];
                }
                a.seg[0].y[b * a.y_stride + o] = g / (1.0f + expf(-g)) * u;
            }
        }
    } else if (t < R * NB) {
        const int r = t / NB, b = t % NB;
        const int o = o0 + r;
        if (o < total && b < a.nb) {
            float v = 0.0f, vp = 0.0f;
            for (int w = 0; w < kWarps; ++w) v += red[r * NB + b][w];
            for (int w = 0; w < kWarps; ++w) vp += red[(r ^ 1) * NB + b][w];  // RoPE partner (o0 is even)
            int local;
            const int s = seg_of(a, o, local);
            store_row(a, s, local, b, v, vp);
        }
    }
}

template <uint32_t T, int NB>
void launch_matvec(const MatvecArgs& a, gpuStream_t s) {
    constexpr int R = NB == 1 ? 8 : 4;
    int total = 0;
    for (int i = 0; i < a.nseg; ++i) total += a.seg[i].rows;
    const int per_block = a.mode == MvMode::SwiGLU ? R / 2 : R;
    if (a.mode == MvMode::SwiGLU) total = a.seg[0].rows;
    const unsigned blocks = static_cast<unsigned>((total + per_block - 1) / per_block);
    auto k = matvec_kernel<T, NB, R>;
    LOOM_LAUNCH(k, blocks, kMvThreads, 0, s, a);
    LOOM_GPU_CHECK_LAUNCH();
}

template <uint32_t T>
void matvec_nb(const MatvecArgs& a, gpuStream_t s) {
    if (a.nb <= 1) launch_matvec<T, 1>(a, s);
    else if (a.nb <= 2) launch_matvec<T, 2>(a, s);
    else if (a.nb <= 4) launch_matvec<T, 4>(a, s);
    else launch_matvec<T, 8>(a, s);
}

// ---- single-vector matvec (decode of one sequence; opt-in, LOOM_GPU_MV1=1) ----------------
//
// An alternative to matvec_kernel for nb == 1: each block takes a contiguous range of rows (the
// grid is sized to the resident capacity, one wave), stages the activation vector once in
// shared memory (RMSNorm applied, per-16 sums for Q4_K's minimum term), and walks its rows R at
// a time with the next item's weights already loading (double-buffered in registers); partial
// sums are reduced per warp with shuffles and combined across warps once, in an epilogue that
// can also apply RoPE and store K/V. With `pdl` it is a programmatic dependent launch that
// loads its first weights before waiting for the previous kernel.
//
// Measured on the H200 (docs/benchmarks.md, 2026-11-30) it is slower than matvec_kernel: 4
// resident blocks of 4 warps per SM (128 registers) with one item of prefetch leave most
// cycles without an eligible warp (Nsight Compute: 52-68% "no eligible", loads outstanding),
// where matvec_kernel's 3584 short blocks keep more loads in flight. It stays as a starting
// point for a deeper pipeline (e.g. bulk copies into a shared-memory ring), not as a default.

template <uint32_t T>
struct Mv1Rows {
    static constexpr int R = 4;
};
template <>
struct Mv1Rows<kF16> {
    static constexpr int R = 8;
};
template <>
struct Mv1Rows<kBF16> {
    static constexpr int R = 8;
};
template <>
struct Mv1Rows<kQ6_K> {
    static constexpr int R = 2;
};

/// Launch geometry of the single-vector kernel (computed on the host).
struct Mv1Plan {
    int units = 0;       ///< rows (Store/Add, over all segments) or outputs (SwiGLU)
    int pairs = 0;       ///< (units + 1) / 2: blocks take even-aligned unit ranges
    int nch = 0;         ///< chunks per row
    int kc = 0;          ///< chunks per thread per row
    int cols_pad = 0;    ///< staged activations (nch * elements per chunk, zero-padded)
    int red_groups = 0;  ///< row groups of the largest block range
};

/// Sum over the warp of each of v[0..R-1] (R a power of two <= the warp): lane l returns the
/// sum of v[l / (kWarp / R)]. R/2 + R/4 + ... + 1 exchanges halve the values each lane holds, then
/// log2(kWarp / R) more finish the sums (R - 1 + log2(kWarp / R) shuffles instead of R log2 kWarp).
template <int R>
LOOM_DEV float warp_sum_rows(float (&v)[R], int lane) {
    int m = kWarp / 2;
#pragma unroll
    for (int half = R / 2; half >= 1; half /= 2, m /= 2) {
        const bool up = (lane & m) != 0;
#pragma unroll
        for (int i = 0; i < half; ++i) {
            const float send = up ? v[i] : v[i + half];
            const float keep = up ? v[i + half] : v[i];
            v[i] = keep + shfl_xor(send, m);
        }
    }
    float r = v[0];
    for (; m >= 1; m /= 2) r += shfl_xor(r, m);
    return r;
}

template <uint32_t T, int R>
__global__ void __launch_bounds__(kMvThreads, 4) mv1_kernel(MatvecArgs a, Mv1Plan p) {
    using C = Chunk<T>;
    constexpr bool kQ4 = T == kQ4_K;
    constexpr int kWarps = kMvThreads / kWarp;
    pdl_trigger();
    LOOM_DYN_SMEM(float, smem);
    float* xs = smem;
    float* sums = xs + p.cols_pad;
    float* red = sums + (kQ4 ? p.cols_pad / 16 : 0);

    const bool swiglu = a.mode == MvMode::SwiGLU;
    const int per = swiglu ? R / 2 : R;  // units per row group
    const int G = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    const int u0 = min(2 * static_cast<int>(static_cast<int64_t>(b) * p.pairs / G), p.units);
    const int u1 = min(2 * static_cast<int>(static_cast<int64_t>(b + 1) * p.pairs / G), p.units);
    const int ngr = (u1 - u0 + per - 1) / per;
    const int kc = p.kc, nch = p.nch, cols = a.cols;
    const int t = static_cast<int>(threadIdx.x);
    const int lane = t % kWarp, warp = t / kWarp;
    const int nitems = ngr * kc;

    // Row pointers of a row group, computed once per group; rows past the block's range point at
    // the group's first row (loaded again, their sums never stored).
    auto group_rows = [&](int gi, const uint8_t** w) {
        const int o0 = u0 + gi * per;
        if (swiglu) {
            const size_t off = static_cast<size_t>(o0) * a.row_bytes;
#pragma unroll
            for (int r = 0; r < R / 2; ++r) {
                const size_t ro = o0 + r < u1 ? off + static_cast<size_t>(r) * a.row_bytes : off;
                w[r] = a.seg[0].w + ro;
                w[r + R / 2] = a.seg[1].w + ro;
            }
            return;
        }
        int local;
        const int s0 = seg_of(a, o0, local);
        const int seg_rows = s0 == 0 ? a.seg[0].rows : s0 == 1 ? a.seg[1].rows : a.seg[2].rows;
        const uint8_t* base = seg_w(a, s0) + static_cast<size_t>(local) * a.row_bytes;
        if (local + R <= seg_rows) {  // the usual case: the group lies in one segment
#pragma unroll
            for (int r = 0; r < R; ++r) w[r] = o0 + r < u1 ? base + static_cast<size_t>(r) * a.row_bytes : base;
            return;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (o0 + r < u1) {
                int lr;
                const int sr = seg_of(a, o0 + r, lr);
                w[r] = seg_w(a, sr) + static_cast<size_t>(lr) * a.row_bytes;
            } else {
                w[r] = base;
            }
        }
    };
    // Loads walk the items one ahead of the arithmetic: (group, chunk) cursors and pointers.
    const uint8_t* lw[R];
    int lg = 0, lk = 0;
    auto load_next = [&](typename C::Raw* buf) {
        if (lk == 0) group_rows(lg, lw);
        const int c = t + kMvThreads * lk;
        if (c < nch) {
#pragma unroll
            for (int r = 0; r < R; ++r) C::load(lw[r], c, cols, buf[r]);
        }
        if (++lk == kc) lk = 0, ++lg;
    };

    typename C::Raw ra[R] = {}, rb[R] = {};
    if (nitems > 0) load_next(ra);  // weights do not depend on the previous kernel
    pdl_wait();

    // Stage the activations (RMSNorm applied when norm_w is set, as rmsnorm() computes it).
    const float* xg = a.x;
    const bool vec = (cols & 3) == 0;
    if (a.norm_w) {
        __shared__ double s_red[kWarps];
        __shared__ float s_scale;
        double ss = 0;
        if (vec) {
            for (int i = t; i < cols / 4; i += kMvThreads) {
                const float4 f = reinterpret_cast<const float4*>(xg)[i];
                reinterpret_cast<float4*>(xs)[i] = f;
                ss += static_cast<double>(f.x) * f.x + static_cast<double>(f.y) * f.y +
                      static_cast<double>(f.z) * f.z + static_cast<double>(f.w) * f.w;
            }
        } else {
            for (int i = t; i < cols; i += kMvThreads) {
                const float f = xg[i];
                xs[i] = f;
                ss += static_cast<double>(f) * f;
            }
        }
        ss = warp_sum_d(ss);
        if (lane == 0) s_red[warp] = ss;
        __syncthreads();
        if (t == 0) {
            double tot = 0;
            for (int w = 0; w < kWarps; ++w) tot += s_red[w];
            s_scale = static_cast<float>(1.0 / sqrt(tot / cols + static_cast<double>(a.norm_eps)));
        }
        __syncthreads();
        const float scale = s_scale;
        const float* nw = a.norm_w;
        if (vec) {
            for (int i = t; i < cols / 4; i += kMvThreads) {
                float4 f = reinterpret_cast<float4*>(xs)[i];
                const float4 g = reinterpret_cast<const float4*>(nw)[i];
                f.x = f.x * scale * g.x, f.y = f.y * scale * g.y, f.z = f.z * scale * g.z, f.w = f.w * scale * g.w;
                reinterpret_cast<float4*>(xs)[i] = f;
            }
        } else {
            for (int i = t; i < cols; i += kMvThreads) xs[i] = xs[i] * scale * nw[i];
        }
    } else if (vec) {
        for (int i = t; i < cols / 4; i += kMvThreads)
            reinterpret_cast<float4*>(xs)[i] = reinterpret_cast<const float4*>(xg)[i];
    } else {
        for (int i = t; i < cols; i += kMvThreads) xs[i] = xg[i];
    }
    for (int i = cols + t; i < p.cols_pad; i += kMvThreads) xs[i] = 0.0f;
    __syncthreads();
    if constexpr (kQ4) {
        for (int r = t; r < p.cols_pad / 16; r += kMvThreads) {
            float sm = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) sm += xs[16 * r + i];
            sums[r] = sm;
        }
        __syncthreads();
        for (int i = t; i < p.cols_pad; i += kMvThreads) xs[i] *= 0x1p64f;  // exact
        __syncthreads();
    }

    Q4Sel q4s{};
    if constexpr (kQ4) q4s = q4_sel((t & 7) >> 1);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;

    int cg = 0, ck = 0;  // the arithmetic's cursor
    auto compute_next = [&](const typename C::Raw* buf) {
        const int c = t + kMvThreads * ck;
        if (c < nch) {
            float xv[C::kElems];
#pragma unroll
            for (int run = 0; run < C::kRuns; ++run) {
                const int s0 = C::run_start(c, run);
#pragma unroll
                for (int i = 0; i < C::kRunLen; i += 4) {
                    const float4 f = *reinterpret_cast<const float4*>(xs + s0 + i);
                    float* o = xv + run * C::kRunLen + i;
                    o[0] = f.x, o[1] = f.y, o[2] = f.z, o[3] = f.w;
                }
            }
            if constexpr (kQ4) {
                float sx[2];
                sx[0] = sums[C::run_start(c, 0) / 16];
                sx[1] = sums[C::run_start(c, 1) / 16];
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] += q4_dot1(buf[r], xv, sx, q4s);
            } else if constexpr (C::kPlain) {  // staged activations are zero past cols
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float w[C::kElems];
                    C::decode(buf[r], c, w);
                    float sdot = 0.0f;
#pragma unroll
                    for (int i = 0; i < C::kElems; ++i) sdot += w[i] * xv[i];
                    acc[r] += sdot;
                }
            } else {
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r] += C::dot(buf[r], c, xv, nullptr);
            }
        }
        if (++ck == kc) {  // the group's last chunk: reduce its rows over the warp
            const float v = warp_sum_rows<R>(acc, lane);
            if (lane % (kWarp / R) == 0) red[(cg * R + lane / (kWarp / R)) * kWarps + warp] = v;
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = 0.0f;
            ck = 0;
            ++cg;
        }
    };

    for (int it = 0; it < nitems; it += 2) {
        if (it + 1 < nitems) load_next(rb);
        compute_next(ra);
        if (it + 2 < nitems) load_next(ra);
        if (it + 1 < nitems) compute_next(rb);
    }
    __syncthreads();

    // Epilogue: one thread per unit of the block's range.
    auto row_sum = [&](int gi, int r) {
        float v = 0.0f;
        for (int w = 0; w < kWarps; ++w) v += red[(gi * R + r) * kWarps + w];
        return v;
    };
    for (int j = t; j < u1 - u0; j += kMvThreads) {
        const int gi = j / per, r = j - gi * per, o = u0 + j;
        if (swiglu) {
            const float g = row_sum(gi, r), u = row_sum(gi, r + per);
            a.seg[0].y[o] = g / (1.0f + expf(-g)) * u;
            continue;
        }
        const float v = row_sum(gi, r);
        int local;
        const int s = seg_of(a, o, local);
        float vp = 0.0f;
        const int role = s == 0 ? a.seg_role[0] : s == 1 ? a.seg_role[1] : a.seg_role[2];
        if (role != 0) {  // RoPE partner (u0 is even)
            const int jp = j ^ 1;
            vp = row_sum(jp / per, jp - (jp / per) * per);
        }
        store_row(a, s, local, 0, v, vp);
    }
}

int device_sm_count() {
#if defined(LOOM_GPU_CUDA)
    static const int n = [] {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            v = 0;
        (void)cudaGetLastError();
        return v > 0 ? v : 1;
    }();
    return n;
#elif defined(LOOM_GPU_HIP)
    static const int n = [] {
        int dev = 0, v = 0;
        if (hipGetDevice(&dev) != hipSuccess ||
            hipDeviceGetAttribute(&v, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess)
            v = 0;
        (void)hipGetLastError();
        return v > 0 ? v : 1;
    }();
    return n;
#else
    return 3;  // the emulator: a few blocks, each with several row groups
#endif
}

template <class K>
int resident_blocks(K k, size_t smem) {
    int n = 0;
#if defined(LOOM_GPU_CUDA)
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kMvThreads, smem) != cudaSuccess) n = 1;
    (void)cudaGetLastError();
#elif defined(LOOM_GPU_HIP)
    if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kMvThreads, smem) != hipSuccess) n = 1;
    (void)hipGetLastError();
#else
    (void)k;
    (void)smem;
    n = 2;
#endif
    return n > 0 ? n : 1;
}

template <uint32_t T>
void launch_mv1(const MatvecArgs& a, gpuStream_t s) {
    constexpr int R = Mv1Rows<T>::R;
    using C = Chunk<T>;
    const bool swiglu = a.mode == MvMode::SwiGLU;
    Mv1Plan p;
    p.units = swiglu ? a.seg[0].rows : 0;
    if (!swiglu)
        for (int i = 0; i < a.nseg; ++i) p.units += a.seg[i].rows;
    if (p.units <= 0) return;
    p.pairs = (p.units + 1) / 2;
    p.nch = (a.cols + C::kElems - 1) / C::kElems;
    p.kc = (p.nch + kMvThreads - 1) / kMvThreads;
    p.cols_pad = p.nch * C::kElems;
    const int per = swiglu ? R / 2 : R;
    constexpr int kWarps = kMvThreads / kWarp;
    const size_t fixed = sizeof(float) * static_cast<size_t>(p.cols_pad + (T == kQ4_K ? p.cols_pad / 16 : 0));
    auto k = mv1_kernel<T, R>;
    auto smem_for = [&](int grid) {
        const int most = 2 * ((p.pairs + grid - 1) / grid);
        p.red_groups = (most + per - 1) / per;
        return fixed + sizeof(float) * static_cast<size_t>(p.red_groups) * R * kWarps;
    };
    const int nsm = device_sm_count();
    int grid = std::min(p.pairs, nsm * resident_blocks(k, smem_for(nsm * 4)));
    size_t smem = smem_for(grid);
    const int cap = nsm * resident_blocks(k, smem);
    if (cap < grid) {
        grid = cap;
        smem = smem_for(grid);
    }
    if (smem > 48 * 1024) LOOM_GPU_CHECK(gpuFuncSetMaxDynamicSmem(k, static_cast<int>(smem)));
    LOOM_LAUNCH_PDL(a.pdl, k, static_cast<unsigned>(grid), kMvThreads, smem, s, a, p);
    LOOM_GPU_CHECK_LAUNCH();
}

template <uint32_t T>
void matvec_t(const MatvecArgs& a, gpuStream_t s) {
    if (a.single && a.nb == 1) launch_mv1<T>(a, s);
    else matvec_nb<T>(a, s);
}

/// Row r of m (rows r0.. over gridDim.x, chunks over threads) dequantized to F16 or F32.
template <uint32_t T, class Out>
__global__ void __launch_bounds__(128) dequant_kernel(DevMatrix m, int64_t r0, const int32_t* tokens,
                                                      const SlotDesc* slots, Out* dst, int64_t ld) {
    using C = Chunk<T>;
    pdl_trigger();
    int64_t row = r0 + blockIdx.x;
    if (slots) row = slots[blockIdx.x].token;
    else if (tokens) row = tokens[blockIdx.x];
    const uint8_t* src = m.data + static_cast<size_t>(row) * m.row_bytes;
    Out* out = dst + static_cast<int64_t>(blockIdx.x) * ld;
    const int cols = static_cast<int>(m.cols);
    const int nch = C::count(cols);
    for (int c = static_cast<int>(blockIdx.y * blockDim.x + threadIdx.x); c < nch;
         c += static_cast<int>(gridDim.y * blockDim.x)) {
        typename C::Raw raw;
        C::load(src, c, cols, raw);
        float v[C::kElems];
        C::decode(raw, c, v);
#pragma unroll
        for (int run = 0; run < C::kRuns; ++run) {
            const int s0 = C::run_start(c, run);
            const bool full = s0 + C::kRunLen <= cols;
            if constexpr (sizeof(Out) == 2) {
                if (full && ld % 8 == 0) {  // 16-byte stores of 8 halves
#pragma unroll
                    for (int i = 0; i < C::kRunLen; i += 8) {
                        const float* f = v + run * C::kRunLen + i;
                        uint4 u;
                        u.x = f2h(f[0]) | (static_cast<uint32_t>(f2h(f[1])) << 16);
                        u.y = f2h(f[2]) | (static_cast<uint32_t>(f2h(f[3])) << 16);
                        u.z = f2h(f[4]) | (static_cast<uint32_t>(f2h(f[5])) << 16);
                        u.w = f2h(f[6]) | (static_cast<uint32_t>(f2h(f[7])) << 16);
                        *reinterpret_cast<uint4*>(out + s0 + i) = u;
                    }
                    continue;
                }
            }
#pragma unroll
            for (int i = 0; i < C::kRunLen; ++i) {
                if (C::kPlain && s0 + i >= cols) break;
                const float f = v[run * C::kRunLen + i];
                if constexpr (sizeof(Out) == 2) out[s0 + i] = f2h(f);
                else out[s0 + i] = f;
            }
        }
    }
}

template <class Out>
void launch_dequant(const DevMatrix& m, int64_t r0, int64_t n, const int32_t* tokens, const SlotDesc* slots, Out* dst,
                    int64_t ld, gpuStream_t s) {
    if (n <= 0) return;
    const dim3 grid(static_cast<unsigned>(n), 1);
    auto go = [&](auto k) {
        LOOM_LAUNCH(k, grid, 128, 0, s, m, r0, tokens, slots, dst, ld);
        LOOM_GPU_CHECK_LAUNCH();
    };
    switch (m.type) {
        case kF32: go(dequant_kernel<kF32, Out>); break;
        case kF16: go(dequant_kernel<kF16, Out>); break;
        case kBF16: go(dequant_kernel<kBF16, Out>); break;
        case kQ8_0: go(dequant_kernel<kQ8_0, Out>); break;
        case kQ4_K: go(dequant_kernel<kQ4_K, Out>); break;
        case kQ6_K: go(dequant_kernel<kQ6_K, Out>); break;
        default: throw GpuError("dequant: unsupported type " + std::to_string(m.type));
    }
}

}  // namespace

void matvec(const MatvecArgs& a, gpuStream_t s) {
    switch (a.type) {
        case kF32: matvec_t<kF32>(a, s); break;
        case kF16: matvec_t<kF16>(a, s); break;
        case kBF16: matvec_t<kBF16>(a, s); break;
        case kQ8_0: matvec_t<kQ8_0>(a, s); break;
        case kQ4_K: matvec_t<kQ4_K>(a, s); break;
        case kQ6_K: matvec_t<kQ6_K>(a, s); break;
        default: throw GpuError("matvec: unsupported type " + std::to_string(a.type));
    }
}

void dequant_f16(const DevMatrix& m, int64_t row0, int64_t n, uint16_t* dst, int64_t dst_ld, gpuStream_t s) {
    launch_dequant<uint16_t>(m, row0, n, nullptr, nullptr, dst, dst_ld, s);
}

void embed(const DevMatrix& m, const int32_t* tokens, const SlotDesc* slots, int n, float* x, int64_t ld,
           gpuStream_t s) {
    launch_dequant<float>(m, 0, n, tokens, slots, x, ld, s);
}

}  // namespace loom::gpu
