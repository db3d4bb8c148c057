// GGUF v3 serialization; see gguf_writer.hpp for the format's source.
#include "model/gguf/gguf_writer.hpp"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <system_error>

#include "model/gguf/ggml_types.hpp"

namespace loom::model {
namespace {

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

template <class T>
void put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

template <class T>
std::vector<uint8_t> scalar(T v) {
    std::vector<uint8_t> out;
    put(out, v);
    return out;
}

}  // namespace

void GgufWriter::set_version(uint32_t version) {
    if (version != 2 && version != 3) throw std::invalid_argument("the GGUF writer writes version 2 or 3 only");
    version_ = version;
}

void GgufWriter::add_kv(const std::string& key, GgufType type, const std::vector<uint8_t>& value) {
    if (key.empty()) throw std::invalid_argument("empty GGUF metadata key");
    for (const auto& kv : kvs_)
        if (kv.first == key) throw std::invalid_argument("duplicate GGUF metadata key '" + key + "'");
    std::vector<uint8_t> bytes;
    bytes.reserve(4 + value.size());
    put<uint32_t>(bytes, static_cast<uint32_t>(type));
    bytes.insert(bytes.end(), value.begin(), value.end());
    kvs_.emplace_back(key, std::move(bytes));
}

void GgufWriter::add_u8(const std::string& key, uint8_t v) { add_kv(key, GgufType::U8, scalar(v)); }
void GgufWriter::add_i8(const std::string& key, int8_t v) { add_kv(key, GgufType::I8, scalar(v)); }
void GgufWriter::add_u16(const std::string& key, uint16_t v) { add_kv(key, GgufType::U16, scalar(v)); }
void GgufWriter::add_i16(const std::string& key, int16_t v) { add_kv(key, GgufType::I16, scalar(v)); }
void GgufWriter::add_i32(const std::string& key, int32_t v) { add_kv(key, GgufType::I32, scalar(v)); }
void GgufWriter::add_u64(const std::string& key, uint64_t v) { add_kv(key, GgufType::U64, scalar(v)); }
void GgufWriter::add_i64(const std::string& key, int64_t v) { add_kv(key, GgufType::I64, scalar(v)); }
void GgufWriter::add_f32(const std::string& key, float v) { add_kv(key, GgufType::F32, scalar(v)); }
void GgufWriter::add_f64(const std::string& key, double v) { add_kv(key, GgufType::F64, scalar(v)); }
void GgufWriter::add_bool(const std::string& key, bool v) { add_kv(key, GgufType::BOOL, scalar<uint8_t>(v ? 1 : 0)); }

void GgufWriter::add_u32(const std::string& key, uint32_t v) {
    if (key == "general.alignment") {
        if (v == 0 || (v & (v - 1)) != 0 || v > (1u << 20))
            throw std::invalid_argument("general.alignment must be a power of two up to 1 MiB");
        if (!tensors_.empty()) throw std::invalid_argument("set general.alignment before adding tensors");
    }
    add_kv(key, GgufType::U32, scalar(v));
    if (key == "general.alignment") alignment_ = v;
}

void GgufWriter::add_string(const std::string& key, const std::string& v) {
    std::vector<uint8_t> bytes;
    put_string(bytes, v);
    add_kv(key, GgufType::STRING, bytes);
}

void GgufWriter::add_array(const std::string& key, GgufType elem_type, const void* elems, uint64_t count) {
    const size_t w = gguf_scalar_size(elem_type);
    if (w == 0)
        throw std::invalid_argument("add_array takes numeric or bool elements; use add_string_array for strings");
    if (count > std::numeric_limits<uint64_t>::max() / w) throw std::invalid_argument("array too large");
    std::vector<uint8_t> bytes;
    bytes.reserve(12 + count * w);
    put<uint32_t>(bytes, static_cast<uint32_t>(elem_type));
    put<uint64_t>(bytes, count);
    const auto* p = static_cast<const uint8_t*>(elems);
    if (count) bytes.insert(bytes.end(), p, p + count * w);
    add_kv(key, GgufType::ARRAY, bytes);
}

void GgufWriter::add_bool_array(const std::string& key, const std::vector<bool>& v) {
    std::vector<uint8_t> b(v.begin(), v.end());
    add_array(key, GgufType::BOOL, b.data(), b.size());
}

void GgufWriter::add_llama_vocab(const std::vector<std::string>& tokens, const std::vector<float>& scores,
                                 const std::vector<int32_t>& types) {
    if (scores.size() != tokens.size() || types.size() != tokens.size())
        throw std::invalid_argument("add_llama_vocab: tokens, scores and types differ in size");
    add_string("tokenizer.ggml.model", "llama");
    add_string_array("tokenizer.ggml.tokens", tokens);
    add_array("tokenizer.ggml.scores", scores);
    add_array("tokenizer.ggml.token_type", types);
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
    size_t total = 12;
    for (const auto& s : v) total += 8 + s.size();
    std::vector<uint8_t> bytes;
    bytes.reserve(total);
    put<uint32_t>(bytes, static_cast<uint32_t>(GgufType::STRING));
    put<uint64_t>(bytes, v.size());
    for (const auto& s : v) put_string(bytes, s);
    add_kv(key, GgufType::ARRAY, bytes);
}

size_t GgufWriter::add_tensor_info(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type) {
    if (name.empty()) throw std::invalid_argument("empty tensor name");
    for (const auto& t : tensors_)
        if (t.name == name) throw std::invalid_argument("duplicate tensor name '" + name + "'");
    if (dims.empty() || dims.size() > 4)
        throw std::invalid_argument("tensor '" + name + "' must have 1 to 4 dimensions");
    const auto tr = type_traits(type);
    if (!tr) throw std::invalid_argument("tensor '" + name + "' has unknown type " + type_name(type));
    uint64_t n = 1;
    for (uint64_t d : dims) {
        if (d == 0) throw std::invalid_argument("tensor '" + name + "' has a zero dimension");
        if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d)
            throw std::invalid_argument("tensor '" + name + "' is too large");
        n *= d;
    }
    if (dims[0] % tr->block_size != 0)
        throw std::invalid_argument("tensor '" + name + "': row length " + std::to_string(dims[0]) +
                                    " is not a multiple of the " + std::string(tr->name) + " block size " +
                                    std::to_string(tr->block_size));
    Tensor t;
    t.name = name;
    t.dims = dims;
    t.type = type;
    t.nbytes = n / tr->block_size * tr->type_size;
    t.offset = data_size_;
    data_size_ += round_up(t.nbytes, alignment_);
    tensors_.push_back(std::move(t));
    return tensors_.size() - 1;
}

size_t GgufWriter::add_tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                              const void* data, uint64_t nbytes) {
    const size_t i = add_tensor_info(name, dims, type);
    Tensor& t = tensors_[i];
    if (nbytes != t.nbytes) {
        const uint64_t want = t.nbytes;
        data_size_ -= round_up(t.nbytes, alignment_);
        tensors_.pop_back();
        throw std::invalid_argument("tensor '" + name + "' needs " + std::to_string(want) + " bytes, got " +
                                    std::to_string(nbytes));
    }
    const auto* p = static_cast<const uint8_t*>(data);
    t.data.assign(p, p + nbytes);
    t.has_data = true;
    return i;
}

uint64_t GgufWriter::header_size() const {
    uint64_t n = 4 + 4 + 8 + 8;
    for (const auto& [k, v] : kvs_) n += 8 + k.size() + v.size();
    for (const auto& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.dims.size() + 4 + 8;
    return n;
}

uint64_t GgufWriter::data_offset() const { return round_up(header_size(), alignment_); }

uint64_t GgufWriter::kv_offset(size_t i) const {
    if (i >= kvs_.size()) throw std::out_of_range("metadata index out of range");
    uint64_t n = 24;
    for (size_t k = 0; k < i; ++k) n += 8 + kvs_[k].first.size() + kvs_[k].second.size();
    return n;
}

uint64_t GgufWriter::tensor_info_offset(size_t i) const {
    if (i >= tensors_.size()) throw std::out_of_range("tensor index out of range");
    uint64_t n = 24;
    for (const auto& [k, v] : kvs_) n += 8 + k.size() + v.size();
    for (size_t k = 0; k < i; ++k) n += 8 + tensors_[k].name.size() + 4 + 8 * tensors_[k].dims.size() + 12;
    return n;
}

std::vector<uint8_t> GgufWriter::header() const {
    std::vector<uint8_t> out;
    out.reserve(data_offset());
    put<uint32_t>(out, 0x46554747u);  // "GGUF"
    put<uint32_t>(out, version_);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, kvs_.size());
    for (const auto& [k, v] : kvs_) {
        put_string(out, k);
        out.insert(out.end(), v.begin(), v.end());
    }
    for (const auto& t : tensors_) {
        put_string(out, t.name);
        put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
        for (uint64_t d : t.dims) put<uint64_t>(out, d);
        put<uint32_t>(out, t.type);
        put<uint64_t>(out, t.offset);
    }
    out.resize(data_offset(), 0);
    return out;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    for (const auto& t : tensors_)
        if (!t.has_data) throw std::logic_error("tensor '" + t.name + "' was declared without data");
    std::vector<uint8_t> out = header();
    const uint64_t base = out.size();
    out.resize(file_size(), 0);
    for (const auto& t : tensors_)
        if (t.nbytes) std::memcpy(out.data() + base + t.offset, t.data.data(), t.nbytes);
    return out;
}

void GgufWriter::write_file(const std::string& path) const {
    const std::vector<uint8_t> bytes = to_bytes();
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
    if (!f) throw std::system_error(errno, std::generic_category(), "cannot create " + path);
    if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
        throw std::system_error(errno, std::generic_category(), "cannot write " + path);
    FILE* raw = f.release();
    if (std::fclose(raw) != 0) throw std::system_error(errno, std::generic_category(), "cannot close " + path);
}

}  // namespace loom::model
