// Device helpers shared by the layer kernels (k_layers.cu, k_attn_decode.cu, k_attn_page.cu,
// k_prefill.cu): paged KV addressing
// (engine/kv_layout.hpp through a row's block table, F16 or F32 elements) and block reductions
// (also used by the sampler, k_sample.cuh).
#pragma once

#include <cmath>

#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {
namespace {

constexpr float kNegInf = -INFINITY;

// Query heads a KV head (at most 8) rounded up to the decode attention kernels' template sizes
// 1, 2, 4 and 8.
constexpr int group_bucket(int group) { return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8; }

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

// op over v of every thread of the block (blockDim.x a multiple of the warp): each warp
// reduces its lanes (warp_reduce), then every thread folds the warp results into `init` in warp
// order, so every thread gets the same value and the order never depends on timing. sh holds
// blockDim.x / kWarp entries; it may have been read just before the call and may be reused at
// once after it (barriers before the write and after the fold).
template <class T, class Op>
LOOM_DEV T block_reduce(T v, T* sh, T init, Op op) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int nw = static_cast<int>(blockDim.x) / kWarp;
    v = warp_reduce(v, op);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    T r = init;
    for (int w = 0; w < nw; ++w) r = op(r, sh[w]);
    __syncthreads();
    return r;
}

// Maximum over the block (fmaxf; -inf when every v is -inf or NaN); every thread gets it.
LOOM_DEV float block_max(float v, float* sh) { return block_reduce(v, sh, kNegInf, MaxOp{}); }

// Sum over the block in T (float or double), warps added in order; every thread gets it.
template <class T>
LOOM_DEV T block_sum(T v, T* sh) {
    return block_reduce(v, sh, T(0), AddOp{});
}

}  // namespace
}  // namespace loom::gpu
