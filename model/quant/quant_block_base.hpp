// What every block decoder (model/quant/quant_blocks.hpp, model/quant/quant_blocks_iq.hpp)
// is built from: little-endian loads, the half-float scale load, and the BlockOf descriptor.
//
// Source: the GGUF format (ggml/docs/gguf.md): tensor data is little-endian, as is every
// host loom runs on; "d" scales are IEEE binary16.
#pragma once

#include <cstdint>
#include <cstring>

#include "model/gguf/ggml_types.hpp"
#include "model/quant/quant.hpp"

#if defined(__GNUC__)
#define LOOM_QB_INLINE inline __attribute__((always_inline))
#else
#define LOOM_QB_INLINE inline
#endif

namespace loom::model::blocks {

/// The little-endian T stored at p (any alignment); the host is little-endian, as GGUF.
template <class T>
LOOM_QB_INLINE T load_le(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

/// Half float stored little-endian at p.
LOOM_QB_INLINE float load_f16(const uint8_t* p) { return fp16_to_fp32(load_le<uint16_t>(p)); }

/// What each block decoder declares: the type it reads (kType), the elements (kSize) and
/// bytes (kBytes) of one block. A decoder B adds `static void decode(const uint8_t* b,
/// float* y)`, which reads exactly kBytes bytes at b and writes exactly kSize floats at y.
template <GgmlType T, int Size, int Bytes>
struct BlockOf {
    static constexpr GgmlType kType = T;
    static constexpr int kSize = Size, kBytes = Bytes;
};

}  // namespace loom::model::blocks
