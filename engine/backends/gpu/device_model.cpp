// Weight upload and the device row layouts; see device_model.hpp and kernels.hpp (DevMatrix).
#include "engine/backends/gpu/device_model.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "model/gguf/ggml_types.hpp"
#include "model/gguf/hparams.hpp"

namespace loom::gpu {

bool device_type_supported(uint32_t type) {
    return type == kF32 || type == kF16 || type == kBF16 || type == kQ8_0 || type == kQ4_K || type == kQ6_K;
}

size_t device_row_bytes(uint32_t type, int64_t cols) {
    auto round = [](size_t n, size_t a) { return (n + a - 1) / a * a; };
    switch (type) {
        case kF32: return round(static_cast<size_t>(cols) * 4, 64);
        case kF16:
        case kBF16: return round(static_cast<size_t>(cols) * 2, 64);
        case kQ8_0:
            if (cols % 32) break;
            return round(static_cast<size_t>(cols) + static_cast<size_t>(cols) / 16, 16);
        case kQ4_K:
            if (cols % 256) break;
            return static_cast<size_t>(cols) / 256 * 144;
        case kQ6_K:
            if (cols % 256) break;
            return static_cast<size_t>(cols) / 256 * 224;
        default: break;
    }
    throw std::invalid_argument("no device layout for type " + model::type_name(type) + " with " +
                                std::to_string(cols) + " columns");
}

void repack_rows(uint32_t type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
    const size_t db = device_row_bytes(type, cols);
    const auto tt = model::type_traits(type);
    const size_t sb = static_cast<size_t>(cols) / tt->block_size * tt->type_size;
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* s = src + static_cast<size_t>(r) * sb;
        uint8_t* d = dst + static_cast<size_t>(r) * db;
        std::memset(d, 0, db);
        if (type == kQ8_0) {
            const int64_t nb = cols / 32;
            for (int64_t b = 0; b < nb; ++b) {
                std::memcpy(d + 32 * b, s + 34 * b + 2, 32);   // quants
                std::memcpy(d + cols + 2 * b, s + 34 * b, 2);  // scale
            }
        } else if (type == kQ6_K) {
            const int64_t nb = cols / 256;
            for (int64_t b = 0; b < nb; ++b) std::memcpy(d + 224 * b, s + 210 * b, 210);
        } else {
            std::memcpy(d, s, sb);
        }
    }
}

void check_tensor_types(const model::GgufFile& f, const std::string& engine) {
    for (const auto& t : f.tensors())
        if (t.dims.size() >= 2 && !device_type_supported(t.type))
            throw model::ModelError("tensor '" + std::string(t.name) + "' has type " + model::type_name(t.type) +
                                    ", which " + engine +
                                    " does not support (supported: f32, f16, bf16, q8_0, "
                                    "q4_K, q6_K)");
}

DeviceModel::DeviceModel(const engine::LlamaWeights& w) {
    try {
        tok_embd = upload(w.tok_embd);
        output = w.output.data == w.tok_embd.data ? tok_embd : upload(w.output);
        output_norm = upload_vec(w.output_norm);
        for (const auto& L : w.layers) {
            DevLayer d;
            const engine::Matrix* qkv[3] = {&L.wq, &L.wk, &L.wv};
            DevMatrix qkv_d[3];
            d.wqkv = upload_group(qkv, qkv_d, 3);
            d.wq = qkv_d[0], d.wk = qkv_d[1], d.wv = qkv_d[2];
            const bool qk = d.wq.type == d.wk.type && d.wq.cols == d.wk.cols && d.wq.type != kF32 &&
                            d.wk.data == d.wq.data + d.wq.row_bytes * static_cast<size_t>(d.wq.rows);
            if (!d.wqkv.data && qk) {
                d.wqk = d.wq;
                d.wqk.rows += d.wk.rows;
            }
            d.wo = upload(L.wo);
            const engine::Matrix* gu[2] = {&L.gate, &L.up};
            DevMatrix gu_d[2];
            d.gate_up = upload_group(gu, gu_d, 2);
            d.gate = gu_d[0], d.up = gu_d[1];
            d.down = upload(L.down);
            d.attn_norm = upload_vec(L.attn_norm);
            d.ffn_norm = upload_vec(L.ffn_norm);
            d.bq = upload_vec(L.bq);
            d.bk = upload_vec(L.bk);
            d.bv = upload_vec(L.bv);
            d.q_norm = upload_vec(L.q_norm);
            d.k_norm = upload_vec(L.k_norm);
            layers.push_back(d);
        }
    } catch (...) {
        for (void* p : allocs_) (void)gpuFree(p);
        throw;
    }
}

DeviceModel::~DeviceModel() {
    for (void* p : allocs_) (void)gpuFree(p);
}

DevMatrix DeviceModel::upload(const engine::Matrix& m) {
    DevMatrix d;
    upload_group(std::array<const engine::Matrix*, 1>{&m}.data(), &d, 1);
    return d;
}

DevMatrix DeviceModel::upload_group(const engine::Matrix* const* m, DevMatrix* out, int n) {
    // Each matrix starts 256-byte aligned; one of the same type and width as the one before
    // starts where that one ends (its size is a whole number of such rows, a multiple of 16
    // bytes), so that the group reads as one matrix.
    size_t total = 0;
    bool same = true;
    for (int i = 0; i < n; ++i) {
        DevMatrix& d = out[i];
        d.type = m[i]->type;
        d.rows = m[i]->rows;
        d.cols = m[i]->cols;
        d.row_bytes = device_row_bytes(d.type, d.cols);
        same = same && (i == 0 || (d.type == out[0].type && d.cols == out[0].cols));
        total += d.row_bytes * static_cast<size_t>(d.rows) + 255;
    }
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, total));
    allocs_.push_back(p);
    bytes += total;
    auto* at = static_cast<uint8_t*>(p);
    DevMatrix all = out[0];
    all.rows = 0;
    for (int i = 0; i < n; ++i) {
        out[i].data = at;
        copy_rows(*m[i], out[i]);
        all.rows += out[i].rows;
        at += out[i].row_bytes * static_cast<size_t>(out[i].rows);
        if (!same) at += (256 - reinterpret_cast<uintptr_t>(at) % 256) % 256;
    }
    all.data = out[0].data;
    // F32 weights (small test models) keep their separate products: nothing to gain there, and
    // their cuBLAS F32 products then round as before.
    if (!same || all.type == kF32) all = DevMatrix{};
    return all;
}

void DeviceModel::copy_rows(const engine::Matrix& m, const DevMatrix& d) {
    auto* dst = const_cast<uint8_t*>(d.data);
    const size_t total = d.row_bytes * static_cast<size_t>(m.rows);
    const bool same_layout = m.type != kQ8_0 && m.type != kQ6_K && d.row_bytes == m.row_bytes;
    if (same_layout) {
        LOOM_GPU_CHECK(gpuMemcpy(dst, m.data, total, gpuMemcpyHostToDevice));
        return;
    }
    // Repack through a host staging buffer of about 64 MiB.
    const int64_t step = std::max<int64_t>(1, static_cast<int64_t>((size_t{64} << 20) / d.row_bytes));
    std::vector<uint8_t> stage(static_cast<size_t>(std::min(step, m.rows)) * d.row_bytes);
    for (int64_t r0 = 0; r0 < m.rows; r0 += step) {
        const int64_t rows = std::min(step, m.rows - r0);
        repack_rows(m.type, m.row(r0), rows, m.cols, stage.data());
        LOOM_GPU_CHECK(gpuMemcpy(dst + static_cast<size_t>(r0) * d.row_bytes, stage.data(),
                                 static_cast<size_t>(rows) * d.row_bytes, gpuMemcpyHostToDevice));
    }
}

float* DeviceModel::upload_vec(const std::vector<float>& v) {
    if (v.empty()) return nullptr;
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, v.size() * sizeof(float)));
    allocs_.push_back(p);
    bytes += v.size() * sizeof(float);
    LOOM_GPU_CHECK(gpuMemcpy(p, v.data(), v.size() * sizeof(float), gpuMemcpyHostToDevice));
    return static_cast<float*>(p);
}

}  // namespace loom::gpu
