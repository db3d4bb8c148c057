// The forward plan's choice and its table; see gpu_plan.hpp.
#include "engine/backends/gpu/gpu_plan.hpp"

#include <sstream>
#include <stdexcept>

#include "model/gguf/ggml_types.hpp"

namespace loom::gpu {
namespace {

// Everything the per-product choice reads, resolved once from the options and the build.
struct Choice {
    bool exact = false, split = false;
    int matvec_rows = 0, frag_rows = 0, tile_rows = 0;
    bool f16_in = false, sums = false, decode_gemm = false;
    bool matvec_single = true, tiled = false, dg_f16 = false;
};

bool exact_ok(const Choice& c, const PlanMatrix& m) { return c.decode_gemm && qgemm_exact_supports(m.type, m.cols); }

// The kernel of matrix m in a product of `rows` rows: the matvec path up to matvec_rows (every
// row count when exact), then on the GEMM path, in order: the decode GEMM's exact kernel (split
// products, Q4_K and Q6_K up to tile_rows), the decode GEMM (its fragment kernels up to
// frag_rows, the tile kernel up to tile_rows; F16 matrices only with decode_gemm_f16), cuBLAS
// (or loom's GEMM) on F32 and F16 weights as they are, and the others dequantized to F16.
Kernel choose(const Choice& c, const PlanMatrix& m, int rows) {
    if (c.exact) return Kernel::MatvecFixed;
    if (rows <= c.matvec_rows) {
        MatvecArgs a;
        a.type = m.type;
        a.cols = static_cast<int32_t>(m.cols);
        a.single = c.matvec_single;
        a.nb = 1;
        return rows == 1 && matvec1_takes(a) ? Kernel::MatvecSingle : Kernel::Matvec;
    }
    const bool tc_tile = c.decode_gemm && rows <= c.tile_rows;
    if (c.split && c.sums && tc_tile && m.cols % 256 == 0 && exact_ok(c, m)) return Kernel::QgemmExact;
    const bool frag = !c.split && c.decode_gemm && qgemm_frag_takes(m.type, m.cols, c.f16_in, !c.tiled, !c.tiled);
    const bool tc = frag ? c.decode_gemm && rows <= c.frag_rows : tc_tile;
    if (tc && !c.split && qgemm_supports(m.type, m.cols) && (m.type != kF16 || c.dg_f16))
        return frag ? Kernel::QgemmFrag : Kernel::QgemmTile;
    if (m.type == kF32 || (m.type == kF16 && !c.split)) return Kernel::Gemm;
    if (m.type == kF16) return Kernel::GemmSplit;
    return c.split ? Kernel::DequantGemmSplit : Kernel::DequantGemm;
}

Route route(const Choice& c, const PlanMatrix& m, int max_rows) {
    Route r;
    if (!m.present()) return r;
    for (int rows = 1; rows <= max_rows; ++rows) {
        const Kernel k = choose(c, m, rows);
        if (!r.runs.empty() && r.runs.back().second == k) r.runs.back().first = rows;
        else r.runs.emplace_back(rows, k);
    }
    return r;
}

// Whether a one-row matvec of m can fuse RMSNorm: plain weights, or a type the single-vector
// kernel takes (it stages the activations once a block); the batched kernel's per-block norm
// costs more than it saves on quantized rows (docs/benchmarks.md).
bool takes_norm(const PlanMatrix& m, bool single) {
    if (m.type == kF16 || m.type == kBF16 || m.type == kF32) return true;
    MatvecArgs a;
    a.type = m.type;
    a.cols = static_cast<int32_t>(m.cols);
    a.single = single;
    return matvec1_takes(a);
}

std::string describe(const PlanMatrix& m) {
    return model::type_name(m.type) + " " + std::to_string(m.rows) + "x" + std::to_string(m.cols);
}

// One line per matrix: its runs of row counts and their kernels. A merged matrix (qkv, qk,
// gate_up) runs on the GEMM path only: its matvec runs are left out, and the line with them.
void print_route(std::ostringstream& o, const char* name, const PlanMatrix& m, const Route& r, bool gemm_only) {
    std::ostringstream runs;
    int first = 1;
    for (const auto& [last, k] : r.runs) {
        if (!gemm_only || !is_matvec(k)) {
            runs << "  " << first;
            if (last > first) runs << "-" << last;
            runs << ": " << kernel_name(k);
        }
        first = last + 1;
    }
    if (runs.tellp() > 0) o << "  " << name << " (" << describe(m) << "):" << runs.str() << "\n";
}

bool same_types(const PlanLayer& a, const PlanLayer& b) {
    auto eq = [](const PlanMatrix& x, const PlanMatrix& y) {
        return x.type == y.type && x.rows == y.rows && x.cols == y.cols;
    };
    return eq(a.q, b.q) && eq(a.k, b.k) && eq(a.v, b.v) && eq(a.qkv, b.qkv) && eq(a.qk, b.qk) && eq(a.o, b.o) &&
           eq(a.gate, b.gate) && eq(a.up, b.up) && eq(a.gate_up, b.gate_up) && eq(a.down, b.down);
}

bool same_routes(const LayerPlan& a, const LayerPlan& b) {
    auto eq = [](const Route& x, const Route& y) { return x.runs == y.runs; };
    return eq(a.q, b.q) && eq(a.k, b.k) && eq(a.v, b.v) && eq(a.qkv, b.qkv) && eq(a.qk, b.qk) && eq(a.o, b.o) &&
           eq(a.gate, b.gate) && eq(a.up, b.up) && eq(a.gate_up, b.gate_up) && eq(a.down, b.down) &&
           a.rope_fused == b.rope_fused;
}

}  // namespace

const char* kernel_name(Kernel k) {
    switch (k) {
        case Kernel::MatvecSingle: return "matvec_single";
        case Kernel::Matvec: return "matvec";
        case Kernel::MatvecFixed: return "matvec_fixed";
        case Kernel::QgemmFrag: return "qgemm_frag";
        case Kernel::QgemmTile: return "qgemm_tile";
        case Kernel::QgemmExact: return "qgemm_exact";
        case Kernel::Gemm: return "gemm";
        case Kernel::GemmSplit: return "gemm_split";
        case Kernel::DequantGemm: return "dequant_gemm";
        case Kernel::DequantGemmSplit: return "dequant_gemm_split";
    }
    return "?";
}

bool is_matvec(Kernel k) { return k == Kernel::MatvecSingle || k == Kernel::Matvec || k == Kernel::MatvecFixed; }

bool reads_split_parts(Kernel k) {
    return k == Kernel::QgemmExact || k == Kernel::GemmSplit || k == Kernel::DequantGemmSplit;
}

const char* prefill_attn_name(PrefillAttnKernel k) {
    switch (k) {
        case PrefillAttnKernel::DecodeAll: return "decode_all";
        case PrefillAttnKernel::Flash: return "flash";
        case PrefillAttnKernel::GemmSplit: return "gemm_split";
        case PrefillAttnKernel::Gemm16: return "gemm16";
        case PrefillAttnKernel::Tiled: return "tiled";
    }
    return "?";
}

PlanDevice this_build(bool cublas) {
    PlanDevice d;
    d.cublas = cublas;
    d.decode_gemm = qgemm_available();
#if defined(LOOM_GPU_CUDA)
    d.flash = true;
    d.flash_auto = true;
    d.frag_gemm_rows = 256;
    d.tile_gemm_rows = 64;
#elif defined(LOOM_GPU_EMU)
    d.flash = true;  // on request only: slow on the emulator
    d.split_parts = true;
#endif
    return d;
}

Kernel Route::at(int rows) const {
    for (const auto& [last, k] : runs)
        if (rows <= last) return k;
    throw std::logic_error("forward plan: no kernel for " + std::to_string(rows) + " rows");
}

int default_matvec_rows(uint32_t ffn_type, bool decode_gemm) {
    if (ffn_type == kF16) return 2;
    if (!decode_gemm) return 8;
    return qgemm_supports(ffn_type, 256) ? 2 : 4;  // F32 weights: cuBLAS, not the decode GEMM
}

ForwardPlan make_plan(const PlanModel& model, const PlanDevice& dev, Precision precision, bool kv_f32,
                      const GpuTuning& t) {
    Choice c;
    c.exact = precision == Precision::Exact;
    c.split = precision == Precision::Accurate;
    if (c.split && (t.decode_gemm_tiled || t.decode_gemm_f16))
        throw std::invalid_argument(
            "--precision accurate takes the decode GEMM's exact kernel for Q4_K and Q6_K and splits the others' "
            "operands: not the tile kernel or F16 matrices through the decode GEMM, which round to F16");
    if (t.decode_gemm_rows > 0 && !dev.decode_gemm)
        throw std::invalid_argument("this build has no tensor-core decode GEMM (decode_gemm_rows must be 0)");
    c.decode_gemm = dev.decode_gemm;
    c.tile_rows = t.decode_gemm_rows < 0 ? dev.tile_gemm_rows : t.decode_gemm_rows;
    c.frag_rows = t.decode_gemm_rows < 0 ? dev.frag_gemm_rows : t.decode_gemm_rows;
    c.matvec_rows = t.matvec_rows;
    if (c.matvec_rows < 0) {
        // Under split products only Q4_K and Q6_K take the decode GEMM (its exact kernel); other
        // types keep the F32 matvec up to 8 rows, as without the decode GEMM.
        const PlanMatrix* gate = model.layers.empty() ? nullptr : &model.layers[0].gate;
        const uint32_t ffn_type = gate ? gate->type : kF16;
        const bool dg = c.frag_rows > 0 && (!c.split || (gate && exact_ok(c, *gate)));
        c.matvec_rows = default_matvec_rows(ffn_type, dg);
    }
    c.f16_in = dev.cublas && !c.split;  // split: linear() makes its own parts
    c.matvec_single = t.matvec_single;
    c.tiled = t.decode_gemm_tiled;
    c.dg_f16 = t.decode_gemm_f16;

    ForwardPlan p;
    p.precision = precision;
    p.kv_f32 = kv_f32;
    p.max_rows = model.max_rows;
    p.matvec_rows = c.matvec_rows;
    p.frag_gemm_rows = c.frag_rows;
    p.tile_gemm_rows = c.tile_rows;
    p.f16_in = c.f16_in;
    p.split_parts = c.split && (dev.cublas || dev.split_parts);
    p.split_sums = p.split_parts && c.frag_rows > 0;
    c.sums = p.split_sums;
    // RMSNorm fused into one-row matvecs when every matrix that reads a normalised input (Q, K,
    // V, gate, up, output) takes it, and one-row steps run on the matvec path.
    bool norm = takes_norm(model.output, t.matvec_single);
    for (const PlanLayer& L : model.layers)
        for (const PlanMatrix* m : {&L.q, &L.k, &L.v, &L.gate, &L.up}) norm = norm && takes_norm(*m, t.matvec_single);
    p.fuse_norm1 = norm && !c.exact && c.matvec_rows >= 1;
    const AttnShape& sh = model.attn;
    const bool rope_ok = t.fuse_rope && !c.exact && !sh.neox && sh.rope_dim % 2 == 0 && sh.head_dim % 2 == 0;
    const int R = model.max_rows;
    for (const PlanLayer& L : model.layers) {
        LayerPlan lp;
        lp.q = route(c, L.q, R), lp.k = route(c, L.k, R), lp.v = route(c, L.v, R);
        lp.qkv = route(c, L.qkv, R), lp.qk = route(c, L.qk, R), lp.o = route(c, L.o, R);
        lp.gate = route(c, L.gate, R), lp.up = route(c, L.up, R), lp.gate_up = route(c, L.gate_up, R);
        lp.down = route(c, L.down, R);
        lp.rope_fused = rope_ok && !L.qk_extras;
        p.layers.push_back(std::move(lp));
    }
    p.output = route(c, model.output, R);

    using PA = GpuTuning::PrefillAttn;
    const bool flash_ok = !kv_f32 && !c.exact && dev.flash && attn_flash_supports(sh, true);
    if (t.prefill_attn == PA::Flash && !flash_ok)
        throw std::invalid_argument(
            "--prefill-attn flash needs the F16 KV pool, not --precision exact, head_dim 64 or 128 and a group "
            "of query heads that divides 64 (and a CUDA or emulator build)");
    const bool flash = flash_ok && (t.prefill_attn == PA::Flash || (t.prefill_attn == PA::Auto && dev.flash_auto));
    const bool gemm =
        !flash && !kv_f32 && !c.exact && sh.head_dim % 8 == 0 &&
        (t.prefill_attn == PA::Gemm || t.prefill_attn == PA::Gemm16 || (t.prefill_attn == PA::Auto && c.f16_in));
    if (c.exact) p.prefill_attn = PrefillAttnKernel::DecodeAll;
    else if (flash) p.prefill_attn = PrefillAttnKernel::Flash;
    else if (gemm)
        p.prefill_attn = t.prefill_attn == PA::Gemm16 ? PrefillAttnKernel::Gemm16 : PrefillAttnKernel::GemmSplit;
    else p.prefill_attn = PrefillAttnKernel::Tiled;
    return p;
}

std::string ForwardPlan::print(const PlanModel& model) const {
    std::ostringstream o;
    o << "forward plan: precision " << precision_name(precision) << ", KV cache " << (kv_f32 ? "F32" : "F16")
      << ", products of 1-" << max_rows << " rows\n";
    o << "  matvec path: ";
    if (precision == Precision::Exact) o << "every step";
    else o << "steps of up to " << matvec_rows << " rows";
    o << "; decode GEMM: ";
    if (frag_gemm_rows > 0 || tile_gemm_rows > 0)
        o << "fragment kernels up to " << frag_gemm_rows << " rows, tile and exact kernels up to " << tile_gemm_rows;
    else o << "off";
    o << "; GEMM inputs "
      << (split_parts ? "split into F16 high and low parts"
          : f16_in    ? "F16"
                      : "F32")
      << "; RMSNorm fused into one-row steps: " << (fuse_norm1 ? "yes" : "no") << "\n";
    o << "  attention: split-K decode attention for 1-token rows and chunks of up to 32 tokens; longer chunks: "
      << prefill_attn_name(prefill_attn) << "\n";
    for (size_t l0 = 0; l0 < layers.size();) {
        size_t l1 = l0 + 1;
        while (l1 < layers.size() && same_routes(layers[l0], layers[l1]) &&
               same_types(model.layers[l0], model.layers[l1]))
            ++l1;
        o << "layer";
        if (l1 - l0 > 1) o << "s " << l0 << "-" << l1 - 1;
        else o << " " << l0;
        o << ": RoPE " << (layers[l0].rope_fused ? "fused into the QKV matvec" : "after the QKV product") << "\n";
        const PlanLayer& m = model.layers[l0];
        const LayerPlan& r = layers[l0];
        print_route(o, "q", m.q, r.q, false);
        print_route(o, "k", m.k, r.k, false);
        print_route(o, "v", m.v, r.v, false);
        print_route(o, "qkv", m.qkv, r.qkv, true);
        print_route(o, "qk", m.qk, r.qk, true);
        print_route(o, "o", m.o, r.o, false);
        print_route(o, "gate", m.gate, r.gate, false);
        print_route(o, "up", m.up, r.up, false);
        print_route(o, "gate_up", m.gate_up, r.gate_up, true);
        print_route(o, "down", m.down, r.down, false);
        l0 = l1;
    }
    o << "logits:\n";
    print_route(o, "output", model.output, output, false);
    return o.str();
}

}  // namespace loom::gpu
