// GGUF reader: validates a whole file up front and exposes its metadata and tensors
// as views into a read-only memory mapping (weights are never copied).
//
// Source: the GGUF specification, ggml/docs/gguf.md (versions 1, 2 and 3). Version 1
// uses 32-bit counts and string lengths; versions 2 and 3 use 64-bit ones. Big-endian
// files (byte-swapped version field) are refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf/ggml_types.hpp"

namespace loom::model {

/// A malformed or unsupported GGUF file. `offset()` is the byte offset in the file
/// where the problem was found; what() names the problem and that offset.
class GgufError : public std::runtime_error {
public:
    /// what() becomes "GGUF: <what> (at offset <offset>)".
    GgufError(const std::string& what, uint64_t offset);
    uint64_t offset() const noexcept { return offset_; }
    /// The problem alone, without the "GGUF: " prefix and the offset.
    const std::string& message() const noexcept { return message_; }

private:
    uint64_t offset_;
    std::string message_;
};

/// gguf_metadata_value_type, as written in the file (uint32).
enum class GgufType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};

/// Width in bytes of one value of scalar type t (1, 2, 4 or 8, as the GGUF specification
/// stores them); 0 for STRING, ARRAY and ids outside the enum. Shared by the reader and
/// the writer (gguf_writer.hpp).
constexpr uint64_t gguf_scalar_size(GgufType t) {
    switch (t) {
        case GgufType::U8:
        case GgufType::I8:
        case GgufType::BOOL: return 1;
        case GgufType::U16:
        case GgufType::I16: return 2;
        case GgufType::U32:
        case GgufType::I32:
        case GgufType::F32: return 4;
        case GgufType::U64:
        case GgufType::I64:
        case GgufType::F64: return 8;
        default: return 0;
    }
}

/// One metadata value. Scalars are decoded; strings are views into the mapping.
/// Arrays keep their element type and count; numeric elements stay in the file and
/// are decoded on access, string elements are indexed as views.
struct GgufValue {
    GgufType type = GgufType::U8;
    uint64_t u = 0;      ///< unsigned scalars and bool (0/1)
    int64_t i = 0;       ///< signed scalars
    double f = 0;        ///< F32 / F64 scalars
    std::string_view s;  ///< STRING
    // ARRAY
    GgufType elem_type = GgufType::U8;
    uint64_t count = 0;
    const uint8_t* elems = nullptr;         ///< numeric array elements (little-endian)
    std::vector<std::string_view> strings;  ///< string array elements
    std::vector<GgufValue> nested;          ///< array-of-array elements

    /// Integer value of an integer or bool scalar; nullopt for other types or when
    /// it does not fit int64.
    std::optional<int64_t> as_int() const;
    /// Value of any numeric scalar as double; nullopt for non-numeric types.
    std::optional<double> as_float() const;
    /// The string, or nullopt when not a STRING.
    std::optional<std::string_view> as_string() const;
    /// Elements of a numeric array converted to double; empty when not a numeric array.
    std::vector<double> numbers() const;
};

/// One tensor-info record, validated against the file.
struct GgufTensor {
    std::string_view name;
    std::vector<uint64_t> dims;  ///< ne[0] first: dims[0] is the row length (contiguous)
    uint32_t type = 0;           ///< ggml type id (always a known type, see type_traits)
    uint64_t offset = 0;         ///< offset relative to the data section
    const uint8_t* data = nullptr;
    uint64_t nbytes = 0;
    uint64_t n_elements() const;
    uint64_t n_rows() const { return dims.empty() ? 0 : n_elements() / dims[0]; }
};

/// A parsed GGUF file. Construction validates the header, every key/value pair and
/// every tensor-info record: counts and lengths are bounded by the bytes that
/// remain (so no allocation exceeds a small multiple of the file size), keys and
/// tensor names are unique and non-empty, arrays nest at most 4 deep (65536 nested
/// elements in all), tensors have 1..4 non-zero dimensions whose product fits 63
/// bits, a known type id and rows of whole blocks, general.alignment is a u32 power
/// of two from 8 to 1 MiB, and tensor data are aligned, inside the file and do not
/// overlap. Tensor data are not read. Every refusal is a GgufError naming the
/// problem and the file offset of the field at fault.
class GgufFile {
public:
    /// Maps and parses the file at `path`. Throws GgufError (malformed) or
    /// std::system_error (cannot open / map).
    static GgufFile open(const std::string& path);
    /// Parses a caller-owned buffer that must outlive the returned object (used by
    /// the fuzz target and tests). Throws GgufError.
    static GgufFile from_memory(const uint8_t* data, size_t size);

    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }
    size_t file_size() const { return size_; }

    /// Metadata keys in file order, with their values.
    const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return kv_; }
    /// The value under `key`, or nullptr.
    const GgufValue* find(std::string_view key) const;
    /// Integer under `key` or `fallback` when absent or not an integer.
    int64_t get_int(std::string_view key, int64_t fallback) const;
    /// Float under `key` or `fallback` when absent or not numeric.
    double get_float(std::string_view key, double fallback) const;
    /// String under `key` or `fallback` when absent or not a string.
    std::string get_string(std::string_view key, std::string fallback = {}) const;

    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    /// The tensor named `name`, or nullptr.
    const GgufTensor* tensor(std::string_view name) const;

private:
    GgufFile() = default;
    void parse();

    std::shared_ptr<void> mapping_;  // owns the mmap (or nothing for from_memory)
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string_view, GgufValue>> kv_;
    std::vector<GgufTensor> tensors_;
};

}  // namespace loom::model
