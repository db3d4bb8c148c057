// Malformed GGUF files are refused by model::GgufFile with a GgufError that names the
// problem and the file offset of the field at fault: never a crash, an out-of-bounds
// read or an allocation out of proportion to the file.
//
// Files are parsed from exactly-sized heap buffers, so under AddressSanitizer
// (-DLOOM_SANITIZE=ON) any read past the end is reported. Most cases patch one field
// of a small valid file made by model/gguf_writer, at offsets the writer reports.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/gguf/ggml_types.hpp"
#include "model/gguf/gguf.hpp"
#include "model/gguf/gguf_writer.hpp"
#include "test_paths.hpp"

using loom::model::GgmlType;
using loom::model::GgufError;
using loom::model::GgufFile;
using loom::model::GgufType;
using loom::model::GgufWriter;

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE(f.good());
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <class T>
void put(std::vector<uint8_t>& b, uint64_t at, T v) {
    REQUIRE(at + sizeof v <= b.size());
    std::memcpy(b.data() + at, &v, sizeof v);
}

// The GgufError that parsing `bytes` (from an exactly-sized copy) throws; fails the
// test when it parses.
GgufError parse_error(const std::vector<uint8_t>& bytes) {
    const std::vector<uint8_t> copy(bytes);
    try {
        (void)GgufFile::from_memory(copy.data(), copy.size());
    } catch (const GgufError& e) { return e; }
    FAIL("the file parsed");
    return GgufError("", 0);
}

// Checks that parsing `bytes` fails with exactly `message` at `offset`.
void expect(const std::vector<uint8_t>& bytes, const std::string& message, uint64_t offset) {
    const GgufError e = parse_error(bytes);
    INFO(e.what());
    CHECK(e.message() == message);
    CHECK(e.offset() == offset);
    CHECK(std::string(e.what()) == "GGUF: " + message + " (at offset " + std::to_string(offset) + ")");
}

// A small valid file: 3 metadata pairs and 2 tensors.
//   kv 0: "general.architecture" = "llama"; kv 1: "n" = u32 7;
//   kv 2: "list" = [u32 1, 2, 3]; tensor 0: "a" F32 [8, 2]; tensor 1: "b" Q8_0 [32].
struct Sample {
    GgufWriter w;
    std::vector<uint8_t> bytes;
    Sample() {
        w.add_string("general.architecture", "llama");
        w.add_u32("n", 7);
        w.add_array("list", std::vector<uint32_t>{1, 2, 3});
        std::vector<float> a(16, 0.5f);
        w.add_tensor("a", {8, 2}, static_cast<uint32_t>(GgmlType::F32), a.data(), a.size() * 4);
        std::vector<uint8_t> b(34, 0);
        w.add_tensor("b", {32}, static_cast<uint32_t>(GgmlType::Q8_0), b.data(), b.size());
        bytes = w.to_bytes();
    }
    // Offsets of the fields of tensor-info i (name length 8, name, n_dims 4, dims 8
    // each, type 4, offset 8); tensor names are one byte.
    uint64_t ndims_at(size_t i) const { return w.tensor_info_offset(i) + 8 + 1; }
    uint64_t dim_at(size_t i, size_t d) const { return ndims_at(i) + 4 + 8 * d; }
    uint64_t type_at(size_t i, size_t n_dims) const { return dim_at(i, n_dims); }
    uint64_t offset_at(size_t i, size_t n_dims) const { return type_at(i, n_dims) + 4; }
    // Offset of the value type of metadata pair i, whose key has `key_len` bytes.
    uint64_t value_type_at(size_t i, size_t key_len) const { return w.kv_offset(i) + 8 + key_len; }
};

}  // namespace

TEST_CASE("the sample file parses") {
    Sample s;
    const GgufFile f = GgufFile::from_memory(s.bytes.data(), s.bytes.size());
    CHECK(f.tensors().size() == 2);
    CHECK(f.metadata().size() == 3);
}

TEST_CASE("every prefix of TinyStories-656K-Q3_K_M.gguf is refused, at or before the cut") {
    // The smallest real model with tensors (572 KB, five tensor types).
    const auto full = read_file(loom::test::shared_path("models/TinyStories-656K-Q3_K_M.gguf"));
    const GgufFile whole = GgufFile::from_memory(full.data(), full.size());
    const uint64_t header_end = whole.data_offset();
    // Prefixes up to just past the header are parsed from exactly-sized copies (the
    // parser reads only the header, so longer prefixes read the same bytes).
    std::vector<uint8_t> copy;
    uint64_t checked = 0;
    for (uint64_t len = 0; len < full.size(); ++len) {
        const uint8_t* data = full.data();
        if (len <= header_end + 64) {
            copy.assign(full.begin(), full.begin() + static_cast<long>(len));
            copy.shrink_to_fit();
            data = copy.data();
        }
        // Plain checks in the loop (a million Catch assertions are slow); REQUIRE on
        // the first prefix that misbehaves, with its message.
        std::string what = "parsed";
        bool ok = false;
        try {
            (void)GgufFile::from_memory(data, len);
        } catch (const GgufError& e) {
            what = e.what();
            const std::string& m = e.message();
            const std::string l = std::to_string(len);
            const bool named = m.find("truncated") != std::string::npos || m.find("bytes left") != std::string::npos ||
                               m.find("of the " + l + "-byte file") != std::string::npos ||
                               m.find("outside the " + l + "-byte file") != std::string::npos;
            // A field cut short: the message says how many bytes were left from its offset.
            const bool exact = m.find("while reading") == std::string::npos ||
                               m.find(", " + std::to_string(len - e.offset()) + " left") != std::string::npos;
            ok = e.offset() <= len && named && exact;
        }
        if (!ok) {
            INFO("prefix of " << len << " bytes: " << what);
            REQUIRE(ok);
        }
        ++checked;
    }
    CHECK(checked == full.size());
}

TEST_CASE("every header prefix of stories260K.gguf (v3) and of its GGUF v1 file is refused") {
    for (const char* name : {"models/stories260K.gguf", "models/legacy/tinyllamas-stories-260k-f32.gguf"}) {
        INFO(name);
        const auto full = read_file(loom::test::shared_path(name));
        const GgufFile whole = GgufFile::from_memory(full.data(), full.size());
        for (uint64_t len = 0; len <= whole.data_offset(); ++len) {
            const std::vector<uint8_t> copy(full.begin(), full.begin() + static_cast<long>(len));
            try {
                (void)GgufFile::from_memory(copy.data(), copy.size());
                FAIL("prefix of " << len << " bytes parsed");
            } catch (const GgufError& e) {
                if (e.offset() > len) FAIL("prefix of " << len << " bytes: " << e.what());
            }
        }
    }
}

TEST_CASE("magic and version") {
    Sample s;
    auto b = s.bytes;
    b[0] = 'X';
    expect(b, "bad magic 0x58475546, expected \"GGUF\" (0x47475546)", 0);
    expect({'G', 'G'}, "file truncated: 2 bytes, no magic", 0);
    expect({'G', 'G', 'U', 'F', 3, 0}, "file truncated while reading version: needs 4 bytes, 2 left", 4);
    b = s.bytes;
    put<uint32_t>(b, 4, 4);
    expect(b, "unsupported GGUF version 4 (supported: 1, 2, 3)", 4);
    put<uint32_t>(b, 4, 0);
    expect(b, "unsupported GGUF version 0 (supported: 1, 2, 3)", 4);
    put<uint32_t>(b, 4, 0x03000000);
    expect(b, "version field 50331648 looks byte-swapped: big-endian GGUF files are not supported", 4);
}

TEST_CASE("absurd tensor and metadata counts") {
    Sample s;
    auto b = s.bytes;
    put<uint64_t>(b, 8, uint64_t{1} << 60);
    const std::string left = std::to_string(b.size() - 24);
    expect(b, "tensor count 1152921504606846976 cannot fit in the " + left + " bytes left", 8);
    b = s.bytes;
    put<uint64_t>(b, 16, ~uint64_t{0});
    expect(b, "metadata count 18446744073709551615 cannot fit in the " + left + " bytes left", 16);
}

TEST_CASE("absurd string lengths") {
    Sample s;
    auto b = s.bytes;
    put<uint64_t>(b, s.w.kv_offset(0), uint64_t{1} << 62);  // the key's length
    expect(b, "metadata key length 4611686018427387904 exceeds limit 65535", s.w.kv_offset(0));
    b = s.bytes;
    const uint64_t len_at = s.value_type_at(0, 20) + 4;  // the value string's length
    put<uint64_t>(b, len_at, uint64_t{1} << 40);
    expect(b, "string length 1099511627776 exceeds the " + std::to_string(b.size() - len_at - 8) + " bytes left",
           len_at);
    b = s.bytes;
    put<uint64_t>(b, s.w.tensor_info_offset(1), 1000000);  // tensor name length
    expect(b, "tensor name length 1000000 exceeds limit 65535", s.w.tensor_info_offset(1));
}

TEST_CASE("absurd array lengths, unknown value types, bad bools, nesting") {
    Sample s;
    auto b = s.bytes;
    const uint64_t count_at = s.value_type_at(2, 4) + 4 + 4;  // after value type and element type
    put<uint64_t>(b, count_at, uint64_t{1} << 61);
    expect(b,
           "array of 2305843009213693952 u32 elements exceeds the " + std::to_string(b.size() - count_at - 8) +
               " bytes left",
           count_at);
    b = s.bytes;
    put<uint32_t>(b, s.value_type_at(2, 4) + 4, 13);  // element type
    expect(b, "unknown array element type 13", s.value_type_at(2, 4) + 4);
    b = s.bytes;
    put<uint32_t>(b, s.value_type_at(1, 1), 77);  // value type of "n"
    expect(b, "unknown metadata value type 77", s.value_type_at(1, 1));

    GgufWriter w;
    w.add_bool("flag", true);
    auto c = w.to_bytes();
    const uint64_t flag_at = w.kv_offset(0) + 8 + 4 + 4;
    c[flag_at] = 2;
    expect(c, "bool value 2 is not 0 or 1", flag_at);

    // Arrays of arrays: 5 levels deep is refused at the fifth element-type field.
    std::vector<uint8_t> n = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    auto u64 = [&](uint64_t v) {
        for (int k = 0; k < 8; ++k) n.push_back(static_cast<uint8_t>(v >> (8 * k)));
    };
    auto u32 = [&](uint32_t v) {
        for (int k = 0; k < 4; ++k) n.push_back(static_cast<uint8_t>(v >> (8 * k)));
    };
    u64(0), u64(1), u64(1), n.push_back('k'), u32(9);        // one key "k" of type ARRAY
    for (int level = 0; level < 4; ++level) u32(9), u64(1);  // 4 nested arrays of one array each
    const uint64_t deep_at = n.size();
    u32(4), u64(0);
    expect(n, "arrays nested more than 4 deep", deep_at);

    // Arrays of arrays may hold 65536 elements in all (each costs far more memory than
    // its 12 bytes in the file): 70000 empty arrays are refused at the count.
    n = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    u64(0), u64(1), u64(1), n.push_back('k'), u32(9);
    u32(9);
    const uint64_t many_at = n.size();
    u64(70000);
    for (int k = 0; k < 70000; ++k) u32(4), u64(0);
    expect(n, "arrays of arrays hold more than 65536 elements in all", many_at);

    // A bool array element other than 0 or 1 is named with its offset.
    GgufWriter wb;
    wb.add_bool_array("flags", {true, false, true});
    auto bb = wb.to_bytes();
    const uint64_t elems_at = wb.kv_offset(0) + 8 + 5 + 4 + 4 + 8;
    bb[elems_at + 2] = 7;
    expect(bb, "bool array element 2 is not 0 or 1", elems_at + 2);
}

TEST_CASE("duplicate and empty keys and names") {
    Sample s;
    GgufWriter w;
    w.add_u32("a", 1);
    w.add_u32("b", 2);
    auto c = w.to_bytes();
    c[w.kv_offset(1) + 8] = 'a';
    expect(c, "duplicate metadata key 'a'", w.kv_offset(1));
    auto b = s.bytes;
    b[s.w.tensor_info_offset(1) + 8] = 'a';
    expect(b, "duplicate tensor name 'a'", s.w.tensor_info_offset(1));
    b = s.bytes;
    put<uint64_t>(b, s.w.kv_offset(1), 0);  // "n" -> "" (its byte then reads as the value type)
    expect(b, "empty metadata key", s.w.kv_offset(1));
}

TEST_CASE("tensor dimensions: count, zero, overflow, rows of whole blocks") {
    Sample s;
    auto b = s.bytes;
    put<uint32_t>(b, s.ndims_at(0), 5);
    expect(b, "tensor 'a' has 5 dimensions (1..4 allowed)", s.ndims_at(0));
    put<uint32_t>(b, s.ndims_at(0), 0);
    expect(b, "tensor 'a' has 0 dimensions (1..4 allowed)", s.ndims_at(0));
    b = s.bytes;
    put<uint64_t>(b, s.dim_at(0, 1), 0);
    expect(b, "tensor 'a' has a zero dimension", s.dim_at(0, 1));
    b = s.bytes;
    put<uint64_t>(b, s.dim_at(0, 0), uint64_t{1} << 32);
    put<uint64_t>(b, s.dim_at(0, 1), uint64_t{1} << 32);
    expect(b, "tensor 'a' dimensions overflow 63 bits when multiplied", s.dim_at(0, 1));
    b = s.bytes;  // 2^61 x 2 F32 elements: fits 63 bits, but 2^62 * 4 bytes does not fit 64
    put<uint64_t>(b, s.dim_at(0, 0), uint64_t{1} << 61);
    put<uint64_t>(b, s.dim_at(0, 1), 2);
    expect(b, "tensor 'a' byte size overflows 64 bits", s.w.tensor_info_offset(0));
    b = s.bytes;
    put<uint64_t>(b, s.dim_at(1, 0), 40);  // Q8_0 rows hold 32-element blocks
    expect(b, "tensor 'b' of type q8_0 has 40 elements per row, not a multiple of the block size 32",
           s.w.tensor_info_offset(1));
}

TEST_CASE("tensor type ids out of range or removed") {
    Sample s;
    for (uint32_t t : {4u, 5u, 31u, 40u, 0xFFFFFFFFu}) {
        auto b = s.bytes;
        put<uint32_t>(b, s.type_at(1, 1), t);
        expect(b, "tensor 'b' has unknown type id " + std::to_string(t), s.type_at(1, 1));
    }
}

TEST_CASE("tensor data offsets: outside the file, misaligned, overlapping") {
    Sample s;
    const uint64_t data = s.w.data_offset(), size = s.bytes.size();
    auto b = s.bytes;
    put<uint64_t>(b, s.offset_at(1, 1), 4096);
    expect(b,
           "tensor 'b' data [" + std::to_string(data + 4096) + ", +34) lies outside the " + std::to_string(size) +
               "-byte file",
           s.offset_at(1, 1));
    put<uint64_t>(b, s.offset_at(1, 1), ~uint64_t{0} - 31);  // aligned, and offset + size overflows
    expect(b,
           "tensor 'b' data [" + std::to_string(data + (~uint64_t{0} - 31)) + ", +34) lies outside the " +
               std::to_string(size) + "-byte file",
           s.offset_at(1, 1));
    b = s.bytes;
    put<uint64_t>(b, s.offset_at(1, 1), 36);
    expect(b, "tensor 'b' data offset 36 is not a multiple of the alignment 32", s.offset_at(1, 1));
    b = s.bytes;
    put<uint64_t>(b, s.offset_at(1, 1), 32);  // tensor 'a' holds [0, 64)
    expect(
        b,
        "tensor 'b' data at " + std::to_string(data + 32) + " overlaps tensor 'a' [" + std::to_string(data) + ", +64)",
        s.offset_at(1, 1));
    b = s.bytes;
    REQUIRE(s.offset_at(1, 1) + 8 < data - 1);  // the header ends before the padding does
    b.resize(data - 1);                         // the header ends, the data section does not start
    expect(b,
           "data section would start at " + std::to_string(data) + ", past the end of the " + std::to_string(data - 1) +
               "-byte file",
           s.offset_at(1, 1) + 8);
}

TEST_CASE("general.alignment must be a u32 power of two from 8 to 1 MiB") {
    for (uint32_t a : {0u, 4u, 48u, 1u << 21}) {
        GgufWriter w;
        w.add_u32("general.alignment", 64);
        auto b = w.to_bytes();
        const uint64_t value_at = w.kv_offset(0) + 8 + 17 + 4;
        put<uint32_t>(b, value_at, a);
        expect(b, "general.alignment must be a u32 power of two from 8 to 1 MiB", value_at);
    }
    GgufWriter w;
    w.add_u64("general.alignment", 64);
    expect(w.to_bytes(), "general.alignment must be a u32 power of two from 8 to 1 MiB", w.kv_offset(0) + 8 + 17 + 4);
}

TEST_CASE("vocabulary-only files may end before the aligned data offset") {
    GgufWriter w;
    w.add_string("k", "v");
    auto b = w.to_bytes();
    const GgufFile f = GgufFile::from_memory(b.data(), b.size());
    CHECK(f.tensors().empty());
}
