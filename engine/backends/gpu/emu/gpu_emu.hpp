// A CPU emulator of the small part of the CUDA programming model loom's kernels use, so that
// the GPU backend's kernels run and are tested on machines without a GPU (LOOM_GPU_EMU builds).
//
// Each block runs its threads as cooperative fibers on the calling thread, one block after the
// other. __syncthreads is a barrier over the block's fibers; warp shuffles and __syncwarp are
// barriers over a warp's fibers with an exchange slot per lane. `__shared__` becomes `static`,
// which is shared memory exactly because blocks run one at a time. Memory is host memory (4 GiB
// of "device memory" in all, as gpuMemGetInfo reports it; only what is written is resident), all
// "asynchronous" calls complete before they return, and graphs are not available. Semantics
// follow the CUDA C++ Programming Guide (thread hierarchy, barriers, warp shuffle functions).
#pragma once

#include <math.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#ifndef LOOM_EMU_WARP
#define LOOM_EMU_WARP 32
#endif

/// CUDA's dim3 / uint3: grid and block extents and indices.
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(8) uint2 {
    unsigned x, y;
};

namespace loom::emu {

/// Indices of the fiber that runs now.
struct ThreadCtx {
    dim3 tid, bid, bdim, gdim;
};
extern ThreadCtx g_ctx;

/// Runs `body` for every thread of every block of the grid; returns when all are done. As CUDA
/// does, refuses (std::runtime_error) a launch of more than 48 KiB of dynamic shared memory
/// unless set_max_dyn_smem raised kernel `key`'s limit that far first.
void launch(const void* key, dim3 grid, dim3 block, size_t dyn_smem_bytes, const std::function<void()>& body);
/// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): records the
/// limit launch() checks for kernel `key`; returns 0 (refuses nothing).
int set_max_dyn_smem(const void* key, size_t bytes);
/// The kernel function (or pointer) f as the key launch() and set_max_dyn_smem() share.
template <class F>
const void* kernel_key(F* f) {
    return reinterpret_cast<const void*>(f);
}
/// The launch's dynamic shared memory (filled with 0xFF bytes at each block's start).
void* dyn_smem();
/// Block-wide barrier (__syncthreads).
void syncthreads();
/// Warp-wide barrier (__syncwarp).
void syncwarp();
/// 8-byte exchange among the warp's lanes: returns the value lane `src` stored.
uint64_t exchange(uint64_t bits, int src);
/// Lane of the running fiber within its warp.
int lane();

/// __shfl_xor over the emulated warp.
template <class T>
T shfl_xor(T v, int mask) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    b = exchange(b, lane() ^ mask);
    T r;
    std::memcpy(&r, &b, sizeof(T));
    return r;
}

/// __shfl_sync over the emulated warp: v of lane `src`.
template <class T>
T shfl(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    b = exchange(b, src);
    T r;
    std::memcpy(&r, &b, sizeof(T));
    return r;
}

/// IEEE half bits -> float and back (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

}  // namespace loom::emu

#define threadIdx (::loom::emu::g_ctx.tid)
#define blockIdx (::loom::emu::g_ctx.bid)
#define blockDim (::loom::emu::g_ctx.bdim)
#define gridDim (::loom::emu::g_ctx.gdim)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) alignas(n)
#define __restrict__ __restrict
#define __syncthreads() ::loom::emu::syncthreads()

using std::max;
using std::min;
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __uint_as_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
/// atomicAdd for int, unsigned, float and double (CUDA's overloads): adds v to *p and returns
/// the old value. v is not deduced, so an int literal converts as it does for CUDA's overloads.
/// Atomic because one block's fibers never run at the same time.
template <class T>
inline T atomicAdd(T* p, std::type_identity_t<T> v) {
    const T o = *p;
    *p += v;
    return o;
}
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    const uint64_t v = (static_cast<uint64_t>(y) << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
inline int atomicMax(int* p, int v) {
    const int o = *p;
    if (v > o) *p = v;
    return o;
}
inline int atomicMin(int* p, int v) {
    const int o = *p;
    if (v < o) *p = v;
    return o;
}

// ---- host runtime -----------------------------------------------------------------------
using gpuError_t = int;
using gpuStream_t = void*;
using gpuEvent_t = double*;  // wall-clock milliseconds at record time
using gpuGraph_t = void*;
using gpuGraphExec_t = void*;
#define gpuSuccess 0
enum { gpuMemcpyHostToDevice, gpuMemcpyDeviceToHost, gpuMemcpyDeviceToDevice };

gpuError_t gpuMalloc(void** p, size_t n);
gpuError_t gpuFree(void* p);
gpuError_t gpuMallocHost(void** p, size_t n);
gpuError_t gpuFreeHost(void* p);
gpuError_t gpuMemcpy(void* d, const void* s, size_t n, int kind);
gpuError_t gpuMemcpyAsync(void* d, const void* s, size_t n, int kind, gpuStream_t st = nullptr);
gpuError_t gpuMemsetAsync(void* d, int v, size_t n, gpuStream_t st = nullptr);
gpuError_t gpuStreamCreate(gpuStream_t* s);
gpuError_t gpuStreamDestroy(gpuStream_t s);
gpuError_t gpuStreamSynchronize(gpuStream_t s);
gpuError_t gpuEventCreate(gpuEvent_t* e);
gpuError_t gpuEventDestroy(gpuEvent_t e);
gpuError_t gpuEventRecord(gpuEvent_t e, gpuStream_t s = nullptr);
gpuError_t gpuEventSynchronize(gpuEvent_t e);
gpuError_t gpuEventElapsedTime(float* ms, gpuEvent_t a, gpuEvent_t b);
gpuError_t gpuGetLastError();
gpuError_t gpuDeviceSynchronize();
gpuError_t gpuMemGetInfo(size_t* free_bytes, size_t* total_bytes);
const char* gpuGetErrorString(gpuError_t e);
inline gpuError_t gpuGraphDestroy(gpuGraph_t) { return 0; }
inline gpuError_t gpuGraphExecDestroy(gpuGraphExec_t) { return 0; }
#define gpuFuncSetMaxDynamicSmem(f, bytes) ::loom::emu::set_max_dyn_smem(::loom::emu::kernel_key(f), (bytes))
