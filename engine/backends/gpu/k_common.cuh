// Device helpers shared by the layer kernels (k_layers.cu, k_prefill.cu): paged KV addressing
// (engine/kv_layout.hpp through a row's block table, F16 or F32 elements) and block reductions
// (also used by the sampler, k_sample.cuh).
#pragma once

#include <cmath>

#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {
namespace {

constexpr float kNegInf = -INFINITY;

LOOM_DEV float kv_load(const void* base, int64_t i, bool f16) {
    return f16 ? h2f(static_cast<const uint16_t*>(base)[i]) : static_cast<const float*>(base)[i];
}
LOOM_DEV void kv_store(void* base, int64_t i, float v, bool f16) {
    if (f16) static_cast<uint16_t*>(base)[i] = f2h(v);
    else static_cast<float*>(base)[i] = v;
}
// Element offset of the K (v = 0) or V (v = 1) row of position `pos` in `layer`, for the
// sequence whose block table starts at kv.tables[table].
LOOM_DEV int64_t kv_off(const PagedKv& kv, int layer, int32_t table, int pos, int v) {
    return kv.layout.offset_at(layer, kv.tables + table, pos, v);
}

// Maximum over the block (blockDim.x a multiple of the warp); every thread gets it, and sh
// (blockDim.x / kWarp entries) may be reused at once.
LOOM_DEV float block_max(float v, float* sh) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int nw = static_cast<int>(blockDim.x) / kWarp;
    v = warp_max(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = -INFINITY;
    for (int w = 0; w < nw; ++w) r = fmaxf(r, sh[w]);
    __syncthreads();
    return r;
}

// Sum over the block (blockDim.x a multiple of the warp) in float, warps added in order; every
// thread gets it.
LOOM_DEV float block_sum_f(float v, float* sh) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int nw = static_cast<int>(blockDim.x) / kWarp;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = 0;
    for (int w = 0; w < nw; ++w) t += sh[w];
    return t;
}

// Sum over the block (blockDim.x a multiple of the warp) in double; every thread gets it.
LOOM_DEV double block_sum_d(double v, double* sh) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int nw = static_cast<int>(blockDim.x) / kWarp;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double t = 0;
    for (int w = 0; w < nw; ++w) t += sh[w];
    return t;
}

}  // namespace
}  // namespace loom::gpu
