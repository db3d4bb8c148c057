// Row (de)quantization dispatch, float conversions and the 32-element quantizers.
//
// Layouts: model/quant/quant_blocks.hpp and quant_blocks_iq.hpp (ggml-common.h, GGUF format).
// The K-quant and IQ4_XS quantizers live in model/quant/quant_k.cpp, the IQ1/IQ2/IQ3 ones in
// model/quant/quant_iq.cpp.
#include "model/quant/quant.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "model/gguf/ggml_types.hpp"
#include "model/quant/quant_blocks.hpp"
#include "model/quant/quant_internal.hpp"

namespace loom::model {

uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t exp = (x >> 23) & 0xff;
    uint32_t mant = x & 0x7fffff;
    if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
    int e = static_cast<int>(exp) - 127 + 15;
    if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10) return static_cast<uint16_t>(sign);
        mant |= 0x800000;
        const int shift = 14 - e;
        uint32_t half = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half & 1))) ++half;
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exponent: correct
    return static_cast<uint16_t>(sign | half);
}

uint16_t fp32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
    x += 0x7fff + ((x >> 16) & 1);
    return static_cast<uint16_t>(x >> 16);
}

namespace qdetail {

uint16_t store_f16(uint8_t* p, float v, float& rounded) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
    rounded = fp16_to_fp32(h);
    return h;
}

int iq4_index(float v) {
    const int8_t* kv = blocks::kIq4nlValues;
    int lo = 0, hi = 15;
    if (!(v > kv[0])) return 0;  // also catches NaN
    if (v >= kv[15]) return 15;
    while (hi - lo > 1) {  // invariant: kv[lo] < v <= kv[hi]
        const int mid = (lo + hi) / 2;
        if (v <= kv[mid]) hi = mid;
        else lo = mid;
    }
    return v - static_cast<float>(kv[lo]) <= static_cast<float>(kv[hi]) - v ? lo : hi;
}

float iq4_fit(const float* x, int n) {
    float amax = 0, mx = 0;
    for (int j = 0; j < n; ++j)
        if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), mx = x[j];
    if (amax == 0) return 0;
    float s = mx / static_cast<float>(blocks::kIq4nlValues[0]);
    // One least-squares refit of the scale for the chosen levels.
    double num = 0, den = 0;
    const float inv = 1.0f / s;
    for (int j = 0; j < n; ++j) {
        const float v = blocks::kIq4nlValues[iq4_index(x[j] * inv)];
        num += static_cast<double>(x[j]) * v;
        den += static_cast<double>(v) * v;
    }
    return den > 0 ? static_cast<float>(num / den) : s;
}

}  // namespace qdetail

namespace {

using namespace qdetail;

float signed_absmax(const float* x, int n) {
    float amax = 0, mx = 0;
    for (int j = 0; j < n; ++j)
        if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), mx = x[j];
    return mx;
}

void quant_q8_0(const float* x, uint8_t* b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    float d;
    store_f16(b, amax / 127.0f, d);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    auto* q = reinterpret_cast<int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(clampi(round_int(x[j] * id), -127, 127));
}

// Q4_0 / Q5_0: the element of largest magnitude maps to the lowest level.
template <int kBits>
void quant_q_0(const float* x, uint8_t* b) {
    constexpr int kHalf = 1 << (kBits - 1), kMax = (1 << kBits) - 1;
    float d;
    store_f16(b, signed_absmax(x, 32) / -static_cast<float>(kHalf), d);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t* qs = b + (kBits == 5 ? 6 : 2);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const int q0 = clampi(round_int(x[j] * id) + kHalf, 0, kMax);
        const int q1 = clampi(round_int(x[j + 16] * id) + kHalf, 0, kMax);
        qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
        qh |= static_cast<uint32_t>(q0 >> 4) << j;
        qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    if (kBits == 5) std::memcpy(b + 2, &qh, 4);
}

// Q4_1 / Q5_1: levels spread evenly from the block's minimum to its maximum.
template <int kBits>
void quant_q_1(const float* x, uint8_t* b) {
    constexpr int kMax = (1 << kBits) - 1;
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; ++j) lo = std::fmin(lo, x[j]), hi = std::fmax(hi, x[j]);
    float d, m;
    store_f16(b, (hi - lo) / kMax, d);
    store_f16(b + 2, lo, m);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t* qs = b + (kBits == 5 ? 8 : 4);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const int q0 = clampi(round_int((x[j] - m) * id), 0, kMax);
        const int q1 = clampi(round_int((x[j + 16] - m) * id), 0, kMax);
        qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
        qh |= static_cast<uint32_t>(q0 >> 4) << j;
        qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    if (kBits == 5) std::memcpy(b + 4, &qh, 4);
}

void quant_iq4_nl(const float* x, uint8_t* b) {
    float d;
    store_f16(b, iq4_fit(x, 32), d);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(iq4_index(x[j] * id) | (iq4_index(x[j + 16] * id) << 4));
}

template <class Block>
void dequant_blocks(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; i += Block::kSize, p += Block::kBytes) Block::decode(p, dst + i);
}

template <int kSize, int kBytes>
void quant_blocks(void (*fn)(const float*, uint8_t*), const float* src, void* dst, int64_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; i += kSize, p += kBytes) fn(src + i, p);
}

void check_row(uint32_t type, int64_t n) {
    const auto tr = type_traits(type);
    if (!tr) throw std::invalid_argument("unknown tensor type " + type_name(type));
    if (n < 0 || n % tr->block_size != 0)
        throw std::invalid_argument("row of " + std::to_string(n) + " elements is not a whole number of " +
                                    type_name(type) + " blocks (" + std::to_string(tr->block_size) + ")");
}

}  // namespace

bool can_dequantize(uint32_t type) {
    switch (static_cast<GgmlType>(type)) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16: return true;
        default: return blocks::with_block(type, []<class B>() {});
    }
}

bool can_quantize(uint32_t type) { return can_dequantize(type); }

uint64_t row_bytes(uint32_t type, int64_t n) {
    check_row(type, n);
    const auto tr = type_traits(type);
    return static_cast<uint64_t>(n) / tr->block_size * tr->type_size;
}

void dequantize_row(uint32_t type, const void* src, float* dst, int64_t n) {
    if (!can_dequantize(type)) throw std::invalid_argument("cannot dequantize tensor type " + type_name(type));
    check_row(type, n);
    switch (static_cast<GgmlType>(type)) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
        case GgmlType::F16: {
            const auto* s = static_cast<const uint8_t*>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = blocks::load_f16(s + 2 * i);
            return;
        }
        case GgmlType::BF16: {
            const auto* s = static_cast<const uint8_t*>(src);
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                dst[i] = bf16_to_fp32(h);
            }
            return;
        }
        default:
            if (blocks::with_block(type, [&]<class B>() { dequant_blocks<B>(src, dst, n); })) return;
            break;
    }
    throw std::invalid_argument("cannot dequantize tensor type " + type_name(type));  // unreachable
}

void quantize_row(uint32_t type, const float* src, void* dst, int64_t n) {
    if (!can_quantize(type)) throw std::invalid_argument("cannot quantize to tensor type " + type_name(type));
    check_row(type, n);
    auto* out = static_cast<uint8_t*>(dst);
    switch (static_cast<GgmlType>(type)) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
        case GgmlType::F16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = fp32_to_fp16(src[i]);
                std::memcpy(out + 2 * i, &h, 2);
            }
            return;
        case GgmlType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = fp32_to_bf16(src[i]);
                std::memcpy(out + 2 * i, &h, 2);
            }
            return;
        case GgmlType::Q8_0: return quant_blocks<32, 34>(quant_q8_0, src, dst, n);
        case GgmlType::Q4_0: return quant_blocks<32, 18>(quant_q_0<4>, src, dst, n);
        case GgmlType::Q5_0: return quant_blocks<32, 22>(quant_q_0<5>, src, dst, n);
        case GgmlType::Q4_1: return quant_blocks<32, 20>(quant_q_1<4>, src, dst, n);
        case GgmlType::Q5_1: return quant_blocks<32, 24>(quant_q_1<5>, src, dst, n);
        case GgmlType::IQ4_NL: return quant_blocks<32, 18>(quant_iq4_nl, src, dst, n);
        case GgmlType::Q2_K: return quant_blocks<256, 84>(quantize_block_q2_k, src, dst, n);
        case GgmlType::Q3_K: return quant_blocks<256, 110>(quantize_block_q3_k, src, dst, n);
        case GgmlType::Q4_K: return quant_blocks<256, 144>(quantize_block_q4_k, src, dst, n);
        case GgmlType::Q5_K: return quant_blocks<256, 176>(quantize_block_q5_k, src, dst, n);
        case GgmlType::Q6_K: return quant_blocks<256, 210>(quantize_block_q6_k, src, dst, n);
        case GgmlType::IQ4_XS: return quant_blocks<256, 136>(quantize_block_iq4_xs, src, dst, n);
        case GgmlType::IQ2_XXS: return quant_blocks<256, 66>(quantize_block_iq2_xxs, src, dst, n);
        case GgmlType::IQ2_XS: return quant_blocks<256, 74>(quantize_block_iq2_xs, src, dst, n);
        case GgmlType::IQ2_S: return quant_blocks<256, 82>(quantize_block_iq2_s, src, dst, n);
        case GgmlType::IQ3_XXS: return quant_blocks<256, 98>(quantize_block_iq3_xxs, src, dst, n);
        case GgmlType::IQ3_S: return quant_blocks<256, 110>(quantize_block_iq3_s, src, dst, n);
        case GgmlType::IQ1_S: return quant_blocks<256, 50>(quantize_block_iq1_s, src, dst, n);
        case GgmlType::IQ1_M: return quant_blocks<256, 56>(quantize_block_iq1_m, src, dst, n);
        case GgmlType::MXFP4: return quant_blocks<32, 17>(quantize_block_mxfp4, src, dst, n);
        default: break;
    }
    throw std::invalid_argument("cannot quantize to tensor type " + type_name(type));  // unreachable
}

}  // namespace loom::model
