// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for the decode GEMM's fragment kernels
// (k_qgemm_frag.cu): A (64 weight rows x 16 columns, F16) from the registers of the four warps of
// a warpgroup, each warp's 16 rows in mma.m16n8k16's A fragment layout; B (16 columns x N
// activation rows, F16) from shared memory in the K-major layout without swizzle; D (64 x N, F32)
// in registers, each warp's 16 rows in m16n8k16's accumulator layout, one 8-column tile after
// another. So a kernel that decodes weights into m16n8k16 A fragments and keeps acc[NT][4] feeds
// wgmma unchanged; only its activations move to the core-matrix layout below.
//
// Shared-memory layout of the activations (WgLayout): core matrices of 8 activation rows x 8
// columns (16 bytes a row, 128 bytes each, contiguous); the core matrix of column chunk c (8
// columns) and row group r (8 rows) at ((c * MT/8) + r) * 128 bytes. K step s (columns 16s..)
// starts at chunk 2s: its two chunks are LBO = MT * 16 bytes apart (the leading, K, dimension)
// and its row groups SBO = 128 bytes apart (the stride, N, dimension).
//
// Sources: PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions":
// wgmma.mma_async (register A, .f16 operands, .f32 accumulators, shapes m64nNk16), "Register
// Fragments" (A and D of m64nNk16), "Shared Memory Matrix Layout" (core matrices; K-major without
// swizzle) and "Matrix Descriptor Format" (start address, leading- and stride-dimension byte
// offsets, each >> 4 in 14 bits; swizzle mode 0 in bits 62-63), wgmma.fence, commit_group,
// wait_group; "fence.proxy.async" (ordinary shared-memory stores become visible to wgmma's
// async proxy). In the emulator build each warp computes its 16 rows with the emulated
// m16n8k16 product, reading B where the descriptor's layout puts it.
#pragma once

#include "engine/backends/gpu/k_qgemm.cuh"

#if !defined(LOOM_GPU_HIP)
namespace loom::gpu::qg {

/// The activation tile's core-matrix layout for MT rows (a multiple of 8): the offset in halves
/// of activation row n, column k (0..255) of one 256-column block.
template <int MT>
struct WgLayout {
    static constexpr int kChunk = MT * 8;  // halves between column chunks (LBO = MT * 16 bytes)
    static LOOM_HD int at(int n, int k) { return (k >> 3) * kChunk + (n >> 3) * 64 + (n & 7) * 8 + (k & 7); }
};

// The matrix descriptor of K step 0 of the tile at s (shared memory, 16-byte aligned): LBO =
// MT * 16 bytes, SBO = 128 bytes, no swizzle. Another step's is this plus its offset in bytes
// (WgLayout<MT>::at(0, 16 step) halves) >> 4 in the address field.
template <int MT>
LOOM_DEV uint64_t wg_desc(const uint16_t* s) {
#if defined(__CUDA_ARCH__)
    const auto addr = static_cast<uint64_t>(__cvta_generic_to_shared(s));
#else
    const uint64_t addr = 0;
    (void)s;
#endif
    constexpr uint64_t kLbo = (MT * 16) >> 4, kSbo = 128 >> 4;
    return ((addr & 0x3FFFFu) >> 4) | (kLbo << 16) | (kSbo << 32);
}

/// wgmma.fence: orders this thread's register writes (A fragments, accumulators) before the
/// next wgmma reads them.
LOOM_DEV void wg_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/// Closes the group of wgmma issued since the last commit.
LOOM_DEV void wg_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/// Waits until at most N committed wgmma groups are in flight.
template <int N>
LOOM_DEV void wg_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/// Makes this thread's ordinary shared-memory stores visible to wgmma (before the barrier).
LOOM_DEV void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

#define LOOM_WG_F4(i) "+f"(c[i][0]), "+f"(c[i][1]), "+f"(c[i][2]), "+f"(c[i][3])

/// c += A . B for the warpgroup's 64 x 8NT tile: a this warp's A fragment (m16n8k16 layout),
/// desc B's descriptor (k16 x 8NT, WgLayout<8NT> at one K step), s the same tile's address for
/// the emulator. Asynchronous on the GPU: c and a stay untouched until wg_wait says so.
template <int NT>
LOOM_DEV void wgmma_f16(float (&c)[NT][4], const uint32_t (&a)[4], uint64_t desc, const uint16_t* s) {
#if defined(LOOM_GPU_EMU)
    (void)desc;
    const int l = ::loom::emu::lane(), g = l >> 2, t = l & 3;
    for (int i = 0; i < NT; ++i) {  // B column n = 8i + g: rows 2t.. (chunk 0) and 2t + 8.. (chunk 1)
        const uint16_t* p = s + WgLayout<8 * NT>::at(8 * i + g, 2 * t);
        mma16816(c[i], a, ld_pair(p), ld_pair(p + WgLayout<8 * NT>::kChunk));
    }
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
    (void)s;
    if constexpr (NT == 4) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,"
            "%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
            : LOOM_WG_F4(0), LOOM_WG_F4(1), LOOM_WG_F4(2), LOOM_WG_F4(3)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
    } else if constexpr (NT == 6) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,"
            "%15,%16,%17,%18,%19,%20,%21,%22,%23}, {%24,%25,%26,%27}, %28, p, 1, 1, 0;\n}\n"
            : LOOM_WG_F4(0), LOOM_WG_F4(1), LOOM_WG_F4(2), LOOM_WG_F4(3), LOOM_WG_F4(4), LOOM_WG_F4(5)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
    } else {
        static_assert(NT == 8, "wgmma_f16: 4, 6 or 8 activation tiles");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,"
            "%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, "
            "0;\n}\n"
            : LOOM_WG_F4(0), LOOM_WG_F4(1), LOOM_WG_F4(2), LOOM_WG_F4(3), LOOM_WG_F4(4), LOOM_WG_F4(5), LOOM_WG_F4(6),
              LOOM_WG_F4(7)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
    }
#else
    (void)c, (void)a, (void)desc, (void)s;
    __trap();  // wgmma needs sm_90a
#endif
}
#undef LOOM_WG_F4

}  // namespace loom::gpu::qg
#endif  // !LOOM_GPU_HIP
