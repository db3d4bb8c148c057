// The GPU engine's forward plan (engine/backends/gpu/gpu_plan.hpp) without a device: for every
// weight type, row count, precision tier, KV pool, build (CUDA with cuBLAS or loom's GEMM, the
// emulator, HIP) and tuning knob, make_plan() picks for each product a kernel that the emulator
// tests run on that type (the table below names them), its routes cover every row count, the
// matvec path is the same for every product of a step, Exact is one kernel whatever the rows,
// Accurate rounds no operand to F16; and the choices documented in docs/benchmarks.md (the
// matvec/GEMM crossovers, the decode GEMM's limits) are the ones it makes.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backends/gpu/gpu_plan.hpp"

using namespace loom::gpu;

namespace Catch {
template <>
struct StringMaker<Kernel> {
    static std::string convert(Kernel k) { return kernel_name(k); }
};
}  // namespace Catch

namespace {

// The weight types the emulator tests run each kernel on.
const std::map<Kernel, std::set<uint32_t>>& covered() {
    static const std::map<Kernel, std::set<uint32_t>> c = {
        // loom-gpu-matvec-test-emu (tests/gpu/test_matvec.cpp): the single-vector kernel.
        {Kernel::MatvecSingle, {kQ4_K, kQ6_K, kQ8_0}},
        // loom-gpu-matvec-test-emu: batched and fixed tilings of the 16-bit and quantized types;
        // F32 in e2e test_gpu_emulator.py (stories260K's F32 matrices: test_f32_model_*, and
        // test_batch_invariant_lines_are_bitwise_equal for the fixed tiling).
        {Kernel::Matvec, {kF32, kF16, kBF16, kQ8_0, kQ4_K, kQ6_K}},
        {Kernel::MatvecFixed, {kF32, kF16, kBF16, kQ8_0, kQ4_K, kQ6_K}},
        // loom-gpu-qgemm-test-emu (tests/gpu/test_qgemm.cpp): every type the decode GEMM takes,
        // its fragment kernels and their exact form.
        {Kernel::QgemmFrag, {kQ4_K, kQ6_K}},
        {Kernel::QgemmTile, {kF16, kBF16, kQ8_0, kQ4_K, kQ6_K}},
        {Kernel::QgemmExact, {kQ4_K, kQ6_K}},
        // e2e test_gpu_emulator.py: stories260K's prompts (F32), and test_long_rows_every_decode_path's
        // GEMM-path runs (--matvec-rows 1) of F16, BF16, Q8_0 and Q4_K_M (Q4_K, Q6_K) models
        // in the fast and accurate tiers.
        {Kernel::Gemm, {kF32, kF16}},
        {Kernel::GemmSplit, {kF16}},
        {Kernel::DequantGemm, {kBF16, kQ8_0, kQ4_K, kQ6_K}},
        {Kernel::DequantGemmSplit, {kBF16, kQ8_0, kQ4_K, kQ6_K}},
    };
    return c;
}

PlanMatrix mat(uint32_t type, int64_t rows, int64_t cols) {
    PlanMatrix m;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    return m;
}

// A Llama-3-8B-shaped model (2 layers) with every matrix of one type, merged as DeviceModel
// merges them (q | k | v and gate | up of one type, not F32), or (q4_k_m) llama.cpp's Q4_K_M
// mix: Q4_K with Q6_K for v, ffn_down and the output, so q | k merge and v does not.
PlanModel model_of(uint32_t type, bool q4_k_m = false, int max_rows = 2048, int64_t d = 4096, int64_t ff = 14336) {
    const int64_t nq = 4096, nkv = 1024, vocab = 128256;
    PlanModel m;
    for (int l = 0; l < 2; ++l) {
        PlanLayer L;
        L.q = mat(type, nq, d), L.k = mat(type, nkv, d);
        L.v = mat(q4_k_m ? kQ6_K : type, nkv, d);
        L.o = mat(type, d, nq);
        L.gate = mat(type, ff, d), L.up = mat(type, ff, d);
        L.down = mat(q4_k_m ? kQ6_K : type, d, ff);
        if (type != kF32) {
            if (q4_k_m) L.qk = mat(type, nq + nkv, d);
            else L.qkv = mat(type, nq + 2 * nkv, d);
            L.gate_up = mat(type, 2 * ff, d);
        }
        m.layers.push_back(L);
    }
    m.output = mat(q4_k_m ? kQ6_K : type, vocab, d);
    m.attn.n_head = 32;
    m.attn.n_head_kv = 8;
    m.attn.head_dim = 128;
    m.attn.rope_dim = 128;
    m.max_rows = max_rows;
    return m;
}

PlanDevice cuda(bool cublas = true) {
    PlanDevice d;
    d.cublas = cublas;
    d.decode_gemm = d.flash = d.flash_auto = true;
    d.frag_gemm_rows = 256;
    d.tile_gemm_rows = 64;
    return d;
}

PlanDevice emulator() {
    PlanDevice d;
    d.decode_gemm = d.flash = d.split_parts = true;
    return d;
}

PlanDevice hip() { return PlanDevice{}; }

using Runs = std::vector<std::pair<int, Kernel>>;

// Every route of the plan with its matrix: (name, matrix, route).
struct Entry {
    std::string name;
    const PlanMatrix* m;
    const Route* r;
};
std::vector<Entry> entries(const PlanModel& model, const ForwardPlan& p) {
    std::vector<Entry> e;
    for (size_t l = 0; l < model.layers.size(); ++l) {
        const PlanLayer& M = model.layers[l];
        const LayerPlan& P = p.layers[l];
        const std::string at = " of layer " + std::to_string(l);
        e.push_back({"q" + at, &M.q, &P.q});
        e.push_back({"k" + at, &M.k, &P.k});
        e.push_back({"v" + at, &M.v, &P.v});
        e.push_back({"qkv" + at, &M.qkv, &P.qkv});
        e.push_back({"qk" + at, &M.qk, &P.qk});
        e.push_back({"o" + at, &M.o, &P.o});
        e.push_back({"gate" + at, &M.gate, &P.gate});
        e.push_back({"up" + at, &M.up, &P.up});
        e.push_back({"gate_up" + at, &M.gate_up, &P.gate_up});
        e.push_back({"down" + at, &M.down, &P.down});
    }
    e.push_back({"output", &model.output, &p.output});
    return e;
}

// The properties every plan has; returns the number of (product, row count) pairs checked.
int check_plan(const PlanModel& model, const ForwardPlan& p, Precision tier) {
    int n = 0;
    REQUIRE(p.layers.size() == model.layers.size());
    for (const Entry& e : entries(model, p)) {
        INFO(e.name);
        REQUIRE(e.r->runs.empty() == !e.m->present());
        if (!e.m->present()) continue;
        int prev = 0;
        for (const auto& [last, k] : e.r->runs) {
            REQUIRE(last > prev);
            prev = last;
            INFO("kernel " << kernel_name(k) << ", type " << e.m->type);
            CHECK(covered().at(k).count(e.m->type) == 1);
            if (tier == Precision::Exact) CHECK(k == Kernel::MatvecFixed);
            if (tier != Precision::Exact) CHECK(k != Kernel::MatvecFixed);
            if (tier == Precision::Accurate) {  // no operand rounded to F16
                CHECK(k != Kernel::QgemmFrag);
                CHECK(k != Kernel::QgemmTile);
                CHECK(k != Kernel::DequantGemm);
                if (k == Kernel::Gemm) CHECK(e.m->type == kF32);
            }
        }
        REQUIRE(prev == model.max_rows);
        // One path for every product of a step: linear() launches a call's matrices together.
        int mixed = 0;
        for (int rows = 1; rows <= model.max_rows; ++rows, ++n) mixed += is_matvec(e.r->at(rows)) != p.matvec(rows);
        CHECK(mixed == 0);
        CHECK_THROWS_AS(e.r->at(model.max_rows + 1), std::logic_error);
    }
    if (tier == Precision::Exact) {
        CHECK(p.prefill_attn == PrefillAttnKernel::DecodeAll);
        CHECK_FALSE(p.fuse_norm1);
        for (const LayerPlan& L : p.layers) CHECK_FALSE(L.rope_fused);
    } else {
        CHECK(p.prefill_attn != PrefillAttnKernel::DecodeAll);
    }
    if (p.kv_f32) {  // the F16-pool prefill attention paths read F16 K/V
        CHECK((p.prefill_attn == PrefillAttnKernel::Tiled || p.prefill_attn == PrefillAttnKernel::DecodeAll));
    }
    return n;
}

Runs runs_of(const Route& r) { return r.runs; }

}  // namespace

TEST_CASE("every type, row count, tier, pool, build and knob maps to a covered kernel") {
    struct Dev {
        const char* name;
        PlanDevice d;
    } devs[] = {{"cuda", cuda()}, {"cuda own GEMM", cuda(false)}, {"emulator", emulator()}, {"hip", hip()}};
    struct Knob {
        const char* name;
        GpuTuning t;
    };
    std::vector<Knob> knobs;
    knobs.push_back({"default", GpuTuning{}});
    for (int mv : {0, 1, 4, 16}) {
        GpuTuning t;
        t.matvec_rows = mv;
        knobs.push_back({"matvec_rows", t});
    }
    for (int dg : {0, 64, 300}) {
        GpuTuning t;
        t.decode_gemm_rows = dg;
        knobs.push_back({"decode_gemm_rows", t});
    }
    GpuTuning t;
    t.decode_gemm_tiled = true;
    knobs.push_back({"decode_gemm_tiled", t});
    t = GpuTuning{};
    t.decode_gemm_f16 = true;
    knobs.push_back({"decode_gemm_f16", t});
    t = GpuTuning{};
    t.matvec_single = false;
    t.fuse_rope = false;
    knobs.push_back({"no single, no fused rope", t});
    using PA = GpuTuning::PrefillAttn;
    for (PA pa : {PA::Tiled, PA::Gemm, PA::Gemm16, PA::Flash}) {
        t = GpuTuning{};
        t.prefill_attn = pa;
        knobs.push_back({"prefill_attn", t});
    }
    struct Model {
        const char* name;
        PlanModel m;
    };
    // Steps of up to 300 rows: past every crossover (the largest, the fragment kernels', is 256).
    std::vector<Model> models = {{"f32", model_of(kF32, false, 300)},
                                 {"f16", model_of(kF16, false, 300)},
                                 {"bf16", model_of(kBF16, false, 300)},
                                 {"q8_0", model_of(kQ8_0, false, 300)},
                                 {"q4_k", model_of(kQ4_K, false, 300)},
                                 {"q6_k", model_of(kQ6_K, false, 300)},
                                 {"q4_k_m", model_of(kQ4_K, true, 300)},
                                 // rows of 200 columns: no whole K-quant block (16-bit types only)
                                 {"f16 narrow", model_of(kF16, false, 300, 200, 200)},
                                 {"bf16 narrow", model_of(kBF16, false, 300, 200, 200)}};
    int plans = 0, pairs = 0, refused = 0;
    for (const Dev& dev : devs)
        for (Precision tier : {Precision::Fast, Precision::Accurate, Precision::Exact})
            for (bool kv_f32 : {false, true})
                for (const Knob& k : knobs)
                    for (const Model& m : models) {
                        INFO(dev.name << ", " << precision_name(tier) << ", KV " << (kv_f32 ? "F32" : "F16") << ", "
                                      << k.name << ", " << m.name);
                        // The combinations make_plan refuses, and why.
                        const bool split_rounding =
                            tier == Precision::Accurate && (k.t.decode_gemm_tiled || k.t.decode_gemm_f16);
                        const bool no_kernel = k.t.decode_gemm_rows > 0 && !dev.d.decode_gemm;
                        const bool no_flash =
                            k.t.prefill_attn == PA::Flash && (kv_f32 || tier == Precision::Exact || !dev.d.flash);
                        if (split_rounding || no_kernel || no_flash) {
                            CHECK_THROWS_AS(make_plan(m.m, dev.d, tier, kv_f32, k.t), std::invalid_argument);
                            ++refused;
                            continue;
                        }
                        const ForwardPlan p = make_plan(m.m, dev.d, tier, kv_f32, k.t);
                        pairs += check_plan(m.m, p, tier);
                        ++plans;
                    }
    CHECK(plans > 1000);
    CHECK(refused > 50);
    CHECK(pairs > 1000000);
}

TEST_CASE("the documented crossovers on CUDA") {
    const PlanDevice d = cuda();
    SECTION("fast: Q4_K on the single-vector kernel, the fragment kernels up to 256 rows, then dequantized") {
        const PlanModel m = model_of(kQ4_K);
        const ForwardPlan p = make_plan(m, d, Precision::Fast, false, GpuTuning{});
        CHECK(p.matvec_rows == 2);
        CHECK(p.fuse_norm1);
        CHECK(p.f16_in);
        CHECK(p.layers[0].rope_fused);
        CHECK(p.prefill_attn == PrefillAttnKernel::Flash);
        const Runs want = {
            {1, Kernel::MatvecSingle}, {2, Kernel::Matvec}, {256, Kernel::QgemmFrag}, {2048, Kernel::DequantGemm}};
        CHECK(runs_of(p.layers[0].q) == want);
        CHECK(runs_of(p.layers[1].gate_up) == Runs{{1, Kernel::MatvecSingle},
                                                   {2, Kernel::Matvec},
                                                   {256, Kernel::QgemmFrag},
                                                   {2048, Kernel::DequantGemm}});
    }
    SECTION("fast: F16 on cuBLAS from 3 rows; Q8_0 on the tile kernel up to 64") {
        const ForwardPlan f16 = make_plan(model_of(kF16), d, Precision::Fast, false, GpuTuning{});
        CHECK(runs_of(f16.layers[0].q) == Runs{{2, Kernel::Matvec}, {2048, Kernel::Gemm}});
        const ForwardPlan q8 = make_plan(model_of(kQ8_0), d, Precision::Fast, false, GpuTuning{});
        CHECK(
            runs_of(q8.layers[0].q) ==
            Runs{{1, Kernel::MatvecSingle}, {2, Kernel::Matvec}, {64, Kernel::QgemmTile}, {2048, Kernel::DequantGemm}});
    }
    SECTION("fast: Q4_K_M's Q6_K v beside the merged q | k") {
        const PlanModel m = model_of(kQ4_K, true);
        const ForwardPlan p = make_plan(m, d, Precision::Fast, false, GpuTuning{});
        CHECK(runs_of(p.layers[0].qk) == Runs{{1, Kernel::MatvecSingle},
                                              {2, Kernel::Matvec},
                                              {256, Kernel::QgemmFrag},
                                              {2048, Kernel::DequantGemm}});
        CHECK(p.layers[0].qkv.runs.empty());
        CHECK(runs_of(p.output) == Runs{{1, Kernel::MatvecSingle},
                                        {2, Kernel::Matvec},
                                        {256, Kernel::QgemmFrag},
                                        {2048, Kernel::DequantGemm}});
    }
    SECTION("accurate: Q4_K through the exact kernel up to 64 rows; Q8_0 on the matvec up to 8") {
        const ForwardPlan q4 = make_plan(model_of(kQ4_K), d, Precision::Accurate, true, GpuTuning{});
        CHECK(q4.split_parts);
        CHECK(q4.split_sums);
        CHECK_FALSE(q4.f16_in);
        CHECK(q4.prefill_attn == PrefillAttnKernel::Tiled);  // the F32 pool
        CHECK(runs_of(q4.layers[0].q) == Runs{{1, Kernel::MatvecSingle},
                                              {2, Kernel::Matvec},
                                              {64, Kernel::QgemmExact},
                                              {2048, Kernel::DequantGemmSplit}});
        const ForwardPlan q8 = make_plan(model_of(kQ8_0), d, Precision::Accurate, true, GpuTuning{});
        CHECK(q8.matvec_rows == 8);
        CHECK(runs_of(q8.layers[0].q) ==
              Runs{{1, Kernel::MatvecSingle}, {8, Kernel::Matvec}, {2048, Kernel::DequantGemmSplit}});
        const ForwardPlan f16 = make_plan(model_of(kF16), d, Precision::Accurate, true, GpuTuning{});
        CHECK(runs_of(f16.layers[0].q) == Runs{{2, Kernel::Matvec}, {2048, Kernel::GemmSplit}});
    }
    SECTION("exact: the fixed 8-vector matvec for every row count, every query through decode attention") {
        const PlanModel m = model_of(kQ4_K, true);
        const ForwardPlan p = make_plan(m, d, Precision::Exact, true, GpuTuning{});
        for (const Entry& e : entries(m, p))
            if (e.m->present()) CHECK(runs_of(*e.r) == Runs{{2048, Kernel::MatvecFixed}});
        CHECK(p.prefill_attn == PrefillAttnKernel::DecodeAll);
        CHECK(p.matvec(2048));
    }
    SECTION("fast with the F32 pool: the tiled prefill attention; F16 pool, gemm16 on request") {
        CHECK(make_plan(model_of(kF16), d, Precision::Fast, true, GpuTuning{}).prefill_attn ==
              PrefillAttnKernel::Tiled);
        GpuTuning t;
        t.prefill_attn = GpuTuning::PrefillAttn::Gemm16;
        CHECK(make_plan(model_of(kF16), d, Precision::Fast, false, t).prefill_attn == PrefillAttnKernel::Gemm16);
        t.prefill_attn = GpuTuning::PrefillAttn::Gemm;
        CHECK(make_plan(model_of(kF16), d, Precision::Fast, false, t).prefill_attn == PrefillAttnKernel::GemmSplit);
    }
}

TEST_CASE("the emulator's and HIP's defaults: no decode GEMM unless asked, loom's GEMM, tiled attention") {
    for (const PlanDevice& d : {emulator(), hip()}) {
        const ForwardPlan p = make_plan(model_of(kQ4_K), d, Precision::Fast, false, GpuTuning{});
        CHECK(p.matvec_rows == 8);
        CHECK_FALSE(p.f16_in);
        CHECK(p.prefill_attn == PrefillAttnKernel::Tiled);
        CHECK(runs_of(p.layers[0].q) ==
              Runs{{1, Kernel::MatvecSingle}, {8, Kernel::Matvec}, {2048, Kernel::DequantGemm}});
    }
    // The emulator takes the decode GEMM on request (its tile kernel: F32 activations) and makes
    // the split products' F16 parts as cuBLAS would read them; HIP reads F32 activations.
    GpuTuning t;
    t.decode_gemm_rows = 64;
    const ForwardPlan e = make_plan(model_of(kQ4_K), emulator(), Precision::Fast, false, t);
    CHECK(runs_of(e.layers[0].q) ==
          Runs{{1, Kernel::MatvecSingle}, {2, Kernel::Matvec}, {64, Kernel::QgemmTile}, {2048, Kernel::DequantGemm}});
    CHECK(make_plan(model_of(kQ4_K), emulator(), Precision::Accurate, true, t).split_sums);
    CHECK_FALSE(make_plan(model_of(kQ4_K), hip(), Precision::Accurate, true, GpuTuning{}).split_parts);
    CHECK_THROWS_WITH(make_plan(model_of(kQ4_K), hip(), Precision::Fast, false, t),
                      Catch::Contains("no tensor-core decode GEMM"));
}

TEST_CASE("one-row steps fuse RMSNorm only on the matvec path") {
    // --matvec-rows 0 sends one-row steps to the GEMM path, where no norm is fused.
    GpuTuning t;
    t.matvec_rows = 0;
    const ForwardPlan p = make_plan(model_of(kF16), cuda(), Precision::Fast, false, t);
    CHECK_FALSE(p.fuse_norm(1));
    CHECK(make_plan(model_of(kF16), cuda(), Precision::Fast, false, GpuTuning{}).fuse_norm(1));
    CHECK_FALSE(make_plan(model_of(kF16), cuda(), Precision::Fast, false, GpuTuning{}).fuse_norm(2));
}

TEST_CASE("the printed plan names each product's kernels by row count") {
    const PlanModel m = model_of(kQ4_K, true);
    const std::string s = make_plan(m, cuda(), Precision::Fast, false, GpuTuning{}).print(m);
    CHECK_THAT(s, Catch::StartsWith("forward plan: precision fast, KV cache F16, products of 1-2048 rows\n"));
    CHECK_THAT(s, Catch::Contains("layers 0-1: RoPE fused into the QKV matvec\n"));
    CHECK_THAT(s, Catch::Contains("  q (q4_K 4096x4096):  1: matvec_single  2: matvec  3-256: qgemm_frag  "
                                  "257-2048: dequant_gemm\n"));
    CHECK_THAT(s, Catch::Contains("  v (q6_K 1024x4096):  1: matvec_single  2: matvec  3-256: qgemm_frag  "
                                  "257-2048: dequant_gemm\n"));
    CHECK_THAT(s, Catch::Contains("longer chunks: flash\n"));
    CHECK_THAT(s, Catch::EndsWith("logits:\n  output (q6_K 128256x4096):  1: matvec_single  2: matvec  3-256: "
                                  "qgemm_frag  257-2048: dequant_gemm\n"));
    const std::string x = make_plan(m, cuda(), Precision::Exact, true, GpuTuning{}).print(m);
    CHECK_THAT(x, Catch::Contains("  down (q6_K 4096x14336):  1-2048: matvec_fixed\n"));
    CHECK_THAT(x, Catch::Contains("matvec path: every step"));
}
