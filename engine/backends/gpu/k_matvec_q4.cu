// The decode matvec for Q4_K weights and 1-4 activation vectors on the tensor cores (kernels.hpp
// matvec with MatvecArgs::q4_mma; matvec_q4_mma_takes says when): y = W x per vector, with the
// fused RMSNorm, SwiGLU, residual add and RoPE / K-V store epilogues of k_matvec.cu.
//
// A block of 4 warps owns 16 weight rows (in SwiGLU mode 8 gate rows and the 8 up rows of the
// same outputs); warp w takes the Q4_K blocks w, w + 4, ... of the row (K split in the block),
// and the warps' sums are added in warp order at the end. Lane (g, t) = (lane / 4, lane % 4)
// loads, per 256-column block of rows g and g + 8, the header and quant bytes 32t..32t+31 (the
// nibbles of sub-blocks 2t and 2t + 1), and decodes each nibble pair straight into an A operand
// of mma.sync m16n8k16 as the exact integers sc * q: (q & 0x000F000F) | 0x64006400 is the F16
// pair 1024 + q, and one F16x2 FMA with (sc, sc) and (-1024 sc, -1024 sc) leaves sc * q <= 945,
// exact (high nibbles: 64 + q, -64 sc). The K order is permuted so that each lane's nibbles
// land in its fragment slots (k-step s of a block: slot pair t holds block columns 64t + 4(s/2)
// + (s & 1) and + 2, slot pair t + 4 the same plus 32), and the activations are staged in that
// order as the B operand: vector v's column 2v holds the F16 high part of x' = x * norm * 2^e,
// column 2v + 1 the low part x' - hi (so hi + lo carries about 22 bits of x'), with 2^e the
// power of two that puts the vector's largest |x'| in [2^14, 2^15). A block's products are
// F32 sums of exact integer-times-F16 terms; each is scaled by the row's d, and the mins enter
// as dmin * sum over sub-blocks of m * (sum of x' over the sub-block), in F32. No F16 copy of
// the weights or of the activations is written anywhere.
//
// Sources: GGUF Q4_K block layout (ggml-quants.c block_q4_K, dequantize_row_q4_K: element
// 64c + i of a block is d * sc(2c) * (byte 32c + i & 15) - dmin * m(2c), element 64c + 32 + i
// uses the high nibble and sc(2c + 1), m(2c + 1)); PTX ISA 8.x "mma" (m16n8k16 .f16 fragment
// layouts) and "fma.f16x2"; IEEE 754 binary16.
#include <cmath>

#include "engine/backends/gpu/k_matvec.cuh"
#include "engine/backends/gpu/k_q4frag.cuh"
#include "engine/backends/gpu/k_qgemm.cuh"

namespace loom::gpu {

#if !defined(LOOM_GPU_HIP)
namespace qg {
namespace {

constexpr int kMqWarps = 4, kMqThreads = kWarp * kMqWarps;
constexpr int kMqVecs = 4;  // activation vectors: a high and a low column each fill the mma's 8

// One warp's staged activations for one Q4_K block: the B operand words of each k-step, column
// and lane t (only columns below 2 nb are written), and each sub-block's sum of x' per vector.
struct MqStage {
    uint2 b[16][2 * kMqVecs][4];
    float xs[8][kMqVecs];
};

LOOM_DEV float4 ld_f4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// The F16 pair of (a, b) rounded (hi), and of what that rounding left (lo).
LOOM_DEV void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = pack2(a, b);
    lo = pack2(a - h2f(static_cast<uint16_t>(hi)), b - h2f(static_cast<uint16_t>(hi >> 16)));
}

__global__ void __launch_bounds__(kMqThreads, 3) mvq4_kernel(MatvecArgs a) {
    __shared__ MqStage st[kMqWarps];
    __shared__ float red[kMqWarps][16][kMqVecs];
    __shared__ double s_ss[kMqWarps][kMqVecs];
    __shared__ float s_am[kMqWarps][kMqVecs];
    __shared__ float s_xs[kMqVecs], s_ys[kMqVecs];
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const int g = lane >> 2, t = lane & 3;
    const bool swiglu = a.mode == MvMode::SwiGLU;
    const int o0 = static_cast<int>(blockIdx.x) * (swiglu ? 8 : 16);
    const int total = matvec_units(a), nb = a.nb, K = a.cols;

    // Rows g and g + 8 of the tile (null past the outputs: they decode to zeros).
    const uint8_t* wr[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        int local, s;
        if (swiglu) {
            local = o0 + g;
            s = i;
        } else {
            s = seg_of(a, o0 + g + 8 * i, local);
        }
        const bool valid = (swiglu ? o0 + g : o0 + g + 8 * i) < total;
        wr[i] = valid ? seg_w(a, s) + static_cast<size_t>(local) * a.row_bytes : nullptr;
    }

    // Per vector: the RMSNorm scale (sum of squares in double, as rmsnorm()) and the largest
    // |x * norm|, for the power of two that centres x' in F16's range.
    for (int v = 0; v < nb; ++v) {
        const float* xb = a.x + v * a.x_stride;
        double ss = 0;
        float am = 0.0f;
        for (int i = tid; i < K; i += kMqThreads) {
            const float x = xb[i];
            if (a.norm_w) ss += static_cast<double>(x) * x;
            am = fmaxf(am, fabsf(a.norm_w ? x * a.norm_w[i] : x));
        }
        ss = warp_sum_d(ss);
        am = warp_max(am);
        if (lane == 0) s_ss[warp][v] = ss, s_am[warp][v] = am;
    }
    __syncthreads();
    if (tid < nb) {
        double ss = 0;
        float am = 0.0f;
        for (int w = 0; w < kMqWarps; ++w) ss += s_ss[w][tid], am = fmaxf(am, s_am[w][tid]);
        const float sc = a.norm_w ? static_cast<float>(1.0 / sqrt(ss / K + static_cast<double>(a.norm_eps))) : 1.0f;
        int e = 0;
        const float m = am * sc;
        if (m > 0.0f && m < INFINITY) {
            int ex;
            (void)frexpf(m, &ex);              // m = f 2^ex, f in [0.5, 1)
            e = max(-100, min(100, 15 - ex));  // m 2^e in [2^14, 2^15)
        }
        s_xs[tid] = ldexpf(sc, e);
        s_ys[tid] = ldexpf(1.0f, -e);
    }
    __syncthreads();

    MqStage& my = st[warp];
    const int nblk = K / 256;
    float acc[2] = {0.0f, 0.0f};  // rows g, g + 8 of vector t (lanes t < nb)
    float pm[2][kMqVecs];         // dmin * m * X terms of this lane's sub-blocks, every vector
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int v = 0; v < kMqVecs; ++v) pm[i][v] = 0.0f;

    auto load = [&](int j, Q4Raw(&r)[2]) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            if (wr[i]) {
                const uint8_t* blk = wr[i] + 144 * static_cast<size_t>(j);
                r[i].h = ld16(blk);
                r[i].q0 = ld16(blk + 16 + 32 * t);
                r[i].q1 = ld16(blk + 32 + 32 * t);
            } else {
                r[i].h = r[i].q0 = r[i].q1 = uint4{0u, 0u, 0u, 0u};
            }
        }
    };
    // Stages block j's activations: lane (tp, ip) = (lane / 8, lane % 8) takes columns
    // 64 tp + 4 ip.. (sub-block 2 tp) and 32 further (2 tp + 1), the operands of k-steps 2 ip, 2 ip + 1.
    auto stage = [&](int j) {
        const int tp = lane >> 3, ip = lane & 7, e0 = 256 * j + 64 * tp + 4 * ip;
        for (int v = 0; v < nb; ++v) {
            const float* xb = a.x + v * a.x_stride;
            const float4 x0 = ld_f4(xb + e0), x1 = ld_f4(xb + e0 + 32);
            float f[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            if (a.norm_w) {
                const float4 n0 = ld_f4(a.norm_w + e0), n1 = ld_f4(a.norm_w + e0 + 32);
                const float n[8] = {n0.x, n0.y, n0.z, n0.w, n1.x, n1.y, n1.z, n1.w};
#pragma unroll
                for (int i = 0; i < 8; ++i) f[i] *= n[i];
            }
            const float c = s_xs[v];
#pragma unroll
            for (int i = 0; i < 8; ++i) f[i] *= c;
            float s0 = (f[0] + f[1]) + (f[2] + f[3]), s1 = (f[4] + f[5]) + (f[6] + f[7]);
#pragma unroll
            for (int m = 1; m < 8; m <<= 1) s0 += shfl_xor(s0, m), s1 += shfl_xor(s1, m);
            if (ip == 0) my.xs[2 * tp][v] = s0, my.xs[2 * tp + 1][v] = s1;
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                uint32_t h0, l0, h1, l1;
                split2(f[p], f[p + 2], h0, l0);
                split2(f[4 + p], f[6 + p], h1, l1);
                my.b[2 * ip + p][2 * v][tp] = uint2{h0, h1};
                my.b[2 * ip + p][2 * v + 1][tp] = uint2{l0, l1};
            }
        }
        sync_warp();
    };
    auto compute = [&](const Q4Raw(&r)[2]) {
        uint32_t slo[2], clo[2], shi[2], chi[2];
        float d[2], dmin[2], mlo[2], mhi[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            uint32_t sc, mn;
            q4_scale_bytes(r[i].h, t, sc, mn);
            const uint32_t s2 = h2_sub(spread(sc, 0x4140u) | kLo, kLo);  // (sc(2t), sc(2t + 1)), exact
            slo[i] = __byte_perm(s2, 0u, 0x1010u);
            shi[i] = __byte_perm(s2, 0u, 0x3232u);
            clo[i] = h2_mul(slo[i], 0xE400E400u);  // -1024 sc, exact
            chi[i] = h2_mul(shi[i], 0xD400D400u);  // -64 sc
            d[i] = h2f(static_cast<uint16_t>(r[i].h.x & 0xFFFFu));
            dmin[i] = h2f(static_cast<uint16_t>(r[i].h.x >> 16));
            mlo[i] = static_cast<float>(mn & 0xFFu);
            mhi[i] = static_cast<float>((mn >> 8) & 0xFFu);
        }
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int s = 0; s < 16; ++s) {
            const uint2 b = g < 2 * nb ? my.b[s][g][t] : uint2{0u, 0u};
            const int wi = s >> 1;
            uint32_t w0 = wi < 4 ? word(r[0].q0, wi) : word(r[0].q1, wi - 4);
            uint32_t w1 = wi < 4 ? word(r[1].q0, wi) : word(r[1].q1, wi - 4);
            if (s & 1) w0 >>= 8, w1 >>= 8;
            uint32_t af[4];  // rows g, g + 8; slot pairs t (sub-block 2t) and t + 4 (2t + 1)
            af[0] = h2_fma((w0 & 0x000F000Fu) | kLo, slo[0], clo[0]);
            af[1] = h2_fma((w1 & 0x000F000Fu) | kLo, slo[1], clo[1]);
            af[2] = h2_fma((w0 & 0x00F000F0u) | kHi, shi[0], chi[0]);
            af[3] = h2_fma((w1 & 0x00F000F0u) | kHi, shi[1], chi[1]);
            mma16816(c, af, b.x, b.y);
        }
        acc[0] = fmaf(d[0], c[0] + c[1], acc[0]);
        acc[1] = fmaf(d[1], c[2] + c[3], acc[1]);
#pragma unroll
        for (int v = 0; v < kMqVecs; ++v) {  // unrolled: pm stays in registers
            if (v >= nb) break;
            const float x0 = my.xs[2 * t][v], x1 = my.xs[2 * t + 1][v];
#pragma unroll
            for (int i = 0; i < 2; ++i) pm[i][v] = fmaf(dmin[i], fmaf(mlo[i], x0, mhi[i] * x1), pm[i][v]);
        }
        sync_warp();  // `my` is staged again for the next block
    };

    Q4Raw ra[2], rb[2];
    if (warp < nblk) load(warp, ra);
    for (int j = warp; j < nblk; j += 2 * kMqWarps) {  // two register sets, alternating without copies
        if (j + kMqWarps < nblk) load(j + kMqWarps, rb);
        stage(j);
        compute(ra);
        if (j + kMqWarps >= nblk) break;
        if (j + 2 * kMqWarps < nblk) load(j + 2 * kMqWarps, ra);
        stage(j + kMqWarps);
        compute(rb);
    }

    // The four lanes of a row group add their min terms; lane t keeps vector t's.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float p = 0.0f;
#pragma unroll
        for (int v = 0; v < kMqVecs; ++v) {
            float q = pm[i][v];
            q += shfl_xor(q, 1);
            q += shfl_xor(q, 2);
            if (v == t) p = q;
        }
        red[warp][g + 8 * i][t] = acc[i] - p;
    }
    __syncthreads();
    auto row_sum = [&](int r, int v) {
        float s = 0.0f;
        for (int w = 0; w < kMqWarps; ++w) s += red[w][r][v];
        return s * s_ys[v];
    };
    if (swiglu) {
        if (tid < 8 * nb) {
            const int r = tid / nb, v = tid % nb, o = o0 + r;
            if (o < total) {
                const float gv = row_sum(r, v), uv = row_sum(r + 8, v);
                a.seg[0].y[v * a.y_stride + o] = gv / (1.0f + expf(-gv)) * uv;
            }
        }
    } else if (tid < 16 * nb) {
        const int r = tid / nb, v = tid % nb, o = o0 + r;
        if (o < total) {
            int local;
            const int s = seg_of(a, o, local);
            store_row(a, s, local, v, row_sum(r, v), row_sum(r ^ 1, v));  // RoPE partner: o0 is even
        }
    }
}

}  // namespace
}  // namespace qg

bool matvec_q4_mma_takes(const MatvecArgs& a) {
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return a.q4_mma && a.type == kQ4_K && !a.fixed_tiling && a.nb >= 1 && a.nb <= qg::kMqVecs && a.cols % 256 == 0 &&
           a.cols > 0 && aligned(a.x) && a.x_stride % 4 == 0 && (!a.norm_w || aligned(a.norm_w));
}

void matvec_q4_mma(const MatvecArgs& a, gpuStream_t s) {
    const int per_block = a.mode == MvMode::SwiGLU ? 8 : 16;
    const auto blocks = static_cast<unsigned>((matvec_units(a) + per_block - 1) / per_block);
    LOOM_LAUNCH(qg::mvq4_kernel, blocks, qg::kMqThreads, 0, s, a);
    LOOM_GPU_CHECK_LAUNCH();
}

#else  // HIP: no mma.sync counterpart used; the batched matvec kernel takes every call.

bool matvec_q4_mma_takes(const MatvecArgs&) { return false; }
void matvec_q4_mma(const MatvecArgs&, gpuStream_t) { throw GpuError("matvec_q4_mma: not in HIP builds"); }

#endif  // !LOOM_GPU_HIP

}  // namespace loom::gpu
