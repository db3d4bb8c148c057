// Portability layer: one set of kernel and host sources for CUDA (nvcc), HIP (hipcc) and a CPU
// emulator (LOOM_GPU_EMU, engine/backends/gpu/emu), selected at compile time.
//
// Host side: gpuMalloc, gpuMemcpyAsync, streams, events and graphs map to cuda* / hip* (the HIP
// runtime API mirrors the CUDA runtime API name for name, see the HIP porting guide) or to the
// emulator. Device side: warp size (32 on NVIDIA, 64 on AMD gfx9 wavefronts), warp shuffles
// (__shfl_xor_sync in CUDA, __shfl_xor in HIP 5.x), half-float conversions on raw uint16_t bits,
// and LOOM_LAUNCH(kernel_pointer, grid, block, smem_bytes, stream, args...) for <<<...>>>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(LOOM_GPU_EMU)
#include "engine/backends/gpu/emu/gpu_emu.hpp"
#define LOOM_GPU_BACKEND_NAME "emu"
#elif defined(LOOM_GPU_HIP) || defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#ifndef LOOM_GPU_HIP
#define LOOM_GPU_HIP 1
#endif
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#else
#include <hip/hip_runtime_api.h>
#endif
#define LOOM_GPU_BACKEND_NAME "hip"
#else
#ifndef LOOM_GPU_CUDA
#define LOOM_GPU_CUDA 1
#endif
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#define LOOM_GPU_BACKEND_NAME "cuda"
#endif

/// Marks small struct methods callable from host and device code.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define LOOM_HD __host__ __device__
#else
#define LOOM_HD
#endif

// ---- host API names ---------------------------------------------------------------------
#if defined(LOOM_GPU_HIP)
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuGraph_t = hipGraph_t;
using gpuGraphExec_t = hipGraphExec_t;
#define gpuSuccess hipSuccess
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocHost hipHostMalloc
#define gpuFreeHost hipHostFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreate hipStreamCreate
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuMemGetInfo hipMemGetInfo
#define gpuStreamBeginCapture(s) hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(e, g) hipGraphInstantiate(e, g, nullptr, nullptr, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuFuncSetMaxDynamicSmem(f, bytes) \
    hipFuncSetAttribute(reinterpret_cast<const void*>(f), hipFuncAttributeMaxDynamicSharedMemorySize, bytes)
#define LOOM_GPU_HAS_GRAPHS 1
#elif defined(LOOM_GPU_CUDA)
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuGraph_t = cudaGraph_t;
using gpuGraphExec_t = cudaGraphExec_t;
#define gpuSuccess cudaSuccess
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocHost cudaMallocHost
#define gpuFreeHost cudaFreeHost
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreate cudaStreamCreate
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuMemGetInfo cudaMemGetInfo
#define gpuStreamBeginCapture(s) cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(e, g) cudaGraphInstantiate(e, g, 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuFuncSetMaxDynamicSmem(f, bytes) \
    cudaFuncSetAttribute(reinterpret_cast<const void*>(f), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
#define LOOM_GPU_HAS_GRAPHS 1
#else
#define LOOM_GPU_HAS_GRAPHS 0
#endif

namespace loom::gpu {

/// A failed GPU runtime call or kernel launch; what() names the call, file and line.
class GpuError : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Throws GpuError when `e` is not gpuSuccess (used through LOOM_GPU_CHECK).
inline void check(gpuError_t e, const char* what, const char* file, int line) {
    if (e != gpuSuccess)
        throw GpuError(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                       gpuGetErrorString(e));
}

}  // namespace loom::gpu

#define LOOM_GPU_CHECK(call) ::loom::gpu::check((call), #call, __FILE__, __LINE__)
/// Checks the last launch error (a bad configuration shows here; faults show at the next sync).
#define LOOM_GPU_CHECK_LAUNCH() ::loom::gpu::check(gpuGetLastError(), "kernel launch", __FILE__, __LINE__)

// ---- device helpers (kernel sources only) -----------------------------------------------
#if defined(LOOM_GPU_EMU) || defined(__CUDACC__) || defined(__HIPCC__)

#if defined(LOOM_GPU_EMU)
#define LOOM_DEV inline
#define LOOM_WARP LOOM_EMU_WARP
#define LOOM_LAUNCH(k, grid, block, smem, stream, ...) \
    ::loom::emu::launch(dim3(grid), dim3(block), (smem), [=]() { k(__VA_ARGS__); })
#define LOOM_DYN_SMEM(T, name) T* name = reinterpret_cast<T*>(::loom::emu::dyn_smem())
#else
#define LOOM_DEV __device__ __forceinline__
#define LOOM_LAUNCH(k, grid, block, smem, stream, ...) k<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define LOOM_DYN_SMEM(T, name)                                \
    extern __shared__ __align__(16) uint8_t loom_dyn_smem_[]; \
    T* name = reinterpret_cast<T*>(loom_dyn_smem_)
#if defined(LOOM_GPU_HIP)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define LOOM_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define LOOM_WARP 64  // host pass: the gfx9 (CDNA) wavefront the build targets
#endif
#else
#define LOOM_WARP 32
#endif
#endif

namespace loom::gpu {

/// Threads per warp (NVIDIA) or wavefront (AMD): 32 or 64. Kernels size warp reductions by it.
constexpr int kWarp = LOOM_WARP;

/// v from lane (own lane ^ mask) of the warp; all lanes of the warp must call it.
template <class T>
LOOM_DEV T shfl_xor(T v, int mask) {
#if defined(LOOM_GPU_EMU)
    return ::loom::emu::shfl_xor(v, mask);
#elif defined(LOOM_GPU_HIP)
    return __shfl_xor(v, mask);
#else
    return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

/// Orders the warp's shared-memory accesses (a no-op on AMD's lock-step wavefronts).
LOOM_DEV void sync_warp() {
#if defined(LOOM_GPU_EMU)
    ::loom::emu::syncwarp();
#elif defined(LOOM_GPU_HIP)
    __builtin_amdgcn_wave_barrier();
#else
    __syncwarp();
#endif
}

/// IEEE binary16 bits -> float.
LOOM_DEV float h2f(uint16_t h) {
#if defined(LOOM_GPU_EMU)
    return ::loom::emu::half_to_float(h);
#else
    return __half2float(__ushort_as_half(h));
#endif
}

/// float -> IEEE binary16 bits, round to nearest even.
LOOM_DEV uint16_t f2h(float f) {
#if defined(LOOM_GPU_EMU)
    return ::loom::emu::float_to_half(f);
#else
    return __half_as_ushort(__float2half_rn(f));
#endif
}

/// bfloat16 bits -> float (the high half of the float's bits).
LOOM_DEV float bf2f(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

/// Sum of v over the warp, in every lane.
LOOM_DEV float warp_sum(float v) {
#pragma unroll
    for (int m = kWarp / 2; m > 0; m >>= 1) v += shfl_xor(v, m);
    return v;
}

/// Sum of v over the warp in double, in every lane.
LOOM_DEV double warp_sum_d(double v) {
#pragma unroll
    for (int m = kWarp / 2; m > 0; m >>= 1) v += shfl_xor(v, m);
    return v;
}

/// Maximum of v over the warp, in every lane.
LOOM_DEV float warp_max(float v) {
#pragma unroll
    for (int m = kWarp / 2; m > 0; m >>= 1) v = fmaxf(v, shfl_xor(v, m));
    return v;
}

/// 16-byte load (p must be 16-byte aligned).
LOOM_DEV uint4 ld16(const void* p) { return *reinterpret_cast<const uint4*>(p); }

}  // namespace loom::gpu

#endif  // device helpers
