// GGUF parsing and validation; see gguf.hpp for the contract and the source.
#include "model/gguf/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>
#include <unordered_set>

namespace loom::model {

GgufError::GgufError(const std::string& what, uint64_t offset)
    : std::runtime_error("GGUF: " + what + " (at offset " + std::to_string(offset) + ")"),
      offset_(offset),
      message_(what) {}

namespace {

constexpr uint32_t kMaxDims = 4;     // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 4;  // arrays of arrays deeper than this are refused
constexpr uint64_t kMaxKeyLength = 65535;
// Arrays of arrays cost a GgufValue (~150 bytes) per element while the file spends
// as little as 8 bytes on one, so their total element count is capped to keep memory
// proportional to nothing worse than this (no real model nests arrays).
constexpr uint64_t kMaxNestedElements = uint64_t{1} << 16;

// Bounds-checked little-endian reader over the file bytes.
class Cursor {
public:
    Cursor(const uint8_t* base, size_t size, uint32_t version) : base_(base), size_(size), version_(version) {}

    uint64_t pos() const { return pos_; }
    /// Bytes of a count or length field: 4 in GGUF v1, 8 from v2 on.
    uint64_t size_bytes() const { return version_ == 1 ? 4 : 8; }
    uint64_t remaining() const { return size_ - pos_; }

    void need(uint64_t n, const char* what) const {
        if (n > remaining())
            throw GgufError(std::string("file truncated while reading ") + what + ": needs " + std::to_string(n) +
                                " bytes, " + std::to_string(remaining()) + " left",
                            pos_);
    }
    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    // Counts and lengths are 32-bit in GGUF v1 and 64-bit from v2 on.
    uint64_t read_size(const char* what) { return version_ == 1 ? read<uint32_t>(what) : read<uint64_t>(what); }
    // A length-prefixed string of at most max_len bytes; errors point at the length.
    std::string_view read_string(const char* what, uint64_t max_len = UINT64_MAX) {
        const uint64_t at = pos_;
        const uint64_t n = read_size(what);
        if (n > max_len)
            throw GgufError(
                std::string(what) + " length " + std::to_string(n) + " exceeds limit " + std::to_string(max_len), at);
        if (n > remaining())
            throw GgufError(std::string(what) + " length " + std::to_string(n) + " exceeds the " +
                                std::to_string(remaining()) + " bytes left",
                            at);
        std::string_view s(reinterpret_cast<const char*>(base_ + pos_), n);
        pos_ += n;
        return s;
    }
    const uint8_t* skip(uint64_t n, const char* what) {
        need(n, what);
        const uint8_t* p = base_ + pos_;
        pos_ += n;
        return p;
    }

private:
    const uint8_t* base_;
    size_t size_;
    uint32_t version_;
    uint64_t pos_ = 0;
};

const char* value_type_name(GgufType t) {
    static const char* names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                  "bool", "string", "array", "u64", "i64", "f64"};
    auto i = static_cast<uint32_t>(t);
    return i < 13 ? names[i] : "unknown";
}

void read_scalar(Cursor& c, GgufType t, GgufValue& v) {
    v.type = t;
    switch (t) {
        case GgufType::U8: v.u = c.read<uint8_t>("u8"); break;
        case GgufType::I8: v.i = c.read<int8_t>("i8"); break;
        case GgufType::U16: v.u = c.read<uint16_t>("u16"); break;
        case GgufType::I16: v.i = c.read<int16_t>("i16"); break;
        case GgufType::U32: v.u = c.read<uint32_t>("u32"); break;
        case GgufType::I32: v.i = c.read<int32_t>("i32"); break;
        case GgufType::U64: v.u = c.read<uint64_t>("u64"); break;
        case GgufType::I64: v.i = c.read<int64_t>("i64"); break;
        case GgufType::F32: v.f = c.read<float>("f32"); break;
        case GgufType::F64: v.f = c.read<double>("f64"); break;
        case GgufType::BOOL: {
            const uint64_t at = c.pos();
            uint8_t b = c.read<uint8_t>("bool");
            if (b > 1) throw GgufError("bool value " + std::to_string(b) + " is not 0 or 1", at);
            v.u = b;
            break;
        }
        default: break;
    }
}

void read_array_body(Cursor& c, GgufValue& v, int depth, uint64_t& nested_budget);

void read_value(Cursor& c, GgufType t, GgufValue& v, int depth, uint64_t& nested_budget) {
    const uint64_t at = c.pos();
    if (static_cast<uint32_t>(t) > 12)
        throw GgufError("unknown metadata value type " + std::to_string(static_cast<uint32_t>(t)), at - 4);
    if (t == GgufType::STRING) {
        v.type = t;
        v.s = c.read_string("string");
        return;
    }
    if (t != GgufType::ARRAY) {
        read_scalar(c, t, v);
        return;
    }
    read_array_body(c, v, depth, nested_budget);
}

// An array body: element type (u32), count, elements. Arrays of arrays nest bodies.
void read_array_body(Cursor& c, GgufValue& v, int depth, uint64_t& nested_budget) {
    if (depth >= kMaxArrayNesting)
        throw GgufError("arrays nested more than " + std::to_string(kMaxArrayNesting) + " deep", c.pos());
    v.type = GgufType::ARRAY;
    const uint64_t type_at = c.pos();
    const auto et = static_cast<GgufType>(c.read<uint32_t>("array element type"));
    if (static_cast<uint32_t>(et) > 12)
        throw GgufError("unknown array element type " + std::to_string(static_cast<uint32_t>(et)), type_at);
    v.elem_type = et;
    const uint64_t count_at = c.pos();
    v.count = c.read_size("array length");
    if (et == GgufType::STRING || et == GgufType::ARRAY) {
        // Each element takes at least its length field (or its type + length fields).
        const uint64_t min_elem = et == GgufType::STRING ? c.size_bytes() : 4 + c.size_bytes();
        if (v.count > c.remaining() / min_elem)
            throw GgufError("array of " + std::to_string(v.count) + " " + value_type_name(et) +
                                " elements cannot fit in the " + std::to_string(c.remaining()) + " bytes left",
                            count_at);
        if (et == GgufType::STRING) {
            v.strings.reserve(v.count);
            for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(c.read_string("array string"));
        } else {
            if (v.count > nested_budget)
                throw GgufError(
                    "arrays of arrays hold more than " + std::to_string(kMaxNestedElements) + " elements in all",
                    count_at);
            nested_budget -= v.count;
            v.nested.resize(v.count);
            for (uint64_t k = 0; k < v.count; ++k) read_array_body(c, v.nested[k], depth + 1, nested_budget);
        }
        return;
    }
    const uint64_t es = gguf_scalar_size(et);
    if (v.count > c.remaining() / es)
        throw GgufError("array of " + std::to_string(v.count) + " " + value_type_name(et) + " elements exceeds the " +
                            std::to_string(c.remaining()) + " bytes left",
                        count_at);
    v.elems = c.skip(v.count * es, "array data");
    if (et == GgufType::BOOL)
        for (uint64_t k = 0; k < v.count; ++k)
            if (v.elems[k] > 1)
                throw GgufError("bool array element " + std::to_string(k) + " is not 0 or 1",
                                count_at + c.size_bytes() + k);
}

}  // namespace

std::optional<int64_t> GgufValue::as_int() const {
    switch (type) {
        case GgufType::U8:
        case GgufType::U16:
        case GgufType::U32:
        case GgufType::U64:
        case GgufType::BOOL:
            if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
            return static_cast<int64_t>(u);
        case GgufType::I8:
        case GgufType::I16:
        case GgufType::I32:
        case GgufType::I64: return i;
        default: return std::nullopt;
    }
}

std::optional<double> GgufValue::as_float() const {
    if (type == GgufType::F32 || type == GgufType::F64) return f;
    if (auto n = as_int()) return static_cast<double>(*n);
    if (type == GgufType::U64) return static_cast<double>(u);
    return std::nullopt;
}

std::optional<std::string_view> GgufValue::as_string() const {
    if (type == GgufType::STRING) return s;
    return std::nullopt;
}

namespace {

/// The little-endian scalar of type T at p (unaligned), widened to double.
template <class T>
double load_as_double(const uint8_t* p) {
    T x;
    std::memcpy(&x, p, sizeof x);
    return static_cast<double>(x);
}

}  // namespace

std::vector<double> GgufValue::numbers() const {
    std::vector<double> out;
    if (type != GgufType::ARRAY || elems == nullptr) return out;
    out.resize(count);
    const uint64_t es = gguf_scalar_size(elem_type);
    for (uint64_t k = 0; k < count; ++k) {
        const uint8_t* p = elems + k * es;
        switch (elem_type) {
            case GgufType::U8:
            case GgufType::BOOL: out[k] = *p; break;
            case GgufType::I8: out[k] = static_cast<int8_t>(*p); break;
            case GgufType::U16: out[k] = load_as_double<uint16_t>(p); break;
            case GgufType::I16: out[k] = load_as_double<int16_t>(p); break;
            case GgufType::U32: out[k] = load_as_double<uint32_t>(p); break;
            case GgufType::I32: out[k] = load_as_double<int32_t>(p); break;
            case GgufType::F32: out[k] = load_as_double<float>(p); break;
            case GgufType::U64: out[k] = load_as_double<uint64_t>(p); break;
            case GgufType::I64: out[k] = load_as_double<int64_t>(p); break;
            case GgufType::F64: out[k] = load_as_double<double>(p); break;
            default: break;
        }
    }
    return out;
}

uint64_t GgufTensor::n_elements() const {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;  // validated not to overflow at parse time
    return n;
}

GgufFile GgufFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + path);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw std::system_error(e, std::generic_category(), "cannot stat " + path);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw std::system_error(EINVAL, std::generic_category(), path + " is not a regular file");
    }
    const size_t size = static_cast<size_t>(st.st_size);
    if (size == 0) {
        ::close(fd);
        throw GgufError(path + ": file is empty", 0);
    }
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw std::system_error(e, std::generic_category(), "cannot mmap " + path);
    GgufFile f;
    f.mapping_ = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size); });
    f.base_ = static_cast<const uint8_t*>(p);
    f.size_ = size;
    try {
        f.parse();
    } catch (const GgufError& err) { throw GgufError(path + ": " + err.message(), err.offset()); }
    return f;
}

GgufFile GgufFile::from_memory(const uint8_t* data, size_t size) {
    GgufFile f;
    f.base_ = data;
    f.size_ = size;
    f.parse();
    return f;
}

void GgufFile::parse() {
    if (size_ < 4) throw GgufError("file truncated: " + std::to_string(size_) + " bytes, no magic", 0);
    if (std::memcmp(base_, "GGUF", 4) != 0) {
        std::string got;
        for (int k = 0; k < 4; ++k) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "%02x", base_[k]);
            got += buf;
        }
        throw GgufError("bad magic 0x" + got + ", expected \"GGUF\" (0x47475546)", 0);
    }
    Cursor c0(base_, size_, 3);
    c0.skip(4, "magic");
    version_ = c0.read<uint32_t>("version");
    if (version_ == 0 || version_ > 3) {
        if (version_ != 0 && (version_ & 0xFFFF) == 0)
            throw GgufError("version field " + std::to_string(version_) +
                                " looks byte-swapped: big-endian GGUF files are not supported",
                            4);
        throw GgufError("unsupported GGUF version " + std::to_string(version_) + " (supported: 1, 2, 3)", 4);
    }
    Cursor c(base_, size_, version_);
    c.skip(8, "header");

    const uint64_t nt_at = c.pos();
    const uint64_t n_tensors = c.read_size("tensor count");
    const uint64_t nkv_at = c.pos();
    const uint64_t n_kv = c.read_size("metadata count");
    // Each KV needs at least a key length + value type + a 1-byte value; each tensor
    // info at least name length + n_dims + type + offset.
    const uint64_t min_kv = (version_ == 1 ? 4 : 8) + 4 + 1;
    const uint64_t min_ti = (version_ == 1 ? 4 : 8) + 4 + 4 + 8;
    if (n_kv > c.remaining() / min_kv)
        throw GgufError("metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                            std::to_string(c.remaining()) + " bytes left",
                        nkv_at);
    if (n_tensors > c.remaining() / min_ti)
        throw GgufError("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                            std::to_string(c.remaining()) + " bytes left",
                        nt_at);

    kv_.reserve(n_kv);
    std::unordered_set<std::string_view> keys;
    uint64_t nested_budget = kMaxNestedElements;
    for (uint64_t k = 0; k < n_kv; ++k) {
        const uint64_t key_at = c.pos();
        std::string_view key = c.read_string("metadata key", kMaxKeyLength);
        if (key.empty()) throw GgufError("empty metadata key", key_at);
        if (!keys.insert(key).second) throw GgufError("duplicate metadata key '" + std::string(key) + "'", key_at);
        const auto t = static_cast<GgufType>(c.read<uint32_t>("metadata value type"));
        const uint64_t value_at = c.pos();
        GgufValue v;
        read_value(c, t, v, 0, nested_budget);
        if (key == "general.alignment") {
            // The spec: a uint32, a multiple of 8; ggml: a power of two. Rows of F32/F16
            // tensors are then aligned for their element type.
            const auto n = v.as_int();
            if (v.type != GgufType::U32 || !n || *n < 8 || (*n & (*n - 1)) != 0 || *n > (1 << 20))
                throw GgufError("general.alignment must be a u32 power of two from 8 to 1 MiB", value_at);
            alignment_ = static_cast<uint64_t>(*n);
        }
        kv_.emplace_back(key, std::move(v));
    }

    tensors_.reserve(n_tensors);
    std::vector<uint64_t> offset_at;  // file offset of each tensor's offset field
    offset_at.reserve(n_tensors);
    std::unordered_set<std::string_view> names;
    for (uint64_t k = 0; k < n_tensors; ++k) {
        const uint64_t info_at = c.pos();
        GgufTensor t;
        t.name = c.read_string("tensor name", kMaxKeyLength);
        if (t.name.empty()) throw GgufError("empty tensor name", info_at);
        if (!names.insert(t.name).second)
            throw GgufError("duplicate tensor name '" + std::string(t.name) + "'", info_at);
        const uint64_t nd_at = c.pos();
        const uint32_t nd = c.read<uint32_t>("tensor n_dims");
        if (nd == 0 || nd > kMaxDims)
            throw GgufError("tensor '" + std::string(t.name) + "' has " + std::to_string(nd) + " dimensions (1.." +
                                std::to_string(kMaxDims) + " allowed)",
                            nd_at);
        uint64_t n = 1;
        for (uint32_t d = 0; d < nd; ++d) {
            const uint64_t d_at = c.pos();
            const uint64_t dim = c.read_size("tensor dimension");
            if (dim == 0) throw GgufError("tensor '" + std::string(t.name) + "' has a zero dimension", d_at);
            if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)
                throw GgufError("tensor '" + std::string(t.name) + "' dimensions overflow 63 bits when multiplied",
                                d_at);
            n *= dim;
            t.dims.push_back(dim);
        }
        const uint64_t type_at = c.pos();
        t.type = c.read<uint32_t>("tensor type");
        const auto tr = type_traits(t.type);
        if (!tr)
            throw GgufError("tensor '" + std::string(t.name) + "' has unknown type id " + std::to_string(t.type),
                            type_at);
        if (t.dims[0] % tr->block_size != 0)
            throw GgufError("tensor '" + std::string(t.name) + "' of type " + std::string(tr->name) + " has " +
                                std::to_string(t.dims[0]) + " elements per row, not a multiple of the block size " +
                                std::to_string(tr->block_size),
                            info_at);
        const uint64_t blocks = n / tr->block_size;
        if (blocks > std::numeric_limits<uint64_t>::max() / tr->type_size)
            throw GgufError("tensor '" + std::string(t.name) + "' byte size overflows 64 bits", info_at);
        t.nbytes = blocks * tr->type_size;
        offset_at.push_back(c.pos());
        t.offset = c.read<uint64_t>("tensor offset");
        if (t.offset % alignment_ != 0)
            throw GgufError("tensor '" + std::string(t.name) + "' data offset " + std::to_string(t.offset) +
                                " is not a multiple of the alignment " + std::to_string(alignment_),
                            offset_at.back());
        tensors_.push_back(std::move(t));
    }

    // Data section starts at the next multiple of the alignment after the header.
    const uint64_t end = c.pos();
    data_offset_ = (end + alignment_ - 1) / alignment_ * alignment_;
    if (tensors_.empty()) return;  // vocab-only files may end before the aligned offset
    if (data_offset_ > size_)
        throw GgufError("data section would start at " + std::to_string(data_offset_) + ", past the end of the " +
                            std::to_string(size_) + "-byte file",
                        end);
    const uint64_t data_size = size_ - data_offset_;
    for (size_t k = 0; k < tensors_.size(); ++k) {
        GgufTensor& t = tensors_[k];
        if (t.offset > data_size || t.nbytes > data_size - t.offset)
            throw GgufError("tensor '" + std::string(t.name) + "' data [" + std::to_string(data_offset_ + t.offset) +
                                ", +" + std::to_string(t.nbytes) + ") lies outside the " + std::to_string(size_) +
                                "-byte file",
                            offset_at[k]);
        t.data = base_ + data_offset_ + t.offset;
    }
    // No two tensors may share bytes: a writer bug or a crafted file.
    std::vector<size_t> order(tensors_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
        const GgufTensor& a = tensors_[order[k - 1]];
        const GgufTensor& b = tensors_[order[k]];
        if (a.offset + a.nbytes > b.offset)
            throw GgufError("tensor '" + std::string(b.name) + "' data at " + std::to_string(data_offset_ + b.offset) +
                                " overlaps tensor '" + std::string(a.name) + "' [" +
                                std::to_string(data_offset_ + a.offset) + ", +" + std::to_string(a.nbytes) + ")",
                            offset_at[order[k]]);
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
    for (const auto& [k, v] : kv_)
        if (k == key) return &v;
    return nullptr;
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    return v->as_int().value_or(fallback);
}

double GgufFile::get_float(std::string_view key, double fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    return v->as_float().value_or(fallback);
}

std::string GgufFile::get_string(std::string_view key, std::string fallback) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufType::STRING) return fallback;
    return std::string(v->s);
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
    for (const GgufTensor& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

}  // namespace loom::model
