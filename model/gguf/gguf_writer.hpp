// GGUF v3 writer: metadata of every value type plus tensors, to memory or to a file.
//
// Source: the GGUF specification (ggml/docs/gguf.md): little-endian; header = magic
// "GGUF", uint32 version, uint64 tensor count, uint64 metadata count; each metadata
// pair = string key, uint32 value type, value (strings are uint64 length + bytes,
// arrays are uint32 element type + uint64 count + elements); each tensor info =
// string name, uint32 n_dims, uint64 dims[n_dims] (ne0 first), uint32 ggml type,
// uint64 offset relative to the data section. The data section starts at the first
// multiple of the alignment (general.alignment, default 32) after the header, and
// every tensor's data is padded with zeros to a multiple of the alignment.
//
// Large files (the model generator) are written by streaming: declare tensors with
// add_tensor_info, write header() at 0, then each tensor's bytes at
// tensor_file_offset(i). Small files (tests) keep their data in the writer: add_tensor
// and to_bytes() / write_file(). Malformed files for negative tests are made by
// editing to_bytes() at the offsets kv_offset / tensor_info_offset report.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "model/gguf/gguf.hpp"

namespace loom::model {

/// The GGUF scalar type that stores a T: U8/I8/U16/I16/U32/I32/U64/I64 for the fixed-width
/// integers, F32 for float, F64 for double; any other T fails to compile.
template <class T>
constexpr GgufType gguf_type_of() {
    if constexpr (std::is_same_v<T, uint8_t>) return GgufType::U8;
    else if constexpr (std::is_same_v<T, int8_t>) return GgufType::I8;
    else if constexpr (std::is_same_v<T, uint16_t>) return GgufType::U16;
    else if constexpr (std::is_same_v<T, int16_t>) return GgufType::I16;
    else if constexpr (std::is_same_v<T, uint32_t>) return GgufType::U32;
    else if constexpr (std::is_same_v<T, int32_t>) return GgufType::I32;
    else if constexpr (std::is_same_v<T, uint64_t>) return GgufType::U64;
    else if constexpr (std::is_same_v<T, int64_t>) return GgufType::I64;
    else if constexpr (std::is_same_v<T, float>) return GgufType::F32;
    else if constexpr (std::is_same_v<T, double>) return GgufType::F64;
    else static_assert(sizeof(T) == 0, "no GGUF scalar type for this T");
}

class GgufWriter {
public:
    GgufWriter() = default;

    /// GGUF version written in the header: 3 (default) or 2 (same layout).
    /// Throws std::invalid_argument for other values.
    void set_version(uint32_t version);

    // Scalar metadata. Keys must be non-empty and unique (std::invalid_argument).
    void add_u8(const std::string& key, uint8_t v);
    void add_i8(const std::string& key, int8_t v);
    void add_u16(const std::string& key, uint16_t v);
    void add_i16(const std::string& key, int16_t v);
    /// "general.alignment" given as U32 also sets the data alignment (a power of two
    /// up to 1 MiB, else std::invalid_argument); add it before any tensor.
    void add_u32(const std::string& key, uint32_t v);
    void add_i32(const std::string& key, int32_t v);
    void add_u64(const std::string& key, uint64_t v);
    void add_i64(const std::string& key, int64_t v);
    void add_f32(const std::string& key, float v);
    void add_f64(const std::string& key, double v);
    void add_bool(const std::string& key, bool v);
    void add_string(const std::string& key, const std::string& v);

    /// Array of `count` numeric or bool elements of `elem_type` (any GgufType but
    /// STRING and ARRAY), copied from `elems` as little-endian values of the type's
    /// width (bools are one byte, 0 or 1). Throws std::invalid_argument for STRING,
    /// ARRAY or an unknown type.
    void add_array(const std::string& key, GgufType elem_type, const void* elems, uint64_t count);
    /// Array of the numbers in `v`, its GGUF element type the one of T's width and kind
    /// (uint8_t U8 ... int64_t I64, float F32, double F64; other T do not compile).
    template <class T>
    void add_array(const std::string& key, const std::vector<T>& v) {
        add_array(key, gguf_type_of<T>(), v.data(), v.size());
    }
    /// Array of BOOL elements.
    void add_bool_array(const std::string& key, const std::vector<bool>& v);
    /// Array of STRING elements.
    void add_string_array(const std::string& key, const std::vector<std::string>& v);
    /// A SentencePiece ("llama") vocabulary: tokenizer.ggml.model = "llama" and the parallel
    /// arrays tokenizer.ggml.tokens, .scores (F32) and .token_type (INT32, llama.cpp's token
    /// types: 1 normal, 2 unknown, 3 control, 6 byte), as the GGUF spec's tokenizer section names
    /// them. Throws std::invalid_argument if the three sizes differ.
    void add_llama_vocab(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                         const std::vector<int32_t>& types);

    /// Declares a tensor whose bytes the caller writes itself (streaming). dims are
    /// ne0 first (dims[0] = row length), 1 to 4 of them, each >= 1; type is a ggml
    /// type id with dims[0] a multiple of its block size. Names must be unique. Throws
    /// std::invalid_argument otherwise. Returns the tensor's index.
    size_t add_tensor_info(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type);
    /// Declares a tensor and copies its data (nbytes must equal the size its dims and
    /// type imply: n_elements / block_size * type_size). Throws std::invalid_argument.
    size_t add_tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type, const void* data,
                      uint64_t nbytes);

    size_t tensor_count() const { return tensors_.size(); }
    size_t metadata_count() const { return kvs_.size(); }
    uint64_t alignment() const { return alignment_; }
    /// Bytes of tensor i's data (without padding).
    uint64_t tensor_nbytes(size_t i) const { return tensors_.at(i).nbytes; }
    /// Tensor i's data offset relative to the data section (a multiple of alignment()).
    uint64_t tensor_offset(size_t i) const { return tensors_.at(i).offset; }
    /// Absolute file offset of tensor i's data: data_offset() + tensor_offset(i).
    uint64_t tensor_file_offset(size_t i) const { return data_offset() + tensor_offset(i); }
    /// Header size rounded up to the alignment: where the data section starts.
    uint64_t data_offset() const;
    /// Size of the whole file: data_offset() + every tensor's padded data.
    uint64_t file_size() const { return data_offset() + data_size_; }
    /// Byte offset in the file of metadata pair i (its key's length field).
    uint64_t kv_offset(size_t i) const;
    /// Byte offset in the file of tensor-info record i (its name's length field).
    uint64_t tensor_info_offset(size_t i) const;

    /// The header, tensor infos and zero padding: bytes [0, data_offset()).
    std::vector<uint8_t> header() const;
    /// The whole file. Throws std::logic_error when a tensor was declared without data.
    std::vector<uint8_t> to_bytes() const;
    /// Writes the whole file to `path` (replacing it). Throws std::logic_error as
    /// to_bytes, std::system_error when the file cannot be written.
    void write_file(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        std::vector<uint64_t> dims;
        uint32_t type = 0;
        uint64_t nbytes = 0;
        uint64_t offset = 0;
        std::vector<uint8_t> data;  // empty when streamed by the caller
        bool has_data = false;
    };
    void add_kv(const std::string& key, GgufType type, const std::vector<uint8_t>& value);
    uint64_t header_size() const;

    uint32_t version_ = 3;
    uint64_t alignment_ = 32;
    std::vector<std::pair<std::string, std::vector<uint8_t>>> kvs_;  // key, type + value bytes
    std::vector<Tensor> tensors_;
    uint64_t data_size_ = 0;  // padded
};

}  // namespace loom::model
