// Helpers shared by loom's quantizers (model/quant/quant.cpp, quant_k.cpp, quant_iq.cpp); internal.
//
// Each quantize_block_* encodes one block (256 floats) in the layout that
// model/quant/quant_blocks.hpp documents (ggml-common.h via the GGUF format).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace loom::model::qdetail {

/// Nearest integer, ties to even (adding 1.5 * 2^23 leaves the rounded integer in the
/// low mantissa bits); |v| is first clamped to 2^22 - 1 and NaN becomes 2^22 - 1,
/// so callers' clamps to their level range always see a sensible value.
inline int round_int(float v) {
    v = std::fmax(std::fmin(v, 4194303.0f), -4194303.0f);  // fmin/fmax drop a NaN operand
    const float t = v + 12582912.0f;
    int32_t i;
    std::memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/// v clamped to [lo, hi].
inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/// Stores v as a little-endian half at p; `rounded` receives the value the half
/// decodes to (quantizers scale with it, so that they match what decoders see).
uint16_t store_f16(uint8_t* p, float v, float& rounded);

/// Index of the IQ4_NL level (kIq4nlValues) nearest to v.
int iq4_index(float v);

/// Scale s such that x[j] ~= s * kIq4nlValues[iq4_index(x[j] / s)] for n values: the
/// largest magnitude maps to level -127, then s is refit once by least squares. 0 for
/// an all-zero group.
float iq4_fit(const float* x, int n);

/// One 256-element block of each K-quant / IQ4_XS (model/quant/quant_k.cpp).
void quantize_block_q2_k(const float* x, uint8_t* b);
void quantize_block_q3_k(const float* x, uint8_t* b);
void quantize_block_q4_k(const float* x, uint8_t* b);
void quantize_block_q5_k(const float* x, uint8_t* b);
void quantize_block_q6_k(const float* x, uint8_t* b);
void quantize_block_iq4_xs(const float* x, uint8_t* b);

/// One 256-element block of each low-bit IQ type (model/quant/quant_iq.cpp).
void quantize_block_iq2_xxs(const float* x, uint8_t* b);
void quantize_block_iq2_xs(const float* x, uint8_t* b);
void quantize_block_iq2_s(const float* x, uint8_t* b);
void quantize_block_iq3_xxs(const float* x, uint8_t* b);
void quantize_block_iq3_s(const float* x, uint8_t* b);
void quantize_block_iq1_s(const float* x, uint8_t* b);
void quantize_block_iq1_m(const float* x, uint8_t* b);

/// One 32-element MXFP4 block (model/quant/quant_mxfp4.cpp).
void quantize_block_mxfp4(const float* x, uint8_t* b);

}  // namespace loom::model::qdetail
