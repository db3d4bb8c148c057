// Tensor element types of the GGUF format and their block layouts.
//
// Source: the GGUF specification (ggml/docs/gguf.md, "ggml_type") and ggml's type
// table (ggml.c, type_traits). A quantized type stores a row as a sequence of
// blocks; each block holds `block_size` elements in `type_size` bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace loom::model {

/// ggml_type ids as written in a GGUF tensor-info record (uint32).
enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    // 4 and 5 were Q4_2 / Q4_3, removed from the format.
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    // 31..33 were Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8, removed from the format.
    TQ1_0 = 34,
    TQ2_0 = 35,
    // 36..38 were IQ4_NL_4_4 / _4_8 / _8_8, removed from the format.
    MXFP4 = 39,
};

/// Block layout of one ggml type.
struct TypeTraits {
    std::string_view name;  ///< ggml's name, e.g. "q4_K"
    uint32_t block_size;    ///< elements per block (1 for plain types)
    uint32_t type_size;     ///< bytes per block
};

/// Layout of `type`, or std::nullopt when the id is not a known, current ggml type
/// (removed ids 4, 5, 31..33, 36..38 and anything above 39 are unknown).
std::optional<TypeTraits> type_traits(uint32_t type) noexcept;

/// Human-readable name of a type id ("q8_0", or "type#77" when unknown).
std::string type_name(uint32_t type);

}  // namespace loom::model
