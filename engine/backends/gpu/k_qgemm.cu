// The tensor-core decode GEMM (kernels.hpp, qgemm): y[M x N] (+)= x[M x K] . w[N x K]^T for the
// steps between the matvec kernel's few rows and a prefill chunk, with w in F16, BF16, Q8_0, Q4_K
// or Q6_K. A block owns 128 weight rows (16 a warp) and up to 64 activation rows; per 128-column
// tile it loads the weight chunks and activations into registers, dequantizes the chunks with
// k_dot.cuh's codecs into F16 in shared memory beside the F16 activations, and multiplies them
// with mma.sync m16n8k16 (F16 operands, F32 accumulation) while the next tile's loads are in
// flight. No dequantized copy of w exists in device memory. Split-K partials are added in split
// order by a second kernel, so a result never depends on timing.
//
// Sources: PTX ISA 8.x, "Matrix multiply-accumulate operation using mma instruction" (the
// m16n8k16 .f16 fragment layouts) and "ldmatrix"; CUDA C++ Programming Guide, "Shared Memory"
// (a 272-byte row stride puts the eight rows an ldmatrix phase reads in distinct banks). In the
// emulator build the fragment loads and the MMA are computed lane by lane with warp exchanges in
// the same fragment layouts, so the kernel is checked on machines without a GPU. HIP builds
// leave the kernel out (qgemm_available() is false): their GEMM path dequantizes to F16 first.
#include <algorithm>
#include <string>

#include "engine/backends/gpu/k_qgemm.cuh"

namespace loom::gpu {

int qgemm_sm_count() {
    static const int n = [] {
#if defined(LOOM_GPU_CUDA)
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0)
            return v;
#endif
        return 132;
    }();
    return n;
}

namespace {

// One decode GEMM kernel's launch shape for M activation rows: activation rows a block (the
// kernels' 8-row tiles times NT), columns a K tile, and blocks an SM as the kernels'
// __launch_bounds__ ask (qgemm_kernel 2; the fragment kernels Q4Frag::kTwoBlocks, Q6Frag's 1,
// the exact kernel 2 only with 2-tile Q4_K blocks). The fragment kernel also has 48-row blocks:
// 33-48 row steps took as long as 64-row ones with 64-row blocks (H100, 8B Q4_K_M: 0.86 of that
// with them; docs/benchmarks.md).
struct KernelShape {
    int mt, ktile, per_sm;
};

KernelShape kernel_shape(uint32_t type, int M, QgKernel k) {
    if (k == QgKernel::Tile) return {M <= 16 ? 16 : M <= 32 ? 32 : 64, 128, 2};
    const bool q4 = type == kQ4_K;
    if (k == QgKernel::Exact) return {M <= 16 ? 16 : 32, 256, q4 && M <= 16 ? 2 : 1};
    return {M <= 16 ? 16 : M <= 32 ? 32 : M <= 48 ? 48 : 64, 256, q4 ? 2 : 1};
}

}  // namespace

int qgemm_splits(const DevMatrix& w, int M, QgKernel kernel) {
    const KernelShape ks = kernel_shape(w.type, M, kernel);
    const int64_t kt = (w.cols + ks.ktile - 1) / ks.ktile;
    const int64_t nb = (w.rows + qg::kQgN - 1) / qg::kQgN * ((std::max(M, 1) + ks.mt - 1) / ks.mt);
    const int64_t sms = qgemm_sm_count(), slots = sms * ks.per_sm;
    // Cost in bytes: the weights the busiest SMs stream (whole waves of blocks, each as long as
    // its K tiles plus a prologue of kPrologue tiles, the first loads that nothing overlaps; a
    // last wave of at most one block an SM runs each block faster, by a factor kLone, where the
    // kernel holds two an SM), plus each split's partials (written, read back by the reduce
    // kernel) and the reduce launch. Without the prologue the rule split 4-16 row steps' gate |
    // up and logits 4-8 ways, and those steps were 1.04-1.05 times longer than with it (H100,
    // 8B Q4_K_M; 1.0 at 32-64 rows; a prologue of one tile was between: docs/benchmarks.md).
    constexpr double kLone = 0.6, kPrologue = 0.5;
    const double wave_bytes = static_cast<double>(slots) * qg::kQgN * static_cast<double>(w.row_bytes) *
                              static_cast<double>(ks.ktile) / static_cast<double>(w.cols);
    int best = 1;
    double best_cost = 0.0;
    for (int64_t s = 1; s <= std::min<int64_t>(16, kt); ++s) {
        const int64_t blocks = nb * s, full = blocks / slots, rem = blocks % slots;
        const double waves = static_cast<double>(full) + (rem == 0 ? 0.0 : (ks.per_sm > 1 && rem <= sms) ? kLone : 1.0);
        const double cost = waves * (static_cast<double>((kt + s - 1) / s) + kPrologue) * wave_bytes +
                            (s > 1 ? 2.0 * static_cast<double>(s * M * w.rows) + 1.5e6 : 0.0);
        if (s == 1 || cost < best_cost * 0.999) best = static_cast<int>(s), best_cost = cost;
    }
    return best;
}

size_t qgemm_partial_floats(const DevMatrix& w, int M) {
    int s = qgemm_splits(w, M, QgKernel::Tile);
    if (qgemm_exact_supports(w.type, w.cols))
        s = std::max({s, qgemm_splits(w, M, QgKernel::Frag), qgemm_splits(w, M, QgKernel::Exact)});
    return s > 1 ? static_cast<size_t>(s) * static_cast<size_t>(M) * static_cast<size_t>(w.rows) : 0;
}

bool qgemm_exact_supports(uint32_t type, int64_t cols) {
    return qgemm_available() && (type == kQ4_K || type == kQ6_K) && cols > 0 && cols % 256 == 0;
}

bool qgemm_frag_takes(uint32_t type, int64_t cols, bool x16, bool q4_frag, bool q6_frag) {
    const bool t = (q4_frag && type == kQ4_K) || (q6_frag && type == kQ6_K);
    return t && x16 && qgemm_exact_supports(type, cols);
}

bool qgemm_supports(uint32_t type, int64_t cols) {
    const bool t = type == kF16 || type == kBF16 || type == kQ8_0 || type == kQ4_K || type == kQ6_K;
    return t && cols > 0 && cols % 8 == 0;
}

#if defined(LOOM_GPU_HIP)

bool qgemm_available() { return false; }

void qgemm(const DevMatrix&, const float*, const uint16_t*, int64_t, int, float*, int64_t, bool, float*, gpuStream_t,
           bool, int, bool, const QgLow*) {
    throw GpuError("qgemm: the tensor-core decode GEMM is not built for HIP");
}

#else

namespace {

using namespace qg;

constexpr int kQgK = 128;        // columns a tile
constexpr int kQgLd = kQgK + 8;  // shared-memory row stride in halves (272 bytes)
// One activation piece: 8 consecutive columns of one row, F16 (XH) or F32 (zero() past M or K).
template <bool XH>
struct XPiece;
template <>
struct XPiece<true> {
    uint4 h;
    LOOM_DEV void load(const QgArgs& a, int64_t m, int64_t k) { h = ld16(a.x16 + m * a.ldx + k); }
    LOOM_DEV void zero() { h = uint4{0u, 0u, 0u, 0u}; }
    LOOM_DEV uint4 halves() const { return h; }
};
template <>
struct XPiece<false> {
    float4 lo, hi;
    LOOM_DEV void load(const QgArgs& a, int64_t m, int64_t k) {
        const float* p = a.x32 + m * a.ldx + k;
        lo = *reinterpret_cast<const float4*>(p);
        hi = *reinterpret_cast<const float4*>(p + 4);
    }
    LOOM_DEV void zero() { lo = hi = float4{0.0f, 0.0f, 0.0f, 0.0f}; }
    LOOM_DEV uint4 halves() const {
        const float f[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        return pack8(f);
    }
};

// Block (blockIdx.x: activation rows 64x.., blockIdx.y: weight rows 128y.., blockIdx.z: K split)
// of y = x . w^T for weight type T, NT 8-row activation tiles (MT = 8 NT rows), F16 or F32 x.
template <uint32_t T, int NT, bool XH>
__global__ void __launch_bounds__(kQgThreads, 2) qgemm_kernel(QgArgs a) {
    using C = Chunk<T>;
    constexpr int MT = 8 * NT;
    constexpr int CPT = kQgK / C::kElems;              // chunks of a row in a tile
    constexpr int WPT = kQgN * CPT / kQgThreads;       // weight chunks a thread loads a tile
    constexpr int XPT = MT * (kQgK / 8) / kQgThreads;  // activation pieces a thread loads a tile
    static_assert(WPT >= 1 && XPT >= 1 && NT % 2 == 0 && MT <= kQgMaxM, "tile shapes");
    LOOM_DYN_SMEM(uint16_t, sm);
    uint16_t* sw = sm;                 // [kQgN][kQgLd] weights, F16
    uint16_t* sx = sm + kQgN * kQgLd;  // [MT][kQgLd] activations, F16
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
    const int m0 = static_cast<int>(blockIdx.x) * MT, n0 = static_cast<int>(blockIdx.y) * kQgN;
    const int K = static_cast<int>(a.w.cols), N = static_cast<int>(a.w.rows);
    const int tiles = (K + kQgK - 1) / kQgK, nch = C::count(K);
    const int t0 = static_cast<int>(blockIdx.z) * tiles / static_cast<int>(gridDim.z);
    const int t1 = (static_cast<int>(blockIdx.z) + 1) * tiles / static_cast<int>(gridDim.z);

    // One register set: tile it + 1 loads while tile it's products run. (Two sets, so that the
    // loads overlap the decode too, measured slower on the H200: 1 block an SM at 64 rows for
    // the registers, and no gain at 16; docs/benchmarks.md.)
    typename C::Raw raw_a[WPT];
    XPiece<XH> xp_a[XPT];
    auto load = [&](int it, typename C::Raw(&raw)[WPT], XPiece<XH>(&xp)[XPT]) {
#pragma unroll
        for (int j = 0; j < WPT; ++j) {
            const int idx = tid + j * kQgThreads, row = idx / CPT, c = it * CPT + idx % CPT;
            if (n0 + row < N && c < nch)
                C::load(a.w.data + static_cast<size_t>(n0 + row) * a.w.row_bytes, c, K, raw[j]);
        }
#pragma unroll
        for (int j = 0; j < XPT; ++j) {
            const int idx = tid + j * kQgThreads, row = idx / (kQgK / 8), k = it * kQgK + 8 * (idx % (kQgK / 8));
            if (m0 + row < a.M && k < K) xp[j].load(a, m0 + row, k);
            else xp[j].zero();
        }
    };
    auto store = [&](int it, const typename C::Raw(&raw)[WPT], const XPiece<XH>(&xp)[XPT]) {
#pragma unroll
        for (int j = 0; j < WPT; ++j) {
            const int idx = tid + j * kQgThreads, row = idx / CPT, c = it * CPT + idx % CPT;
            uint16_t* dst = sw + row * kQgLd - it * kQgK;
            const bool ok = n0 + row < N && c < nch;
            if constexpr (T == kF16) {  // already F16 (K is a multiple of 8): copied as loaded
                st_shared16(dst + 8 * c, ok ? raw[j].q : uint4{0u, 0u, 0u, 0u});
            } else {
                float v[C::kElems];
                if (ok) {  // whole chunks only: K is a multiple of 8 (qgemm_supports)
                    C::decode(raw[j], c, v);
                } else {
#pragma unroll
                    for (int i = 0; i < C::kElems; ++i) v[i] = 0.0f;
                }
#pragma unroll
                for (int run = 0; run < C::kRuns; ++run) {
                    // Past the row's chunks (a tile beyond K), run_start still names columns of
                    // this tile, which must read as zeros.
                    const int s0 = ok ? C::run_start(c, run) : it * kQgK + (idx % CPT) * C::kElems + run * C::kRunLen;
#pragma unroll
                    for (int i = 0; i < C::kRunLen; i += 8) st_shared16(dst + s0 + i, pack8(v + run * C::kRunLen + i));
                }
            }
        }
#pragma unroll
        for (int j = 0; j < XPT; ++j) {
            const int idx = tid + j * kQgThreads, row = idx / (kQgK / 8), col = 8 * (idx % (kQgK / 8));
            st_shared16(sx + row * kQgLd + col, xp[j].halves());
        }
    };

    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    if (t0 < t1) load(t0, raw_a, xp_a);
    for (int it = t0; it < t1; ++it) {
        store(it, raw_a, xp_a);
        __syncthreads();
        if (it + 1 < t1) load(it + 1, raw_a, xp_a);  // in flight during this tile's products
        const uint16_t* wa = sw + warp * 16 * kQgLd;
#pragma unroll
        for (int kk = 0; kk < kQgK; kk += 16) {
            uint32_t af[4];
            frag_a<kQgLd>(wa + kk, af);
#pragma unroll
            for (int n2 = 0; n2 < NT / 2; ++n2) {
                uint32_t bf[4];
                frag_b2<kQgLd>(sx + n2 * 16 * kQgLd + kk, bf);
                mma16816(acc[2 * n2], af, bf[0], bf[1]);
                mma16816(acc[2 * n2 + 1], af, bf[2], bf[3]);
            }
        }
        __syncthreads();
    }

    store_acc<NT>(a, acc, n0 + warp * 16, m0, tid & 31);
}

// y[m][n] = (add ? y[m][n] : 0) + sum over s in order of part[s][m][n].
__global__ void qgemm_reduce_kernel(const float* part, int splits, int M, int N, float* y, int64_t ldy, bool add) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<int64_t>(M) * N) return;
    const int64_t m = i / N, n = i % N;
    float s = 0.0f;
    for (int z = 0; z < splits; ++z) s += part[static_cast<int64_t>(z) * M * N + i];
    float* yp = y + m * ldy + n;
    *yp = add ? *yp + s : s;
}

template <uint32_t T, int NT, bool XH>
void launch_qgemm(const QgArgs& a, int splits, gpuStream_t s) {
    constexpr int MT = 8 * NT;
    const size_t smem = static_cast<size_t>(kQgN + MT) * kQgLd * sizeof(uint16_t);
    auto k = qgemm_kernel<T, NT, XH>;
    smem_limit_once<qgemm_kernel<T, NT, XH> >(smem);
    const dim3 grid(static_cast<unsigned>((a.M + MT - 1) / MT), static_cast<unsigned>((a.w.rows + kQgN - 1) / kQgN),
                    static_cast<unsigned>(splits));
    LOOM_LAUNCH(k, grid, kQgThreads, smem, s, a);
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace

bool qgemm_available() { return true; }

void qgemm(const DevMatrix& w, const float* x32, const uint16_t* x16, int64_t ldx, int M, float* y, int64_t ldy,
           bool add, float* part, gpuStream_t s, bool q4_frag, int splits_asked, bool q6_frag, const QgLow* low) {
    if (M <= 0 || w.rows <= 0) return;
    if (!qgemm_supports(w.type, w.cols))
        throw GpuError("qgemm: weights of type " + std::to_string(w.type) + " and " + std::to_string(w.cols) +
                       " columns are not supported");
    if (low && !(qgemm_exact_supports(w.type, w.cols) && x16 && low->x_lo && low->sums && low->ld_sums >= w.cols / 16 &&
                 low->ld_sums % 2 == 0))
        throw GpuError(
            "qgemm: split products need Q4_K or Q6_K weights in whole 256-column blocks, F16 high parts, "
            "their low parts and block sums (an even leading dimension)");
    QgArgs a{w, x32, x16, ldx, M, y, ldy, add, part};
    if (low) a.x_lo = low->x_lo, a.sums = low->sums, a.ld_sums = low->ld_sums;
    const bool frag = low || qgemm_frag_takes(w.type, w.cols, x16 != nullptr, q4_frag, q6_frag);
    const QgKernel kernel = low ? QgKernel::Exact : frag ? QgKernel::Frag : QgKernel::Tile;
    int splits = splits_asked > 0 ? splits_asked : qgemm_splits(w, M, kernel);
    if (frag) splits = std::min<int>(splits, static_cast<int>(w.cols / 256));  // its tiles are 256 columns
    if (splits > 1 && !part) throw GpuError("qgemm: split-K needs a partials buffer");
    const int nt = kernel_shape(w.type, M, kernel).mt / 8;
    auto go = [&](auto t) {
        constexpr uint32_t T = decltype(t)::value;
        if constexpr (T == kF32) {
            throw GpuError("qgemm: F32 weights are not supported");
        } else {
            auto by_x = [&](auto nt_c) {
                constexpr int NT = decltype(nt_c)::value;
                if (x16) launch_qgemm<T, NT, true>(a, splits, s);
                else launch_qgemm<T, NT, false>(a, splits, s);
            };
            if (nt == 2) by_x(std::integral_constant<int, 2>{});
            else if (nt == 4) by_x(std::integral_constant<int, 4>{});
            else by_x(std::integral_constant<int, 8>{});
        }
    };
    if (frag) qgemm_frag(a, nt, splits, s);
    else with_type(w.type, "qgemm", go);
    if (splits > 1) {
        const int64_t total = static_cast<int64_t>(M) * w.rows;
        LOOM_LAUNCH(qgemm_reduce_kernel, dim3(static_cast<unsigned>((total + 255) / 256)), 256, 0, s, part, splits, M,
                    static_cast<int>(w.rows), y, ldy, add);
        LOOM_GPU_CHECK_LAUNCH();
    }
}

#endif  // LOOM_GPU_HIP

}  // namespace loom::gpu
