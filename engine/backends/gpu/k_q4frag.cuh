// F16x2 helpers of the Q4_K kernels that decode nibbles straight into mma.sync operands
// (k_qgemm_q4.cu, the decode GEMM's fragment kernel; k_matvec_q4.cu, the 1-4 vector matvec):
// per-half F16x2 arithmetic with one rounding (the emulator rounds each half's float result to
// F16), byte spreading, and a lane's 6-bit scales and mins of a Q4_K block as F16x2 operands.
//
// Sources: GGUF Q4_K block layout (ggml-quants.c block_q4_K and get_scale_min_k4: d, dmin, 12
// bytes of packed 6-bit scales and mins, 128 bytes of nibbles); PTX ISA 8.x "sub/mul/fma.f16x2",
// "prmt"; IEEE 754 binary16 (an integer q < 1024 OR-ed into the mantissa of 1024.0 is 1024 + q
// exactly).
#pragma once

#include "engine/backends/gpu/k_dot.cuh"

#if !defined(LOOM_GPU_HIP)
namespace loom::gpu::qg {
namespace {

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

/// One weight row's share of a Q4_K block for lane t: the block header and quant bytes 32t..32t+31.
struct Q4Raw {
    uint4 h, q0, q1;
};

/// Lane t's F16x2 operands of one row and block: scale and negated min of sub-block 2t (lo_*)
/// and 2t + 1 (hi_*), each broadcast to both halves.
struct Q4Scales {
    uint32_t lo_s, lo_m, hi_s, hi_m;
};

// Lane t's 6-bit scales (sc) and mins (mn) of sub-blocks 2t and 2t + 1 of a Q4_K block with
// header h, in bytes 0 and 1 of each (get_scale_min_k4).
LOOM_DEV void q4_scale_bytes(const uint4& h, int t, uint32_t& sc, uint32_t& mn) {
    // Sub-blocks 2t, 2t + 1 use bytes 2(t & 1), 2(t & 1) + 1 of the scale words.
    const int sh = 16 * (t & 1);
    const uint32_t ys = h.y >> sh, zs = h.z >> sh, ws = h.w >> sh;
    if (t < 2) {
        sc = ys & 0x3F3Fu;
        mn = zs & 0x3F3Fu;
    } else {
        sc = (ws & 0x0F0Fu) | ((ys >> 2) & 0x3030u);
        mn = ((ws >> 4) & 0x0F0Fu) | ((zs >> 2) & 0x3030u);
    }
}

LOOM_DEV Q4Scales q4_scales(const uint4& h, int t) {
    uint32_t sc, mn;
    q4_scale_bytes(h, t, sc, mn);
    const uint32_t s2 = h2_sub(spread(sc, 0x4140u) | kLo, kLo);  // (sc0, sc1), exact
    const uint32_t m2 = h2_sub(spread(mn, 0x4140u) | kLo, kLo);
    const uint32_t ds = h2_mul(s2, __byte_perm(h.x, 0u, 0x1010u));                // times (d, d)
    const uint32_t dm = h2_mul(m2, __byte_perm(h.x, 0u, 0x3232u)) ^ 0x80008000u;  // -(dmin m)
    return Q4Scales{__byte_perm(ds, 0u, 0x1010u), __byte_perm(dm, 0u, 0x1010u), __byte_perm(ds, 0u, 0x3232u),
                    __byte_perm(dm, 0u, 0x3232u)};
}

LOOM_DEV uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

}  // namespace
}  // namespace loom::gpu::qg
#endif  // !LOOM_GPU_HIP
