// Pieces the tensor-core decode GEMM kernels share (k_qgemm.cu: weights decoded into a
// shared-memory tile; k_qgemm_frag.cu: Q4_K, Q6_K decoded straight into the A fragments): the mma.sync
// m16n8k16 fragment loads and product, F16 packing, 16-byte shared stores and cp.async copies, the launch
// arguments and the epilogue that stores or adds a warp's 16 x 8NT results.
//
// Sources: PTX ISA 8.x, "Matrix multiply-accumulate operation using mma instruction" (the
// m16n8k16 .f16 fragment layouts) and "ldmatrix". In the emulator build the fragment loads and
// the MMA are computed lane by lane with warp exchanges in the same layouts.
#pragma once

#include "engine/backends/gpu/k_dot.cuh"
#include "engine/backends/gpu/k_matvec.cuh"

namespace loom::gpu::qg {
// The launch shape, which the host's split rule (k_qgemm.cu qgemm_splits) reads on every backend.
constexpr int kQgThreads = 256;  // 8 warps
constexpr int kQgN = 128;        // weight rows a block (16 a warp)
constexpr int kQgMaxM = 64;      // activation rows a block
}  // namespace loom::gpu::qg

#if !defined(LOOM_GPU_HIP)
namespace loom::gpu {
namespace qg {

#if defined(LOOM_GPU_EMU)
// The 32-bit word (two halves) at p.
inline uint32_t ld_pair(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
// Half i (0..3) of the two words packed in v, as a float.
inline float half_of(uint64_t v, int i) { return h2f(static_cast<uint16_t>(v >> (16 * i))); }
#endif

// ldmatrix .x4: register i of each lane gets, from the 8 x 8 half matrix whose rows lanes
// 8i..8i+7 address (p, in shared memory), row lane/4, columns 2(lane%4) and 2(lane%4)+1; with
// Trans (.trans) column lane/4, rows 2(lane%4) and 2(lane%4)+1.
template <bool Trans = false>
LOOM_DEV void ldsm_x4(const uint16_t* p, uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__)
    const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    if constexpr (Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
#else
    (void)p, (void)r;
#endif
}

// The A fragment of mma.m16n8k16 (16 weight rows x 16 columns) from the row-major tile at s:
// a[0] rows 0-7 columns 0-7, a[1] rows 8-15, a[2] and a[3] columns 8-15; lane l holds row l/4,
// columns 2(l%4) and 2(l%4)+1 of each.
template <int LD>
LOOM_DEV void frag_a(const uint16_t* s, uint32_t (&a)[4]) {
#if defined(LOOM_GPU_EMU)
    const int l = ::loom::emu::lane(), g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) a[i] = ld_pair(s + (g + 8 * (i & 1)) * LD + 2 * t + 8 * (i >> 1));
#else
    const int l = static_cast<int>(threadIdx.x) & 31;
    ldsm_x4(s + (l & 15) * LD + (l >> 4) * 8, a);
#endif
}

// The B fragments of two adjacent 8-row activation tiles (rows 0-7 and 8-15 of s, 16 columns):
// b[0], b[1] columns 0-7 and 8-15 of the first, b[2], b[3] of the second; lane l holds row l/4,
// columns 2(l%4) and 2(l%4)+1 of each.
template <int LD>
LOOM_DEV void frag_b2(const uint16_t* s, uint32_t (&b)[4]) {
#if defined(LOOM_GPU_EMU)
    const int l = ::loom::emu::lane(), g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) b[i] = ld_pair(s + (g + 8 * (i >> 1)) * LD + 2 * t + 8 * (i & 1));
#else
    const int l = static_cast<int>(threadIdx.x) & 31;
    ldsm_x4(s + ((l & 7) + ((l >> 4) << 3)) * LD + ((l >> 3) & 1) * 8, b);
#endif
}

// The B fragments of a k16 x n16 block of B = V (keys x dims) stored row-major (key rows of LD
// halves) at s: r[0], r[1] for dims 0-7 (keys 0-7 and 8-15), r[2], r[3] for dims 8-15; lane l
// holds keys 2(l%4), 2(l%4)+1 (+8 for r[1], r[3]) of dim l/4. ldmatrix .trans, addressed as
// frag_a addresses an A tile.
template <int LD>
LOOM_DEV void frag_v(const uint16_t* s, uint32_t (&r)[4]) {
#if defined(LOOM_GPU_EMU)
    const int l = ::loom::emu::lane(), g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) {
        const uint16_t* p = s + (8 * (i & 1) + 2 * t) * LD + 8 * (i >> 1) + g;
        r[i] = p[0] | (static_cast<uint32_t>(p[LD]) << 16);
    }
#else
    const int l = static_cast<int>(threadIdx.x) & 31;
    qg::ldsm_x4<true>(s + (l & 15) * LD + (l >> 4) * 8, r);
#endif
}

// c += A . B for one m16n8k16 tile: c[0], c[1] are row l/4, columns 2(l%4) and 2(l%4)+1 of the
// 16 x 8 product, c[2], c[3] the same columns of row l/4 + 8.
LOOM_DEV void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(LOOM_GPU_EMU)
    const int l = ::loom::emu::lane(), g = l >> 2, t = l & 3;
    float a0[16], a1[16], p0[16], p1[16];  // A rows g and g+8; B columns 2t and 2t+1
    for (int u = 0; u < 4; ++u) {
        // Lane 4g+u holds A[g][2u..2u+1] (a[0]), A[g+8][2u..] (a[1]), A[g][2u+8..] (a[2]),
        // A[g+8][2u+8..] (a[3]); lane 4n+u holds B[2u..2u+1][n] (b0) and B[2u+8..][n] (b1).
        const uint64_t lo = ::loom::emu::exchange(a[0] | (uint64_t{a[1]} << 32), 4 * g + u);
        const uint64_t hi = ::loom::emu::exchange(a[2] | (uint64_t{a[3]} << 32), 4 * g + u);
        const uint64_t q0 = ::loom::emu::exchange(b0 | (uint64_t{b1} << 32), 8 * t + u);
        const uint64_t q1 = ::loom::emu::exchange(b0 | (uint64_t{b1} << 32), 8 * t + 4 + u);
        for (int h = 0; h < 2; ++h) {
            a0[2 * u + h] = half_of(lo, h), a1[2 * u + h] = half_of(lo, 2 + h);
            a0[2 * u + 8 + h] = half_of(hi, h), a1[2 * u + 8 + h] = half_of(hi, 2 + h);
            p0[2 * u + h] = half_of(q0, h), p0[2 * u + 8 + h] = half_of(q0, 2 + h);
            p1[2 * u + h] = half_of(q1, h), p1[2 * u + 8 + h] = half_of(q1, 2 + h);
        }
    }
    for (int k = 0; k < 16; ++k) {
        c[0] += a0[k] * p0[k], c[1] += a0[k] * p1[k];
        c[2] += a1[k] * p0[k], c[3] += a1[k] * p1[k];
    }
#elif defined(__CUDA_ARCH__)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)c, (void)a, (void)b0, (void)b1;
#endif
}

// 16 bytes from global to shared memory without a register round trip; zeros when !valid.
LOOM_DEV void cp_async16(uint16_t* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__)
    const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#else
    if (valid) *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    else *reinterpret_cast<uint4*>(dst) = uint4{0u, 0u, 0u, 0u};
#endif
}

// Closes this thread's group of cp.async copies issued since the last commit.
LOOM_DEV void cp_async_commit() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are in flight.
template <int N>
LOOM_DEV void cp_async_wait() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Two floats as two halves in one word, a low (round to nearest even): one packed conversion
// instruction on the GPU.
LOOM_DEV uint32_t pack2(float a, float b) {
#if defined(__CUDA_ARCH__)
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
#else
    return f2h(a) | (static_cast<uint32_t>(f2h(b)) << 16);
#endif
}

// Two floats as an F16 pair (high part) and the F16 pair of what it left (low part).
LOOM_DEV void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = pack2(a, b);
    lo = pack2(a - h2f(static_cast<uint16_t>(hi)), b - h2f(static_cast<uint16_t>(hi >> 16)));
}

// Stores 16 bytes at p (shared memory, 16-byte aligned) as one vector store: without the
// explicit instruction the compiler split the decoded tiles' stores into four 32-bit ones.
LOOM_DEV void st_shared16(uint16_t* p, uint4 v) {
#if defined(__CUDA_ARCH__)
    const auto addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
#else
    *reinterpret_cast<uint4*>(p) = v;
#endif
}

// Eight floats as eight halves (round to nearest even).
LOOM_DEV uint4 pack8(const float* f) {
    return uint4{pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7])};
}

/// Raises kernel K's dynamic shared memory limit to `bytes` (above the 48 KiB default) once,
/// the first time it is called: for kernels whose size is fixed per instantiation. Throws
/// GpuError when the runtime refuses.
template <auto K>
void smem_limit_once(size_t bytes) {
    static const bool done = [&] {
        LOOM_GPU_CHECK(gpuFuncSetMaxDynamicSmem(K, static_cast<int>(bytes)));
        return true;
    }();
    (void)done;
}

/// The kernels' arguments (see qgemm in kernels.hpp).
struct QgArgs {
    DevMatrix w;
    const float* x32;
    const uint16_t* x16;
    int64_t ldx;
    int M;
    float* y;
    int64_t ldy;
    bool add;
    float* part;  // [splits][M][N] when gridDim.z > 1
    // Split products (kernels.hpp QgLow): the activations' F16 low parts (x16 holds the high
    // parts; same ldx) and their block sums; null otherwise.
    const uint16_t* x_lo = nullptr;
    const uint16_t* sums = nullptr;
    int64_t ld_sums = 0;
};

// Stores (or adds, or writes as split partials) a warp's results: acc[i][e] is weight row
// n0 + lane/4 (+8 for e >= 2), activation row m0 + 8 i + 2 (lane % 4) (+1 for odd e).
template <int NT>
LOOM_DEV void store_acc(const QgArgs& a, const float (&acc)[NT][4], int n0, int m0, int lane) {
    const int N = static_cast<int>(a.w.rows);
    const bool split = gridDim.z > 1;
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = n0 + (lane >> 2) + (e >= 2 ? 8 : 0);
            const int m = m0 + 8 * i + 2 * (lane & 3) + (e & 1);
            if (n >= N || m >= a.M) continue;
            if (split) {
                a.part[(static_cast<int64_t>(blockIdx.z) * a.M + m) * N + n] = acc[i][e];
            } else {
                float* yp = a.y + static_cast<int64_t>(m) * a.ldy + n;
                *yp = a.add ? *yp + acc[i][e] : acc[i][e];
            }
        }
}

/// The fragment kernels (k_qgemm_frag.cu) for qgemm_frag_takes() calls, Q4_K or Q6_K by a.w.type: NT
/// 8-row activation tiles a block (2, 4, 6 or 8; 2 or 4 with a.x_lo), `splits` K splits (at most
/// one per 256 columns). With a.x_lo (the split products) the exact kernel: integer weights
/// exact in F16, the activations' high and low parts, the block scales applied in F32.
void qgemm_frag(const QgArgs& a, int nt, int splits, gpuStream_t s);

}  // namespace qg
}  // namespace loom::gpu
#endif  // !LOOM_GPU_HIP
