// The lookup tables of the GGUF IQ1/IQ2/IQ3 types: part of the format, not of loom.
//
// Source: ggml's ggml-common.h (ggml/src/ggml-common.h of ggml and llama.cpp; MIT License,
// Copyright (c) 2023-2026 The ggml authors): iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid,
// iq3s_grid, iq1s_grid, ksigns_iq2xs and IQ1S_DELTA / IQ1M_DELTA, under loom's names below.
// The values are data, copied value for value; the definitions are in iq_grids_iq{1,2,3}.cpp.
//
// A grid entry packs the magnitudes of 8 (IQ1, IQ2) or 4 (IQ3) consecutive weights as bytes,
// little-endian: value j of entry i is byte j of grid[i] (bits 8j..8j+7). The bytes are
//   IQ2_XXS, IQ2_XS, IQ2_S   one of {0x08, 0x19, 0x2b} (8, 25, 43)
//   IQ3_XXS                  one of {0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e}
//   IQ3_S                    one of {1, 3, 5, ..., 15}
//   IQ1_S, IQ1_M             int8 in {-1, 0, 1}
// Each table is in ascending order of its entries. model/quant/quant_blocks_iq.hpp decodes
// the blocks with them; tests/unit/quants_iq.cpp checks these properties.
#pragma once

#include <cstdint>

namespace loom::model::blocks {

extern const uint64_t kIq2xxsGrid[256];  ///< ggml's iq2xxs_grid
extern const uint64_t kIq2xsGrid[512];   ///< ggml's iq2xs_grid
extern const uint64_t kIq2sGrid[1024];   ///< ggml's iq2s_grid
extern const uint32_t kIq3xxsGrid[256];  ///< ggml's iq3xxs_grid
extern const uint32_t kIq3sGrid[512];    ///< ggml's iq3s_grid
extern const uint64_t kIq1sGrid[2048];   ///< ggml's iq1s_grid (NGRID_IQ1S entries)

/// ggml's ksigns_iq2xs: the 8 sign bits (bit j set: weight j of a group of 8 is negative)
/// for a 7-bit sign index i of IQ2_XXS, IQ2_XS and IQ3_XXS: i itself, with bit 7 set when i
/// has an odd number of bits, so that every pattern has an even number of negatives.
inline constexpr uint8_t kSignsIq2xs[128] = {
    0,   129, 130, 3,   132, 5,   6,   135, 136, 9,   10,  139, 12,  141, 142, 15,  144, 17,  18,  147, 20,  149,
    150, 23,  24,  153, 154, 27,  156, 29,  30,  159, 160, 33,  34,  163, 36,  165, 166, 39,  40,  169, 170, 43,
    172, 45,  46,  175, 48,  177, 178, 51,  180, 53,  54,  183, 184, 57,  58,  187, 60,  189, 190, 63,  192, 65,
    66,  195, 68,  197, 198, 71,  72,  201, 202, 75,  204, 77,  78,  207, 80,  209, 210, 83,  212, 85,  86,  215,
    216, 89,  90,  219, 92,  221, 222, 95,  96,  225, 226, 99,  228, 101, 102, 231, 232, 105, 106, 235, 108, 237,
    238, 111, 240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255};

/// ggml's IQ1S_DELTA (and IQ1M_DELTA, the same value): the offset of IQ1_S / IQ1_M values,
/// x = scale * (grid value + delta) with delta = +kIq1Delta or -kIq1Delta.
inline constexpr float kIq1Delta = 0.125f;

}  // namespace loom::model::blocks
