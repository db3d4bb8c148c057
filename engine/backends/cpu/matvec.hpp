// Row-by-vector products on GGUF weight rows, for the CPU backend.
//
// A weight matrix of GGUF dims [n, rows] stores each output row contiguously as n
// elements of its ggml type (ggml's block layouts, ggml-common.h, as the GGUF format
// stores them; model/quant/quant_blocks.hpp documents each). Activations are F32. Rows are
// read directly from the mapped file, one block at a time; nothing is dequantized up
// front.
//
// Summation order: element e of a row is multiplied into lane (e / 8) % 4, e % 8 of
// 32 float accumulators, in increasing e, and the 32 lanes are summed by a fixed tree
// at the end. dot_row and dot_row_multi compute every weight with the same expression
// and use the same order, so a prefill product and a decode step give bit-identical
// results (tests/unit/quants.cpp checks this for every type). On x86-64 GCC builds
// the kernels are compiled twice, for the baseline ISA and for x86-64-v3 (AVX2, FMA),
// and the loader picks one for the CPU; the two may differ in the last bits (FMA).
#pragma once

#include <cstdint>

namespace loom::cpu {

/// True when dot_row / dot_row_multi support rows of ggml type `type`: F32, F16,
/// BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
/// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, MXFP4 (the types
/// model::can_dequantize accepts).
bool can_dot(uint32_t type);

/// Returns sum_i w[i] * x[i], w being the n elements of ggml type `type` at `row`
/// (model::row_bytes(type, n) bytes; block types need no alignment, F32/F16/BF16
/// rows need their element's alignment, which every GGUF tensor row has) and x n F32
/// values. Throws
/// std::invalid_argument when !can_dot(type) or n is negative or not a multiple of
/// the type's block size.
float dot_row(uint32_t type, const uint8_t* row, const float* x, int64_t n);

/// For v in [0, n_vec): out[v * out_stride] = dot_row(type, row, xs + v * x_stride, n),
/// bit for bit. Decodes the row once (into a per-thread buffer of n floats) and
/// multiplies it into three vectors at a time with the accumulators in registers
/// (prefill). n_vec may be 0; strides are in floats. Throws like dot_row.
void dot_row_multi(uint32_t type, const uint8_t* row, int64_t n, const float* xs, int64_t x_stride, int64_t n_vec,
                   float* out, int64_t out_stride);

}  // namespace loom::cpu
