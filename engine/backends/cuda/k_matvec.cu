// Decode matrix-vector products over device weights (F32, F16, BF16, Q8_0, Q4_K, Q6_K), with the
// quantized blocks dequantized in registers, and the row dequantizers built from the same code.
//
// Block layouts follow ggml-common.h as the GGUF format stores them (model/quant_blocks.hpp
// documents each); the device layouts are those of DevMatrix (kernels.hpp). A row is read in
// "chunks": 16-byte loads that each thread issues for several rows before it uses any of them,
// so that many loads are in flight (the CUDA C++ Best Practices Guide, "Coalesced Access to
// Global Memory"), and a chunk decodes to kRuns runs of kRunLen consecutive elements.
#include "engine/backends/cuda/kernels.hpp"

namespace loom::gpu {
namespace {

LOOM_DEV uint32_t byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xFFu; }

// Byte e (0..3) of w, an unsigned value below 2^8, as a float without an int-to-float
// conversion: the bits 0x4B0000nn are the float 2^23 + nn, and subtracting 2^23 is exact.
LOOM_DEV float byte_as_float(uint32_t w, int e) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | static_cast<uint32_t>(e))) - 8388608.0f;
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
            for (int e = 0; e < 4; ++e) acc += (byte_as_float(u, e) - 128.0f) * xv[4 * i + e];
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
                a0 += (byte_as_float(q0, e) - 32.0f) * xv[4 * i + e];
                a1 += (byte_as_float(q1, e) - 32.0f) * xv[16 + 4 * i + e];
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
            float v = 0.0f;
            for (int w = 0; w < kWarps; ++w) v += red[r * NB + b][w];
            int local;
            const int s = seg_of(a, o, local);
            float* y = seg_y(a, s) + b * a.y_stride + local;
            if (a.mode == MvMode::Add) *y += v;
            else *y = v;
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

/// Row r of m (rows r0.. over gridDim.x, chunks over threads) dequantized to F16 or F32.
template <uint32_t T, class Out>
__global__ void __launch_bounds__(128) dequant_kernel(DevMatrix m, int64_t r0, const int32_t* tokens,
                                                      const SlotDesc* slots, Out* dst, int64_t ld) {
    using C = Chunk<T>;
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
        case kF32: matvec_nb<kF32>(a, s); break;
        case kF16: matvec_nb<kF16>(a, s); break;
        case kBF16: matvec_nb<kBF16>(a, s); break;
        case kQ8_0: matvec_nb<kQ8_0>(a, s); break;
        case kQ4_K: matvec_nb<kQ4_K>(a, s); break;
        case kQ6_K: matvec_nb<kQ6_K>(a, s); break;
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
