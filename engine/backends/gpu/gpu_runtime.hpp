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
// The HIP runtime API mirrors the CUDA one name for name (hipMalloc for cudaMalloc, ...), so one
// table maps each gpu* name to LOOM_GPU_RT(Name), the vendor prefix pasted onto the common
// suffix; only the calls whose names or arguments differ are spelled per vendor.
#if defined(LOOM_GPU_HIP) || defined(LOOM_GPU_CUDA)
#if defined(LOOM_GPU_HIP)
#define LOOM_GPU_RT(name) hip##name
#define gpuMallocHost hipHostMalloc
#define gpuFreeHost hipHostFree
#define gpuGraphInstantiate(e, g) hipGraphInstantiate(e, g, nullptr, nullptr, 0)
#define gpuFuncSetMaxDynamicSmem(f, bytes) \
    hipFuncSetAttribute(reinterpret_cast<const void*>(f), hipFuncAttributeMaxDynamicSharedMemorySize, bytes)
#else
#define LOOM_GPU_RT(name) cuda##name
#define gpuMallocHost cudaMallocHost
#define gpuFreeHost cudaFreeHost
#define gpuGraphInstantiate(e, g) cudaGraphInstantiate(e, g, 0)
#define gpuFuncSetMaxDynamicSmem(f, bytes) \
    cudaFuncSetAttribute(reinterpret_cast<const void*>(f), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
#endif
using gpuError_t = LOOM_GPU_RT(Error_t);
using gpuStream_t = LOOM_GPU_RT(Stream_t);
using gpuEvent_t = LOOM_GPU_RT(Event_t);
using gpuGraph_t = LOOM_GPU_RT(Graph_t);
using gpuGraphExec_t = LOOM_GPU_RT(GraphExec_t);
#define gpuSuccess LOOM_GPU_RT(Success)
#define gpuMalloc LOOM_GPU_RT(Malloc)
#define gpuFree LOOM_GPU_RT(Free)
#define gpuMemcpy LOOM_GPU_RT(Memcpy)
#define gpuMemcpyAsync LOOM_GPU_RT(MemcpyAsync)
#define gpuMemsetAsync LOOM_GPU_RT(MemsetAsync)
#define gpuMemcpyHostToDevice LOOM_GPU_RT(MemcpyHostToDevice)
#define gpuMemcpyDeviceToHost LOOM_GPU_RT(MemcpyDeviceToHost)
#define gpuMemcpyDeviceToDevice LOOM_GPU_RT(MemcpyDeviceToDevice)
#define gpuStreamCreate LOOM_GPU_RT(StreamCreate)
#define gpuStreamDestroy LOOM_GPU_RT(StreamDestroy)
#define gpuStreamSynchronize LOOM_GPU_RT(StreamSynchronize)
#define gpuEventCreate LOOM_GPU_RT(EventCreate)
#define gpuEventDestroy LOOM_GPU_RT(EventDestroy)
#define gpuEventRecord LOOM_GPU_RT(EventRecord)
#define gpuEventSynchronize LOOM_GPU_RT(EventSynchronize)
#define gpuEventElapsedTime LOOM_GPU_RT(EventElapsedTime)
#define gpuGetLastError LOOM_GPU_RT(GetLastError)
#define gpuGetErrorString LOOM_GPU_RT(GetErrorString)
#define gpuDeviceSynchronize LOOM_GPU_RT(DeviceSynchronize)
#define gpuMemGetInfo LOOM_GPU_RT(MemGetInfo)
#define gpuStreamBeginCapture(s) LOOM_GPU_RT(StreamBeginCapture)(s, LOOM_GPU_RT(StreamCaptureModeThreadLocal))
#define gpuStreamEndCapture LOOM_GPU_RT(StreamEndCapture)
#define gpuGraphLaunch LOOM_GPU_RT(GraphLaunch)
#define gpuGraphDestroy LOOM_GPU_RT(GraphDestroy)
#define gpuGraphExecDestroy LOOM_GPU_RT(GraphExecDestroy)
#define LOOM_GPU_HAS_GRAPHS 1
#else
#define LOOM_GPU_HAS_GRAPHS 0
#endif

namespace loom::gpu {

/// Bytes of dynamic shared memory a kernel may take without gpuFuncSetMaxDynamicSmem raising
/// its limit (CUDA C++ Programming Guide, "Shared Memory": 48 KiB by default).
constexpr size_t kDefaultDynSmemBytes = 48 * 1024;

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
    ::loom::emu::launch(::loom::emu::kernel_key(k), dim3(grid), dim3(block), (smem), [=]() { k(__VA_ARGS__); })
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

// A const struct kernel parameter read in place from the parameter space although its address
// is taken (lambdas capturing it by reference, helpers taking it by const reference), instead
// of copied into registers or local memory first (CUDA C++ Programming Guide, "__grid_constant__";
// sm_70 and up). In the decode GEMM's fragment kernel the copy cost 40 bytes of spills a
// thread at 64 rows (docs/benchmarks.md). Nothing elsewhere.
#if defined(__CUDACC__) && !defined(LOOM_GPU_EMU)
#define LOOM_GRID_CONST __grid_constant__
#else
#define LOOM_GRID_CONST
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

/// v from lane `src` of the warp (src may differ between lanes); all lanes of the warp must call it.
template <class T>
LOOM_DEV T shfl_idx(T v, int src) {
#if defined(LOOM_GPU_EMU)
    return ::loom::emu::shfl(v, src);
#elif defined(LOOM_GPU_HIP)
    return __shfl(v, src);
#else
    return __shfl_sync(0xffffffffu, v, src);
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

/// The F16 low part of x whose high part is hi = f2h(x): the exact difference x - hi rounded
/// once, so that hi + lo is x to about 2^-22 of it (the F16 high and low parts of the split
/// products and of the GEMM prefill attention's operands; IEEE 754: x - hi is exact, Sterbenz).
LOOM_DEV uint16_t f16_lo(float x, uint16_t hi) { return f2h(x - h2f(hi)); }

/// bfloat16 bits -> float (the high half of the float's bits).
LOOM_DEV float bf2f(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

/// a + b: the sum reductions' operator (float or double).
struct AddOp {
    template <class T>
    LOOM_DEV T operator()(T a, T b) const {
        return a + b;
    }
};

/// fmaxf(a, b): the maximum reductions' operator (a NaN operand is ignored, as fmaxf does).
struct MaxOp {
    LOOM_DEV float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// op over v of every lane of the warp (butterfly: masks kWarp/2 down to 1), in every lane; all
/// lanes of the warp must call it. Every lane combines the same values in the same order.
template <class T, class Op>
LOOM_DEV T warp_reduce(T v, Op op) {
#pragma unroll
    for (int m = kWarp / 2; m > 0; m >>= 1) v = op(v, shfl_xor(v, m));
    return v;
}

/// Sum of v over the warp, in every lane.
LOOM_DEV float warp_sum(float v) { return warp_reduce(v, AddOp{}); }

/// Sum of v over the warp in double, in every lane.
LOOM_DEV double warp_sum_d(double v) { return warp_reduce(v, AddOp{}); }

/// Maximum of v over the warp, in every lane.
LOOM_DEV float warp_max(float v) { return warp_reduce(v, MaxOp{}); }

/// 16-byte load (p must be 16-byte aligned).
LOOM_DEV uint4 ld16(const void* p) { return *reinterpret_cast<const uint4*>(p); }

}  // namespace loom::gpu

#endif  // device helpers
