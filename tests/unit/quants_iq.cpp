// The IQ1/IQ2/IQ3 types: their ids and sizes, their grids and sign table, the block decoders
// against a second, independent decoder, and the quantizers' blocks read by that decoder (the
// round-trip error bounds of every type are in quants.cpp).
//
// The second decoder (reference_decode below) is written from the block layouts as bit
// positions (ggml-common.h's structs laid out byte by byte), reads every field one bit range
// at a time, converts halves itself and computes in double. Every IQ weight is a product of
// few significant bits (a half's 11, a sub-block scale's 5, a grid value's 6, IQ1's 9/8 or
// 7/8), at most 22 in all, so both decoders compute it exactly and must agree bit for bit.
// The grids themselves are data (ggml's ggml-common.h); what the format says about them is
// checked here: their values' sets, their order, a parity the IQ2/IQ3_XXS lattices share,
// and, for the IQ1 grid, ggml's second packing of the same table (iq1s_grid_gpu).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "engine/backends/cpu/matvec.hpp"
#include "iq1s_grid_gpu.hpp"
#include "model/gguf/ggml_types.hpp"
#include "model/quant/iq_grids.hpp"
#include "model/quant/quant.hpp"

using loom::model::GgmlType;
namespace lm = loom::model;
namespace qb = loom::model::blocks;

namespace {

constexpr uint32_t id(GgmlType t) { return static_cast<uint32_t>(t); }

const std::vector<GgmlType> kIqTypes = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                                        GgmlType::IQ3_S,   GgmlType::IQ1_S,  GgmlType::IQ1_M};

// Bits [pos, pos + n) of the little-endian bit string b (bit i is bit i % 8 of byte i / 8).
uint32_t bits(const std::vector<uint8_t>& b, int pos, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i)
        v |= static_cast<uint32_t>((b[static_cast<size_t>((pos + i) / 8)] >> ((pos + i) % 8)) & 1) << i;
    return v;
}

// IEEE binary16 -> double, from its definition.
double half(uint32_t h) {
    const int e = static_cast<int>((h >> 10) & 31), m = static_cast<int>(h & 1023);
    const double mag = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return (h >> 15) ? -mag : mag;
}

// Value j of grid entry i: byte j, as an int8 for the IQ1 grid.
double grid_value(GgmlType t, uint32_t i, int j) {
    auto byte = [&](uint64_t e) { return static_cast<uint32_t>((e >> (8 * j)) & 0xff); };
    switch (t) {
        case GgmlType::IQ2_XXS: return byte(qb::kIq2xxsGrid[i]);
        case GgmlType::IQ2_XS: return byte(qb::kIq2xsGrid[i]);
        case GgmlType::IQ2_S: return byte(qb::kIq2sGrid[i]);
        case GgmlType::IQ3_XXS: return byte(qb::kIq3xxsGrid[i]);
        case GgmlType::IQ3_S: return byte(qb::kIq3sGrid[i]);
        default: return static_cast<int8_t>(static_cast<uint8_t>(byte(qb::kIq1sGrid[i])));
    }
}

// -1 when bit j of the sign pattern is set; a 7-bit pattern's eighth bit makes the number of
// set bits even (the format's rule for IQ2_XXS, IQ2_XS and IQ3_XXS).
double sign(uint32_t pattern, int j, bool seven_bits) {
    if (seven_bits && (std::popcount(pattern & 127) & 1)) pattern |= 128;
    return ((pattern >> j) & 1) ? -1.0 : 1.0;
}

// The 256 weights of one block of IQ type t, from the layout's bit positions. Group g (weights
// 8g..8g+7) lies in sub-block s = g / 4 at position l = g % 4.
std::vector<double> reference_decode(GgmlType t, const std::vector<uint8_t>& b) {
    std::vector<double> y(256);
    const double d = half(bits(b, 0, 16));
    for (int g = 0; g < 32; ++g) {
        const int s = g / 4, l = g % 4;
        double scale = 0, shift = 0;
        uint32_t entry[2] = {0, 0}, signs = 0;
        bool seven = false;
        switch (t) {
            case GgmlType::IQ2_XXS:  // per sub-block 64 bits: 4 x 8-bit index, 4 x 7-bit signs, 4-bit scale
                entry[0] = bits(b, 16 + 64 * s + 8 * l, 8);
                signs = bits(b, 16 + 64 * s + 32 + 7 * l, 7), seven = true;
                scale = d * (0.5 + bits(b, 16 + 64 * s + 60, 4)) / 4;
                break;
            case GgmlType::IQ2_XS:  // per group 16 bits: 9-bit index, 7-bit signs; scales at byte 66
                entry[0] = bits(b, 16 + 16 * g, 9);
                signs = bits(b, 16 + 16 * g + 9, 7), seven = true;
                scale = d * (0.5 + bits(b, 66 * 8 + 8 * s + 4 * (l / 2), 4)) / 4;
                break;
            case GgmlType::IQ2_S:  // index low bytes at 2, sign bytes at 34, 2 index bits per group at 66
                entry[0] = bits(b, 16 + 8 * g, 8) | bits(b, 66 * 8 + 2 * g, 2) << 8;
                signs = bits(b, 34 * 8 + 8 * g, 8);
                scale = d * (0.5 + bits(b, 74 * 8 + 8 * s + 4 * (l / 2), 4)) / 4;
                break;
            case GgmlType::IQ3_XXS:  // two 8-bit indices per group at 2; per sub-block 32 bits at 66
                entry[0] = bits(b, 16 + 16 * g, 8), entry[1] = bits(b, 16 + 16 * g + 8, 8);
                signs = bits(b, 66 * 8 + 32 * s + 7 * l, 7), seven = true;
                scale = d * (0.5 + bits(b, 66 * 8 + 32 * s + 28, 4)) / 2;
                break;
            case GgmlType::IQ3_S:  // two indices per group: low bytes at 2, ninth bits at 66
                for (int h = 0; h < 2; ++h)
                    entry[h] = bits(b, 16 + 16 * g + 8 * h, 8) | bits(b, 66 * 8 + 2 * g + h, 1) << 8;
                signs = bits(b, 74 * 8 + 8 * g, 8);
                scale = d * (1 + 2 * bits(b, 106 * 8 + 4 * s, 4));
                break;
            case GgmlType::IQ1_S: {  // index low bytes at 2; per sub-block 16 bits at 34
                const int qh = 34 * 8 + 16 * s;
                entry[0] = bits(b, 16 + 8 * g, 8) | bits(b, qh + 3 * l, 3) << 8;
                scale = d * (2 * bits(b, qh + 12, 3) + 1);
                shift = bits(b, qh + 15, 1) ? -0.125 : 0.125;
                break;
            }
            case GgmlType::IQ1_M: {  // index low bytes at 0, 4 bits per group at 32, scales at 48
                double dm = half(bits(b, 48 * 8 + 12, 4) | bits(b, 48 * 8 + 28, 4) << 4 | bits(b, 48 * 8 + 44, 4) << 8 |
                                 bits(b, 48 * 8 + 60, 4) << 12);
                entry[0] = bits(b, 8 * g, 8) | bits(b, 32 * 8 + 4 * g, 3) << 8;
                shift = bits(b, 32 * 8 + 4 * g + 3, 1) ? -0.125 : 0.125;
                scale = dm * (2 * bits(b, 48 * 8 + 16 * (s / 2) + 6 * (s % 2) + 3 * (l / 2), 3) + 1);
                break;
            }
            default: FAIL("not an IQ type");
        }
        const bool iq1 = t == GgmlType::IQ1_S || t == GgmlType::IQ1_M;
        const bool four_wide = t == GgmlType::IQ3_XXS || t == GgmlType::IQ3_S;
        for (int j = 0; j < 8; ++j) {
            const double v = four_wide ? grid_value(t, entry[j / 4], j % 4) : grid_value(t, entry[0], j);
            y[static_cast<size_t>(8 * g + j)] = iq1 ? scale * (v + shift) : scale * v * sign(signs, j, seven);
        }
    }
    return y;
}

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& b, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    lm::dequantize_row(id(t), b.data(), y.data(), n);
    return y;
}

// Writes the half h as the block's scale d: bytes 0-1, or IQ1_M's four top nibbles of its
// scale words (bytes 48-55), leaving the other bits alone.
void set_d(GgmlType t, uint8_t* b, uint16_t h) {
    if (t != GgmlType::IQ1_M) {
        std::memcpy(b, &h, 2);
        return;
    }
    for (int i = 0; i < 4; ++i)
        b[48 + 2 * i + 1] = static_cast<uint8_t>((b[48 + 2 * i + 1] & 0x0f) | (((h >> (4 * i)) & 15) << 4));
}

// Compares the library's decode of block b with reference_decode, bit for bit, and checks
// that dot_row with one-hot vectors reads the same weights.
void check_against_reference(GgmlType t, const std::vector<uint8_t>& b, bool onehot = false) {
    const std::vector<double> want = reference_decode(t, b);
    const std::vector<float> got = decode(t, b, 256);
    std::vector<float> e(256, 0.0f);
    for (size_t j = 0; j < 256; ++j) {
        INFO(lm::type_name(id(t)) << " weight " << j);
        REQUIRE(static_cast<double>(got[j]) == want[j]);
        if (!onehot) continue;
        e[j] = 1.0f;
        REQUIRE(static_cast<double>(loom::cpu::dot_row(id(t), b.data(), e.data(), 256)) == want[j]);
        e[j] = 0.0f;
    }
}

int grid_size(GgmlType t) {
    const std::map<GgmlType, int> n = {{GgmlType::IQ2_XXS, 256}, {GgmlType::IQ2_XS, 512}, {GgmlType::IQ2_S, 1024},
                                       {GgmlType::IQ3_XXS, 256}, {GgmlType::IQ3_S, 512},  {GgmlType::IQ1_S, 2048},
                                       {GgmlType::IQ1_M, 2048}};
    return n.at(t);
}

// Sets group g's grid index (entry h of the group on the 4-wide grids) to i, and its sign
// pattern (7 or 8 bits; IQ1: the shift bit, bit 0) to sg, by the layouts in reference_decode.
void put_bits(std::vector<uint8_t>& b, int pos, int n, uint32_t v) {
    for (int k = 0; k < n; ++k) {
        uint8_t& byte = b[static_cast<size_t>((pos + k) / 8)];
        byte = static_cast<uint8_t>((byte & ~(1u << ((pos + k) % 8))) | (((v >> k) & 1) << ((pos + k) % 8)));
    }
}
void set_group(GgmlType t, std::vector<uint8_t>& b, int g, int h, uint32_t i, uint32_t sg) {
    const int s = g / 4, l = g % 4;
    switch (t) {
        case GgmlType::IQ2_XXS:
            put_bits(b, 16 + 64 * s + 8 * l, 8, i), put_bits(b, 16 + 64 * s + 32 + 7 * l, 7, sg);
            break;
        case GgmlType::IQ2_XS: put_bits(b, 16 + 16 * g, 9, i), put_bits(b, 16 + 16 * g + 9, 7, sg); break;
        case GgmlType::IQ2_S:
            put_bits(b, 16 + 8 * g, 8, i), put_bits(b, 66 * 8 + 2 * g, 2, i >> 8), put_bits(b, 34 * 8 + 8 * g, 8, sg);
            break;
        case GgmlType::IQ3_XXS:
            put_bits(b, 16 + 16 * g + 8 * h, 8, i), put_bits(b, 66 * 8 + 32 * s + 7 * l, 7, sg);
            break;
        case GgmlType::IQ3_S:
            put_bits(b, 16 + 16 * g + 8 * h, 8, i), put_bits(b, 66 * 8 + 2 * g + h, 1, i >> 8);
            put_bits(b, 74 * 8 + 8 * g, 8, sg);
            break;
        case GgmlType::IQ1_S: put_bits(b, 16 + 8 * g, 8, i), put_bits(b, 34 * 8 + 16 * s + 3 * l, 3, i >> 8); break;
        case GgmlType::IQ1_M:
            put_bits(b, 8 * g, 8, i), put_bits(b, 32 * 8 + 4 * g, 3, i >> 8), put_bits(b, 32 * 8 + 4 * g + 3, 1, sg);
            break;
        default: FAIL("not an IQ type");
    }
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& ref) {
    double e = 0, r = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = static_cast<double>(got[i]) - ref[i];
        e += d * d, r += static_cast<double>(ref[i]) * ref[i];
    }
    return std::sqrt(e / r);
}

}  // namespace

TEST_CASE("IQ type ids and block sizes are ggml's") {
    // ggml.h's enum ggml_type and ggml-common.h's block structs (static_asserted sizes there).
    const std::map<GgmlType, std::tuple<uint32_t, const char*, uint32_t>> want = {
        {GgmlType::IQ2_XXS, {16, "iq2_xxs", 66}}, {GgmlType::IQ2_XS, {17, "iq2_xs", 74}},
        {GgmlType::IQ3_XXS, {18, "iq3_xxs", 98}}, {GgmlType::IQ1_S, {19, "iq1_s", 50}},
        {GgmlType::IQ3_S, {21, "iq3_s", 110}},    {GgmlType::IQ2_S, {22, "iq2_s", 82}},
        {GgmlType::IQ1_M, {29, "iq1_m", 56}}};
    for (const auto& [t, w] : want) {
        const auto& [num, name, bytes] = w;
        CHECK(id(t) == num);
        const auto tr = lm::type_traits(num);
        REQUIRE(tr);
        CHECK(tr->name == name);
        CHECK(tr->block_size == 256);
        CHECK(tr->type_size == bytes);
        CHECK(lm::row_bytes(num, 512) == 2 * bytes);
    }
}

TEST_CASE("the IQ grids and sign table hold what the format says of them") {
    // Sign patterns: index i with bit 7 set when i has an odd number of bits.
    for (uint32_t i = 0; i < 128; ++i) CHECK(qb::kSignsIq2xs[i] == (i | ((std::popcount(i) & 1u) << 7)));
    CHECK(qb::kIq1Delta == 0.125f);
    // Each grid's values lie in the format's level set; the entries are distinct and in
    // ascending order of their level indices (value 0 the least significant digit); on the
    // IQ2 grids and IQ3_XXS's every entry's level indices have an even sum.
    struct Grid {
        const char* name;
        std::vector<uint64_t> entries;
        int width;
        std::vector<int> levels;
        bool even;
    };
    auto load = [](const auto* table, int n) { return std::vector<uint64_t>(table, table + n); };
    const std::vector<Grid> grids = {
        {"iq2xxs", load(qb::kIq2xxsGrid, 256), 8, {8, 25, 43}, true},
        {"iq2xs", load(qb::kIq2xsGrid, 512), 8, {8, 25, 43}, true},
        {"iq2s", load(qb::kIq2sGrid, 1024), 8, {8, 25, 43}, true},
        {"iq3xxs", load(qb::kIq3xxsGrid, 256), 4, {4, 12, 20, 28, 36, 44, 52, 62}, true},
        {"iq3s", load(qb::kIq3sGrid, 512), 4, {1, 3, 5, 7, 9, 11, 13, 15}, false},
        {"iq1s", load(qb::kIq1sGrid, 2048), 8, {0xff, 0, 1}, false},  // int8 -1, 0, 1
    };
    for (const Grid& g : grids) {
        INFO(g.name);
        uint64_t prev_index = 0;
        for (size_t i = 0; i < g.entries.size(); ++i) {
            uint64_t index = 0;
            int sum = 0;
            for (int j = g.width - 1; j >= 0; --j) {
                const int v = static_cast<int>((g.entries[i] >> (8 * j)) & 0xff);
                const auto it = std::find(g.levels.begin(), g.levels.end(), v);
                INFO("entry " << i << " value " << j << " = " << v);
                REQUIRE(it != g.levels.end());
                const auto level = static_cast<uint64_t>(it - g.levels.begin());
                index = index * g.levels.size() + level;
                sum += static_cast<int>(level);
            }
            if (g.width == 4) CHECK((g.entries[i] >> 32) == 0);
            if (i > 0) CHECK(index > prev_index);
            if (g.even) CHECK(sum % 2 == 0);
            prev_index = index;
        }
    }
    // ggml's second packing of the IQ1 grid: value j + 1 in the nibble at 8 (j % 4) + 4 (j / 4).
    for (size_t i = 0; i < 2048; ++i)
        for (int j = 0; j < 8; ++j) {
            const int want = static_cast<int>((loom::test::kIq1sGridGpu[i] >> (8 * (j % 4) + 4 * (j / 4))) & 15) - 1;
            INFO("iq1s entry " << i << " value " << j);
            REQUIRE(grid_value(GgmlType::IQ1_S, static_cast<uint32_t>(i), j) == want);
        }
}

TEST_CASE("IQ blocks selecting every grid entry and sign pattern decode as the second decoder") {
    std::mt19937 rng(5);
    for (GgmlType t : kIqTypes) {
        const auto bytes = lm::type_traits(id(t))->type_size;
        const bool four_wide = t == GgmlType::IQ3_XXS || t == GgmlType::IQ3_S;
        const int per_block = four_wide ? 64 : 32;  // grid entries one block selects
        // Sign patterns: 8 free bits, 7 bits with parity, or IQ1_M's shift bit (IQ1_S: per sub-block, random).
        const bool iq1 = t == GgmlType::IQ1_S || t == GgmlType::IQ1_M;
        const uint32_t patterns = t == GgmlType::IQ2_S || t == GgmlType::IQ3_S ? 256 : iq1 ? 2 : 128;
        const int n = grid_size(t);
        // Enough blocks for every entry and every sign pattern, each block with random scales.
        const int blocks = std::max(n / per_block, static_cast<int>(patterns) / 32);
        for (int k = 0; k < blocks; ++k) {
            std::vector<uint8_t> b(bytes);
            for (uint8_t& c : b) c = static_cast<uint8_t>(rng());
            set_d(t, b.data(), lm::fp32_to_fp16(std::ldexp(1.0f + static_cast<float>(k % 7) / 8, k % 5 - 2)));
            for (int g = 0; g < 32; ++g) {
                const auto i = static_cast<uint32_t>((per_block * k + (four_wide ? 2 * g : g)) % n);
                set_group(t, b, g, 0, i, static_cast<uint32_t>(32 * k + g) % patterns);
                if (four_wide)
                    set_group(t, b, g, 1, (i + 1) % static_cast<uint32_t>(n),
                              static_cast<uint32_t>(32 * k + g) % patterns);
            }
            check_against_reference(t, b, k == 0);
        }
    }
}

TEST_CASE("random IQ blocks decode as the second decoder, bit for bit") {
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (GgmlType t : kIqTypes) {
        const auto bytes = lm::type_traits(id(t))->type_size;
        for (int k = 0; k < 300; ++k) {
            std::vector<uint8_t> b(bytes);
            for (uint8_t& c : b) c = static_cast<uint8_t>(rng());
            // A finite d, subnormal halves included (k % 10 == 0).
            const float d = k % 10 == 0 ? 3e-7f * static_cast<float>(k % 7 + 1) : 0.01f * nd(rng);
            set_d(t, b.data(), lm::fp32_to_fp16(d));
            check_against_reference(t, b);
        }
    }
}

TEST_CASE("quantized IQ blocks are valid: the second decoder reads what dequantize_row does") {
    // The round-trip error bounds of these quantizers are in tests/unit/quants.cpp, with
    // every other type's.
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(2048);
    for (float& v : x) v = nd(rng);
    for (GgmlType t : kIqTypes) {
        INFO(lm::type_name(id(t)));
        const auto bytes = lm::type_traits(id(t))->type_size;
        std::vector<uint8_t> q(lm::row_bytes(id(t), 2048));
        lm::quantize_row(id(t), x.data(), q.data(), 2048);
        const std::vector<float> y = decode(t, q, 2048);
        for (size_t k = 0; k < 8; ++k) {
            const std::vector<uint8_t> b(q.begin() + static_cast<long>(k * bytes),
                                         q.begin() + static_cast<long>((k + 1) * bytes));
            const std::vector<double> ref = reference_decode(t, b);
            for (size_t j = 0; j < 256; ++j) REQUIRE(ref[j] == y[256 * k + j]);
        }
        CHECK(rel_rms(y, x) < 0.6);
        // A constant row: every grid has an entry of equal values, so it comes out close.
        std::vector<float> c(256, 0.3f);
        std::vector<uint8_t> qc(lm::row_bytes(id(t), 256));
        lm::quantize_row(id(t), c.data(), qc.data(), 256);
        CHECK(rel_rms(decode(t, qc, 256), c) < 0.01);
    }
}
