// Decode matrix-vector products over device weights (F32, F16, BF16, Q8_0, Q4_K, Q6_K) with the
// batched kernel (up to 8 activation vectors, weights dequantized in registers), and the row
// dequantizers (embedding rows, F16 rows for the GEMM path) built from the same chunk codecs
// (k_dot.cuh).
#include "engine/backends/gpu/k_dot.cuh"
#include "engine/backends/gpu/k_matvec.cuh"

namespace loom::gpu {
namespace {

/// One block computes R weight rows (R/2 outputs in SwiGLU mode) for NB activation vectors.
template <uint32_t T, int NB, int R>
__global__ void __launch_bounds__(kMvThreads) matvec_kernel(MatvecArgs a) {
    using C = Chunk<T>;
    const bool swiglu = a.mode == MvMode::SwiGLU;
    const int per_block = swiglu ? R / 2 : R;
    const int o0 = static_cast<int>(blockIdx.x) * per_block;
    const int total = matvec_units(a);

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
                if constexpr (T == kQ4_K) {  // the denormal-nibble dot product (q4_dot1)
#pragma unroll
                    for (int i = 0; i < C::kElems; ++i) xv[i] *= 0x1p64f;  // exact
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[r][b] += q4_dot1(raw[r], xv, sx, q4s);
                } else {
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[r][b] += chunk_dot<C>(raw[r], c, a.cols, xv, sx);
                }
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
    const int total = matvec_units(a);
    const int per_block = a.mode == MvMode::SwiGLU ? R / 2 : R;
    const unsigned blocks = static_cast<unsigned>((total + per_block - 1) / per_block);
    auto k = matvec_kernel<T, NB, R>;
    LOOM_LAUNCH(k, blocks, kMvThreads, 0, s, a);
    LOOM_GPU_CHECK_LAUNCH();
}

template <uint32_t T>
void matvec_nb(const MatvecArgs& a, gpuStream_t s) {
    if (a.fixed_tiling) launch_matvec<T, 8>(a, s);
    else if (a.nb <= 1) launch_matvec<T, 1>(a, s);
    else if (a.nb <= 2) launch_matvec<T, 2>(a, s);
    else if (a.nb <= 4) launch_matvec<T, 4>(a, s);
    else launch_matvec<T, 8>(a, s);
}

/// Row r of m (rows r0.. over gridDim.x, chunks over threads) dequantized to F16 or F32; for F16,
/// `lo` (optional, same leading dimension) receives the low part f16(w - f16(w)).
template <uint32_t T, class Out>
__global__ void __launch_bounds__(128)
    dequant_kernel(DevMatrix m, int64_t r0, const RowDesc* rows, Out* dst, int64_t ld, uint16_t* lo) {
    using C = Chunk<T>;
    const int64_t row = rows ? int64_t{rows[blockIdx.x].token} : r0 + blockIdx.x;
    const uint8_t* src = m.data + static_cast<size_t>(row) * m.row_bytes;
    Out* out = dst + static_cast<int64_t>(blockIdx.x) * ld;
    uint16_t* out_lo = lo ? lo + static_cast<int64_t>(blockIdx.x) * ld : nullptr;
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
                if (full && ld % 8 == 0) {  // 16-byte stores of 8 halves (and of their low parts)
#pragma unroll
                    for (int i = 0; i < C::kRunLen; i += 8) {
                        const float* f = v + run * C::kRunLen + i;
                        uint32_t h[4], l[4];
#pragma unroll
                        for (int j = 0; j < 4; ++j) {
                            const uint16_t a = f2h(f[2 * j]), b = f2h(f[2 * j + 1]);
                            h[j] = a | (static_cast<uint32_t>(b) << 16);
                            if (out_lo)
                                l[j] = f16_lo(f[2 * j], a) | (static_cast<uint32_t>(f16_lo(f[2 * j + 1], b)) << 16);
                        }
                        *reinterpret_cast<uint4*>(out + s0 + i) = uint4{h[0], h[1], h[2], h[3]};
                        if (out_lo) *reinterpret_cast<uint4*>(out_lo + s0 + i) = uint4{l[0], l[1], l[2], l[3]};
                    }
                    continue;
                }
            }
#pragma unroll
            for (int i = 0; i < C::kRunLen; ++i) {
                if (C::kPlain && s0 + i >= cols) break;
                const float f = v[run * C::kRunLen + i];
                if constexpr (sizeof(Out) == 2) {
                    const uint16_t h = f2h(f);
                    out[s0 + i] = h;
                    if (out_lo) out_lo[s0 + i] = f16_lo(f, h);
                } else {
                    out[s0 + i] = f;
                }
            }
        }
    }
}

template <class Out>
void launch_dequant(const DevMatrix& m, int64_t r0, int64_t n, const RowDesc* rows, Out* dst, int64_t ld, uint16_t* lo,
                    gpuStream_t s) {
    if (n <= 0) return;
    const dim3 grid(static_cast<unsigned>(n), 1);
    auto go = [&](auto k) {
        LOOM_LAUNCH(k, grid, 128, 0, s, m, r0, rows, dst, ld, lo);
        LOOM_GPU_CHECK_LAUNCH();
    };
    with_type(m.type, "dequant", [&](auto t) { go(dequant_kernel<decltype(t)::value, Out>); });
}

}  // namespace

void matvec(const MatvecArgs& a, gpuStream_t s) {
    if (matvec1_takes(a)) return matvec1(a, s);
    with_type(a.type, "matvec", [&](auto t) { matvec_nb<decltype(t)::value>(a, s); });
}

void dequant_f16(const DevMatrix& m, int64_t row0, int64_t n, uint16_t* dst, int64_t dst_ld, gpuStream_t s,
                 uint16_t* lo) {
    launch_dequant<uint16_t>(m, row0, n, nullptr, dst, dst_ld, lo, s);
}

void embed(const DevMatrix& m, const RowDesc* rows, int n, float* x, int64_t ld, gpuStream_t s) {
    launch_dequant<float>(m, 0, n, rows, x, ld, nullptr, s);
}

}  // namespace loom::gpu
