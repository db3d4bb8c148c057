// Element conversion and (de)quantization of GGUF tensor rows.
//
// Source: ggml's block layouts (ggml-common.h), as the GGUF format (ggml/docs/gguf.md)
// stores them; model/quant/quant_blocks.hpp documents each layout. A "row" is n elements,
// n a multiple of the type's block size (model/gguf/ggml_types.hpp); src/dst are tightly
// packed. The code is loom's own, written from the layout descriptions.
#pragma once

#include <cstdint>
#include <cstring>

namespace loom::model {

/// IEEE half (binary16) bits, given in the low 16 bits of `h` (the upper bits must
/// be zero), -> float; exact for every input (subnormals, infinities and NaN payloads
/// included). Pure 32-bit integer/float arithmetic without ?: selects, which GCC
/// compiles into branches here, so that loops over it vectorize.
inline float fp16_bits_to_fp32(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;  // exponent and mantissa
    // Normal numbers: move into place and rebias the exponent from 15 to 127.
    // Infinities and NaNs (em >= 0x7c00, so bit 15 of em + 0x400 is set) then get
    // all exponent bits set.
    const uint32_t inf_nan = 0u - ((em + 0x400u) >> 15);  // all ones when em >= 0x7c00
    const uint32_t normal = ((em << 13) + (112u << 23)) | (inf_nan & 0x7f800000u);
    // Zero and subnormals (em < 0x400) are mantissa * 2^-24, exact in a float.
    const float sub = static_cast<float>(static_cast<int32_t>(em)) * 5.9604644775390625e-08f;
    uint32_t sub_bits;
    std::memcpy(&sub_bits, &sub, 4);
    const uint32_t is_sub = ((em + 0x7c00u) >> 15) - 1u;  // all ones when em < 0x400, else 0
    const uint32_t bits = (sub_bits & is_sub) | (normal & ~is_sub) | sign;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

/// IEEE half (binary16) bits -> float; see fp16_bits_to_fp32.
inline float fp16_to_fp32(uint16_t h) { return fp16_bits_to_fp32(h); }

/// float -> IEEE half bits, round to nearest even; overflow gives infinity.
uint16_t fp32_to_fp16(float f);

/// bfloat16 bits -> float (the high half of a float32).
inline float bf16_to_fp32(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

/// float -> bfloat16 bits, round to nearest even (NaN stays NaN).
uint16_t fp32_to_bf16(float f);

/// True when dequantize_row supports `type` (a ggml type id): F32, F16, BF16, Q8_0,
/// Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS,
/// IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, MXFP4.
bool can_dequantize(uint32_t type);

/// Decodes n elements of ggml type `type` stored at src (n / block_size packed
/// blocks, layouts of ggml-common.h, see model/quant/quant_blocks.hpp) into dst (n F32
/// values). src needs no alignment. Throws std::invalid_argument when
/// !can_dequantize(type), n < 0, or n is not a multiple of the type's block size.
void dequantize_row(uint32_t type, const void* src, float* dst, int64_t n);

/// True when quantize_row can produce `type`: every type dequantize_row reads (can_dequantize).
bool can_quantize(uint32_t type);

/// Encodes n F32 values at src as ggml type `type` into dst (n / block_size blocks,
/// row_bytes(type, n) bytes). The quantizers are simple round-to-nearest ones (one
/// scale per block or sub-block from the block's extreme values, no error search;
/// IQ4_NL/IQ4_XS refit their scale once by least squares), meant for random test
/// weights: the blocks are valid and dequantize close to src (relative RMS error on
/// normal data: Q8_0 0.5%, Q6_K 1.9%, Q5 ~4%, Q4/IQ4 ~8%, Q3_K 16%, Q2_K 35%), without
/// the importance weighting of llama.cpp's quantizers. The IQ1/IQ2/IQ3 quantizers are
/// simple too (model/quant/quant_iq.cpp: nearest grid entries from a candidate table, a few
/// scale guesses refit by least squares, three sub-block scale codes tried; relative RMS
/// error on normal data: IQ3_S 13%, IQ3_XXS 18%, IQ2_S 24%, IQ2_XS 29%, IQ2_XXS 34%,
/// IQ1_M 43%, IQ1_S 46%; about 0.5 s of CPU time per million weights, 100x the others).
/// A block holding non-finite inputs gets unspecified (but valid) contents; other blocks
/// are unaffected. Throws std::invalid_argument when !can_quantize(type), n < 0, or n is
/// not a multiple of the block size.
void quantize_row(uint32_t type, const float* src, void* dst, int64_t n);

/// Bytes that n elements of `type` occupy (n / block_size * type_size). Throws
/// std::invalid_argument for an unknown type or n not a multiple of the block size.
uint64_t row_bytes(uint32_t type, int64_t n);

}  // namespace loom::model
