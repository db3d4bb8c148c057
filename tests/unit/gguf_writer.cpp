// GgufWriter: byte layout, every metadata type, tensors and alignment, read back with GgufFile; loom-make-model output.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "model/gguf/ggml_types.hpp"
#include "model/gguf/gguf.hpp"
#include "model/gguf/gguf_writer.hpp"
#include "model/gguf/hparams.hpp"
#include "model/quant/quant.hpp"
#include "model/tokenizer/tokenizer.hpp"

using loom::model::GgmlType;
using loom::model::GgufError;
using loom::model::GgufFile;
using loom::model::GgufType;
using loom::model::GgufWriter;
namespace lm = loom::model;

namespace {

constexpr uint32_t id(GgmlType t) { return static_cast<uint32_t>(t); }

std::string tmp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("loom_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <class T>
void append(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof v);
    std::memcpy(out.data() + at, &v, sizeof v);
}

}  // namespace

TEST_CASE("a minimal file has exactly the GGUF v3 byte layout") {
    GgufWriter w;
    w.add_u32("a", 7);
    const float data[2] = {1.0f, -2.0f};
    w.add_tensor("t", {2}, id(GgmlType::F32), data, sizeof data);
    std::vector<uint8_t> want;
    append<uint32_t>(want, 0x46554747);  // "GGUF"
    append<uint32_t>(want, 3);           // version
    append<uint64_t>(want, 1);           // tensors
    append<uint64_t>(want, 1);           // metadata pairs
    append<uint64_t>(want, 1), append<char>(want, 'a'), append<uint32_t>(want, 4), append<uint32_t>(want, 7);
    append<uint64_t>(want, 1), append<char>(want, 't');  // tensor info: name
    append<uint32_t>(want, 1), append<uint64_t>(want, 2), append<uint32_t>(want, 0), append<uint64_t>(want, 0);
    CHECK(want.size() == 74);
    want.resize(96, 0);  // data section aligned to 32
    append<float>(want, 1.0f), append<float>(want, -2.0f);
    want.resize(128, 0);  // tensor data padded to the alignment
    CHECK(w.to_bytes() == want);
    CHECK(w.data_offset() == 96);
    CHECK(w.file_size() == 128);
    CHECK(w.kv_offset(0) == 24);
    CHECK(w.tensor_info_offset(0) == 41);
    CHECK(w.header() == std::vector<uint8_t>(want.begin(), want.begin() + 96));
}

TEST_CASE("every metadata type and several tensors read back through GgufFile") {
    GgufWriter w;
    w.add_u8("u8", 200);
    w.add_i8("i8", -100);
    w.add_u16("u16", 60000);
    w.add_i16("i16", -30000);
    w.add_u32("u32", 4000000000u);
    w.add_i32("i32", -2000000000);
    w.add_u64("u64", (1ull << 40) + 3);
    w.add_i64("i64", -(1ll << 40));
    w.add_f32("f32", 1.5f);
    w.add_f64("f64", -2.25);
    w.add_bool("yes", true);
    w.add_bool("no", false);
    w.add_string("str", "h\xC3\xA9llo \xE2\x96\x81 world");
    w.add_string("empty", "");
    w.add_array("a.u8", std::vector<uint8_t>{1, 2, 255});
    w.add_array("a.i8", std::vector<int8_t>{-1, 2});
    w.add_array("a.u16", std::vector<uint16_t>{65535});
    w.add_array("a.i16", std::vector<int16_t>{-2, -3});
    w.add_array("a.u32", std::vector<uint32_t>{4000000000u, 5});
    w.add_array("a.i32", std::vector<int32_t>{-7, 8, 9});
    w.add_array("a.u64", std::vector<uint64_t>{1ull << 50});
    w.add_array("a.i64", std::vector<int64_t>{-(1ll << 50), 1});
    w.add_array("a.f32", std::vector<float>{0.25f, -8.0f});
    w.add_array("a.f64", std::vector<double>{1e300});
    w.add_bool_array("a.bool", {true, false, true});
    w.add_string_array("a.str", {"x", "", "\xE2\x96\x81yz"});
    w.add_array("a.empty", std::vector<int32_t>{});

    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> f32(4 * 3), src(512);
    for (float& v : f32) v = nd(rng);
    for (float& v : src) v = nd(rng);
    std::vector<uint8_t> f16(2 * 10), q8(lm::row_bytes(id(GgmlType::Q8_0), 64) * 2),
        q4k(lm::row_bytes(id(GgmlType::Q4_K), 256));
    lm::quantize_row(id(GgmlType::F16), src.data(), f16.data(), 10);
    lm::quantize_row(id(GgmlType::Q8_0), src.data(), q8.data(), 128);
    lm::quantize_row(id(GgmlType::Q4_K), src.data(), q4k.data(), 256);
    w.add_tensor("m.f32", {4, 3}, id(GgmlType::F32), f32.data(), f32.size() * 4);
    w.add_tensor("m.f16", {10}, id(GgmlType::F16), f16.data(), f16.size());
    w.add_tensor("m.q8", {64, 2}, id(GgmlType::Q8_0), q8.data(), q8.size());
    w.add_tensor("m.q4k", {256, 1, 1, 1}, id(GgmlType::Q4_K), q4k.data(), q4k.size());
    REQUIRE(w.metadata_count() == 27);
    REQUIRE(w.tensor_count() == 4);

    const std::vector<uint8_t> bytes = w.to_bytes();
    const std::string path = tmp_path("all.gguf");
    w.write_file(path);
    CHECK(read_file(path) == bytes);
    const GgufFile g = GgufFile::open(path);
    std::filesystem::remove(path);
    const GgufFile m = GgufFile::from_memory(bytes.data(), bytes.size());
    for (const GgufFile* f : {&g, &m}) {
        CHECK(f->version() == 3);
        CHECK(f->alignment() == 32);
        CHECK(f->data_offset() == w.data_offset());
        CHECK(f->file_size() == w.file_size());
        REQUIRE(f->metadata().size() == 27);
        CHECK(f->metadata()[0].first == "u8");  // file order kept
        CHECK(f->find("u8")->type == GgufType::U8);
        CHECK(f->get_int("u8", 0) == 200);
        CHECK(f->get_int("i8", 0) == -100);
        CHECK(f->find("i8")->type == GgufType::I8);
        CHECK(f->get_int("u16", 0) == 60000);
        CHECK(f->get_int("i16", 0) == -30000);
        CHECK(f->get_int("u32", 0) == 4000000000ll);
        CHECK(f->get_int("i32", 0) == -2000000000);
        CHECK(f->get_int("u64", 0) == (1ll << 40) + 3);
        CHECK(f->find("u64")->type == GgufType::U64);
        CHECK(f->get_int("i64", 0) == -(1ll << 40));
        CHECK(f->get_float("f32", 0) == 1.5);
        CHECK(f->find("f32")->type == GgufType::F32);
        CHECK(f->get_float("f64", 0) == -2.25);
        CHECK(f->find("f64")->type == GgufType::F64);
        CHECK(f->find("yes")->type == GgufType::BOOL);
        CHECK(f->find("yes")->u == 1);
        CHECK(f->find("no")->u == 0);
        CHECK(f->get_string("str") == "h\xC3\xA9llo \xE2\x96\x81 world");
        CHECK(f->find("empty")->type == GgufType::STRING);
        CHECK(f->get_string("empty", "x").empty());
        CHECK(f->find("a.u8")->numbers() == std::vector<double>{1, 2, 255});
        CHECK(f->find("a.u8")->elem_type == GgufType::U8);
        CHECK(f->find("a.i8")->numbers() == std::vector<double>{-1, 2});
        CHECK(f->find("a.u16")->numbers() == std::vector<double>{65535});
        CHECK(f->find("a.i16")->numbers() == std::vector<double>{-2, -3});
        CHECK(f->find("a.u32")->numbers() == std::vector<double>{4000000000.0, 5});
        CHECK(f->find("a.i32")->numbers() == std::vector<double>{-7, 8, 9});
        CHECK(f->find("a.i32")->elem_type == GgufType::I32);
        CHECK(f->find("a.u64")->numbers() == std::vector<double>{std::ldexp(1.0, 50)});
        CHECK(f->find("a.i64")->numbers() == std::vector<double>{-std::ldexp(1.0, 50), 1});
        CHECK(f->find("a.f32")->numbers() == std::vector<double>{0.25, -8.0});
        CHECK(f->find("a.f32")->elem_type == GgufType::F32);
        CHECK(f->find("a.f64")->numbers() == std::vector<double>{1e300});
        CHECK(f->find("a.bool")->numbers() == std::vector<double>{1, 0, 1});
        CHECK(f->find("a.bool")->elem_type == GgufType::BOOL);
        const lm::GgufValue* s = f->find("a.str");
        REQUIRE(s->elem_type == GgufType::STRING);
        REQUIRE(s->strings.size() == 3);
        CHECK(s->strings[0] == "x");
        CHECK(s->strings[1].empty());
        CHECK(s->strings[2] == "\xE2\x96\x81yz");
        CHECK(f->find("a.empty")->count == 0);
        CHECK(f->find("a.empty")->type == GgufType::ARRAY);

        REQUIRE(f->tensors().size() == 4);
        const std::vector<std::pair<const void*, size_t>> data = {
            {f32.data(), f32.size() * 4}, {f16.data(), f16.size()}, {q8.data(), q8.size()}, {q4k.data(), q4k.size()}};
        const std::vector<std::vector<uint64_t>> dims = {{4, 3}, {10}, {64, 2}, {256, 1, 1, 1}};
        const std::vector<GgmlType> types = {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K};
        for (size_t i = 0; i < 4; ++i) {
            const lm::GgufTensor& t = f->tensors()[i];
            INFO("tensor " << t.name);
            CHECK(t.dims == dims[i]);
            CHECK(t.type == id(types[i]));
            CHECK(t.offset % 32 == 0);
            CHECK(t.offset == w.tensor_offset(i));
            REQUIRE(t.nbytes == data[i].second);
            CHECK(std::memcmp(t.data, data[i].first, t.nbytes) == 0);
        }
        CHECK(f->tensor("m.q8")->offset == 96);  // 48 + 16 padding, 20 + 12 padding before it
    }
}

TEST_CASE("general.alignment, streamed tensors, version 2 and patched headers") {
    GgufWriter w;
    w.add_u32("general.alignment", 64);
    CHECK(w.alignment() == 64);
    w.set_version(2);
    const size_t a = w.add_tensor_info("a", {3}, id(GgmlType::F32));
    const size_t b = w.add_tensor_info("b", {32, 2}, id(GgmlType::Q8_0));
    CHECK(w.tensor_offset(a) == 0);
    CHECK(w.tensor_offset(b) == 64);
    CHECK(w.tensor_nbytes(b) == 68);
    CHECK(w.data_offset() % 64 == 0);
    CHECK(w.file_size() == w.data_offset() + 64 + 128);
    CHECK_THROWS_AS(w.to_bytes(), std::logic_error);  // streamed tensors have no data in the writer

    // Stream the data as the model generator does.
    std::vector<uint8_t> file = w.header();
    file.resize(w.file_size(), 0);
    const float av[3] = {1, 2, 3};
    std::memcpy(file.data() + w.tensor_file_offset(a), av, sizeof av);
    for (size_t i = 0; i < 68; ++i) file[w.tensor_file_offset(b) + i] = static_cast<uint8_t>(i);
    {
        const GgufFile f = GgufFile::from_memory(file.data(), file.size());
        CHECK(f.version() == 2);
        CHECK(f.alignment() == 64);
        CHECK(f.tensor("b")->data[67] == 67);
        float got[3];
        std::memcpy(got, f.tensor("a")->data, sizeof got);
        CHECK(got[2] == 3.0f);
    }
    // The offsets the writer reports let tests corrupt one field: here tensor b's type.
    const uint64_t type_at = w.tensor_info_offset(b) + 8 + 1 + 4 + 2 * 8;
    uint32_t type;
    std::memcpy(&type, file.data() + type_at, 4);
    CHECK(type == id(GgmlType::Q8_0));
    type = 99;
    std::memcpy(file.data() + type_at, &type, 4);
    CHECK_THROWS_AS(GgufFile::from_memory(file.data(), file.size()), GgufError);
    uint64_t key_len;
    std::memcpy(&key_len, file.data() + w.kv_offset(0), 8);
    CHECK(key_len == std::strlen("general.alignment"));
}

TEST_CASE("the writer rejects what a GGUF cannot hold") {
    GgufWriter w;
    w.add_string("k", "v");
    CHECK_THROWS_AS(w.add_u32("k", 1), std::invalid_argument);  // duplicate key
    CHECK_THROWS_AS(w.add_u8("", 1), std::invalid_argument);
    CHECK_THROWS_AS(w.add_array("x", GgufType::STRING, nullptr, 0), std::invalid_argument);
    CHECK_THROWS_AS(w.add_u32("general.alignment", 48), std::invalid_argument);
    CHECK_THROWS_AS(w.set_version(1), std::invalid_argument);
    w.add_tensor_info("t", {32}, id(GgmlType::Q4_0));
    CHECK_THROWS_AS(w.add_tensor_info("t", {32}, id(GgmlType::Q4_0)), std::invalid_argument);
    CHECK_THROWS_AS(w.add_tensor_info("u", {48}, id(GgmlType::Q4_0)), std::invalid_argument);  // not whole blocks
    CHECK_THROWS_AS(w.add_tensor_info("u", {2, 0}, id(GgmlType::F32)), std::invalid_argument);
    CHECK_THROWS_AS(w.add_tensor_info("u", {1, 1, 1, 1, 1}, id(GgmlType::F32)), std::invalid_argument);
    CHECK_THROWS_AS(w.add_tensor_info("u", {4}, 4), std::invalid_argument);      // removed type id
    CHECK_THROWS_AS(w.add_u32("general.alignment", 64), std::invalid_argument);  // after tensors
    const float f = 0;
    CHECK_THROWS_AS(w.add_tensor("u", {2}, id(GgmlType::F32), &f, 4), std::invalid_argument);  // 4 of 8 bytes
    CHECK(w.tensor_count() == 1);
    CHECK(w.file_size() == w.data_offset() + 32);  // the rejected tensor left no trace
}

namespace {

// Runs loom-make-model (built next to this test) with `args` into a temporary file.
std::string make_model(const std::string& args, const std::string& name) {
    const auto tool = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "loom-make-model";
    INFO("needs " << tool.string() << " (build the loom-make-model target)");
    REQUIRE(std::filesystem::exists(tool));
    const std::string out = tmp_path(name);
    const std::string cmd = tool.string() + " --out " + out + " " + args + " > /dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return out;
}

// Mean and standard deviation of a dequantized tensor.
std::pair<double, double> stats(const lm::GgufTensor& t) {
    const auto n = static_cast<int64_t>(t.dims[0]);
    std::vector<float> row(static_cast<size_t>(n));
    double s = 0, s2 = 0;
    for (uint64_t r = 0; r < t.n_rows(); ++r) {
        lm::dequantize_row(t.type, t.data + r * lm::row_bytes(t.type, n), row.data(), n);
        for (float v : row) s += v, s2 += static_cast<double>(v) * v;
    }
    const double cnt = static_cast<double>(t.n_elements()), mean = s / cnt;
    return {mean, std::sqrt(s2 / cnt - mean * mean)};
}

}  // namespace

TEST_CASE("loom-make-model writes loadable llama-family models") {
    SECTION("tiny llama, F16: shapes, metadata, values, vocabulary") {
        const std::string path = make_model("--preset tiny --type f16 --seed 5", "tiny.gguf");
        const GgufFile f = GgufFile::open(path);
        const lm::HParams h = lm::HParams::from_gguf(f);
        CHECK(h.arch == "llama");
        CHECK(h.n_layer == 2);
        CHECK(h.n_embd == 256);
        CHECK(h.n_head == 4);
        CHECK(h.n_head_kv == 2);
        CHECK(h.n_ff == 768);
        CHECK(h.n_vocab == 512);
        CHECK(h.rope_dim == 64);
        CHECK(f.get_int("general.file_type", -1) == 1);
        CHECK(f.tensors().size() == 2 + 9 * 2 + 1);
        CHECK(f.tensor("token_embd.weight")->dims == std::vector<uint64_t>{256, 512});
        CHECK(f.tensor("output.weight")->dims == std::vector<uint64_t>{256, 512});
        CHECK(f.tensor("blk.1.attn_k.weight")->dims == std::vector<uint64_t>{256, 128});
        CHECK(f.tensor("blk.1.attn_output.weight")->dims == std::vector<uint64_t>{256, 256});
        CHECK(f.tensor("blk.0.ffn_down.weight")->dims == std::vector<uint64_t>{768, 256});
        CHECK(f.tensor("blk.0.ffn_gate.weight")->type == id(GgmlType::F16));
        CHECK(f.tensor("blk.0.ffn_norm.weight")->type == id(GgmlType::F32));
        const auto [qm, qs] = stats(*f.tensor("blk.0.attn_q.weight"));
        CHECK(std::fabs(qm) < 0.001);
        CHECK(qs == Approx(0.02).epsilon(0.05));
        const auto [nm, ns] = stats(*f.tensor("blk.1.attn_norm.weight"));
        CHECK(nm == Approx(1.0).epsilon(0.01));
        CHECK(ns == Approx(0.02).epsilon(0.2));
        CHECK(stats(*f.tensor("output.weight")).second == Approx(3.0 / 16).epsilon(0.05));

        const auto tok = lm::Tokenizer::from_gguf(f);
        CHECK(tok->n_vocab() == 512);
        CHECK(tok->vocab().bos == 1);
        CHECK(tok->vocab().eos == 2);
        CHECK(tok->vocab().unk == 0);
        CHECK(tok->vocab().add_bos);
        CHECK(tok->vocab().tokens[3] == "<0x00>");
        CHECK(tok->vocab().tokens[258] == "<0xFF>");
        const std::vector<int32_t> ids = tok->encode("Hi there, {x}!", true, false);
        CHECK(ids.front() == 1);
        CHECK(tok->decode(ids) == " Hi there, {x}!");  // SentencePiece's space prefix
        // "é" has no piece: "▁" (the first filler token, 259), then byte tokens <0xC3> <0xA9>.
        CHECK(tok->encode("\xC3\xA9", false, false) == std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9});
        // Same seed, same bytes; another seed, other weights.
        const std::string again = make_model("--preset tiny --type f16 --seed 5 --threads 1", "again.gguf");
        const std::string other = make_model("--preset tiny --type f16 --seed 6", "other.gguf");
        CHECK(read_file(again) == read_file(path));
        CHECK(read_file(other) != read_file(path));
        for (const auto& p : {path, again, other}) std::filesystem::remove(p);
    }
    SECTION("qwen2 q4_k_m: biases, Q6_K where llama.cpp's use_more_bits says") {
        const std::string path = make_model("--arch qwen2 --layers 8 --type q4_k_m --vocab 300", "q2.gguf");
        const GgufFile f = GgufFile::open(path);
        CHECK(lm::HParams::from_gguf(f).arch == "qwen2");
        CHECK(f.get_int("general.file_type", -1) == 15);
        CHECK(f.tensor("blk.3.attn_q.bias")->dims == std::vector<uint64_t>{256});
        CHECK(f.tensor("blk.3.attn_v.bias")->dims == std::vector<uint64_t>{128});
        CHECK(f.tensor("output.weight")->type == id(GgmlType::Q6_K));
        CHECK(f.tensor("token_embd.weight")->type == id(GgmlType::Q4_K));
        for (int l = 0; l < 8; ++l) {
            const bool more = l == 0 || l == 3 || l == 6 || l == 7;  // n/8 = 1: first, last, (l-1) % 3 == 2
            const auto want = id(more ? GgmlType::Q6_K : GgmlType::Q4_K);
            INFO("layer " << l);
            CHECK(f.tensor("blk." + std::to_string(l) + ".attn_v.weight")->type == want);
            CHECK(f.tensor("blk." + std::to_string(l) + ".ffn_down.weight")->type == want);
            CHECK(f.tensor("blk." + std::to_string(l) + ".attn_q.weight")->type == id(GgmlType::Q4_K));
        }
        CHECK(stats(*f.tensor("blk.5.ffn_up.weight")).second == Approx(0.02).epsilon(0.1));
        CHECK(lm::Tokenizer::from_gguf(f)->n_vocab() == 300);
        std::filesystem::remove(path);
    }
    SECTION("qwen3 tied q6_k with rows K-quants cannot hold: QK norms, llama.cpp's fallbacks") {
        const std::string path =
            make_model("--arch qwen3 --dim 160 --heads 5 --kv-heads 1 --ffn 256 --type q6_k --tied", "q3.gguf");
        const GgufFile f = GgufFile::open(path);
        const lm::HParams h = lm::HParams::from_gguf(f);
        CHECK(h.head_dim == 32);
        CHECK(f.tensor("output.weight") == nullptr);
        CHECK(f.tensor("blk.0.attn_q_norm.weight")->dims == std::vector<uint64_t>{32});
        CHECK(f.tensor("blk.0.attn_k_norm.weight")->type == id(GgmlType::F32));
        CHECK(f.tensor("blk.0.attn_q.weight")->type == id(GgmlType::Q8_0));    // rows of 160
        CHECK(f.tensor("blk.0.ffn_down.weight")->type == id(GgmlType::Q6_K));  // rows of 256
        CHECK(stats(*f.tensor("token_embd.weight")).second == Approx(3.0 / std::sqrt(160.0)).epsilon(0.05));
        std::filesystem::remove(path);
    }
    SECTION("bad shapes are refused") {
        const auto tool = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "loom-make-model";
        const std::string cmd = tool.string() + " --out " + tmp_path("bad.gguf") + " --heads 3 2> /dev/null";
        CHECK(std::system(cmd.c_str()) != 0);
    }
}
