// Test helper of the GPU kernel checks (tests/gpu): a host vector copied to new device memory.
#pragma once

#include <vector>

#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu::test {

/// A device copy of h (h.size() elements of T, plus 16 bytes of slack so that 16-byte loads at the
/// end stay inside the allocation); free it with gpuFree. Throws GpuError (LOOM_GPU_CHECK) when
/// the allocation or the copy fails.
template <class T>
T* device_copy(const std::vector<T>& h) {
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, h.size() * sizeof(T) + 16));
    LOOM_GPU_CHECK(gpuMemcpy(p, h.data(), h.size() * sizeof(T), gpuMemcpyHostToDevice));
    return static_cast<T*>(p);
}

}  // namespace loom::gpu::test
