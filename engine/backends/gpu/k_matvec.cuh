// What the decode matvec kernel (k_matvec.cu) needs beside the chunk codecs: the block size, the
// addressing of a fused launch's segments, the epilogue's row store (plain, residual add, RoPE,
// paged K/V store), and the dispatch of a weight type to its template.
#pragma once

#include <string>
#include <type_traits>

#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {

namespace {

constexpr int kMvThreads = 128;

/// Calls f(std::integral_constant<uint32_t, T>{}) for the weight type t (kF32, kF16, kBF16,
/// kQ8_0, kQ4_K or kQ6_K); throws GpuError("<what>: unsupported type <t>") for any other.
template <class F>
void with_type(uint32_t t, const char* what, F&& f) {
    switch (t) {
        case kF32: f(std::integral_constant<uint32_t, kF32>{}); break;
        case kF16: f(std::integral_constant<uint32_t, kF16>{}); break;
        case kBF16: f(std::integral_constant<uint32_t, kBF16>{}); break;
        case kQ8_0: f(std::integral_constant<uint32_t, kQ8_0>{}); break;
        case kQ4_K: f(std::integral_constant<uint32_t, kQ4_K>{}); break;
        case kQ6_K: f(std::integral_constant<uint32_t, kQ6_K>{}); break;
        default: throw GpuError(std::string(what) + ": unsupported type " + std::to_string(t));
    }
}

/// Outputs of a launch: the rows of all its segments, or in SwiGLU mode the rows of the first
/// (gate) segment, each output taking one gate and one up row.
LOOM_HD inline int matvec_units(const MatvecArgs& a) {
    if (a.mode == MvMode::SwiGLU) return a.seg[0].rows;
    return a.seg[0].rows + (a.nseg > 1 ? a.seg[1].rows : 0) + (a.nseg > 2 ? a.seg[2].rows : 0);
}

// Locates logical row o of a (non-SwiGLU) launch: its segment and row within it. Segments are
// picked by selects, not by a run-time index into the parameter struct (which would copy it
// to local memory).
LOOM_DEV int seg_of(const MatvecArgs& a, int o, int& local) {
    local = o;
    if (a.nseg > 1 && local >= a.seg[0].rows) {
        local -= a.seg[0].rows;
        if (a.nseg > 2 && local >= a.seg[1].rows) {
            local -= a.seg[1].rows;
            return 2;
        }
        return 1;
    }
    return 0;
}
LOOM_DEV const uint8_t* seg_w(const MatvecArgs& a, int s) {
    return s == 0 ? a.seg[0].w : s == 1 ? a.seg[1].w : a.seg[2].w;
}
LOOM_DEV float* seg_y(const MatvecArgs& a, int s) { return s == 0 ? a.seg[0].y : s == 1 ? a.seg[1].y : a.seg[2].y; }

// Writes row `local` of segment s for activation vector b: a plain store or residual add, or
// (seg_role) RoPE on the pair (v, vp) where vp is the partner row's sum, and the q store or
// K/V store at rows[b]'s position through its block table, as rope_store computes them.
LOOM_DEV void store_row(const MatvecArgs& a, int s, int local, int b, float v, float vp) {
    const int role = s == 0 ? a.seg_role[0] : s == 1 ? a.seg_role[1] : a.seg_role[2];
    if (role == 0) {
        float* y = seg_y(a, s) + b * a.y_stride + local;
        if (a.mode == MvMode::Add) *y += v;
        else *y = v;
        return;
    }
    const RowDesc rd = a.rows[b];
    const int pos = rd.pos;
    float out = v;
    const int i = local % a.head_dim;
    if (role != 3 && i < a.rope_dim) {
        const int half = a.rope_dim / 2, ip = i / 2;
        const float cs = a.rope_cs[(int64_t{pos} * half + ip) * 2], sn = a.rope_cs[(int64_t{pos} * half + ip) * 2 + 1];
        if ((i & 1) == 0) {
            const float x0 = v, x1 = vp;
            out = x0 * cs - x1 * sn;
        } else {
            const float x0 = vp, x1 = v;
            out = x0 * sn + x1 * cs;
        }
    }
    if (role == 1) {
        seg_y(a, s)[b * a.y_stride + local] = out;
    } else {
        const int64_t off = a.kv.layout.offset_at(a.layer, a.kv.tables + rd.table, pos, role == 2 ? 0 : 1) + local;
        if (a.kv.f16) static_cast<uint16_t*>(a.kv.pool)[off] = f2h(out);
        else static_cast<float*>(a.kv.pool)[off] = out;
    }
}

}  // namespace
}  // namespace loom::gpu
