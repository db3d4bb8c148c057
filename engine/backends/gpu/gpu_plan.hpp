// The GPU engine's forward plan: which kernel computes each layer's products, attention and the
// logits at each row count of a step, chosen once at load by make_plan(), a pure function of the
// model's shapes and weight types, the build and device, the precision tier and the tuning
// knobs. GpuBackend dispatches on the plan's entries (gpu_forward.cpp); --print-plan prints it.
// The choice follows the measurements in docs/benchmarks.md (matvec up to a few rows, the
// tensor-core decode GEMM for quantized matrices up to its crossover, cuBLAS beyond), as
// llama.cpp decides its matrix-multiplication path with a predicate of the types and batch size
// (ggml-cuda.cu, ggml_cuda_mul_mat) rather than with flags at each call.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/backends/gpu/gpu_options.hpp"
#include "engine/backends/gpu/kernels.hpp"

namespace loom::gpu {

/// How one matrix product y (+)= x . W^T is computed (kernels.hpp, gemm.hpp).
enum class Kernel : uint8_t {
    MatvecSingle,      ///< k_matvec1.cu: one activation vector of Q4_K, Q6_K or Q8_0 weights
    Matvec,            ///< k_matvec.cu: up to 8 vectors a launch (a group of one: MatvecSingle's rule)
    MatvecFixed,       ///< k_matvec.cu's 8-vector tiling for every row count (Precision::Exact)
    QgemmFrag,         ///< the decode GEMM's fragment kernel (Q4_K, Q6_K; F16 activations)
    QgemmTile,         ///< the decode GEMM's tile kernel (weights decoded into shared memory)
    QgemmExact,        ///< the decode GEMM's exact kernel on the activations' F16 parts (Accurate)
    Gemm,              ///< Gemm::run on the weights as they are (F16 or F32; cuBLAS or loom's GEMM)
    GemmSplit,         ///< Gemm::run_split: F16 weights, the activations' F16 high and low parts
    DequantGemm,       ///< slices dequantized to F16 (dequant_f16), then Gemm::run
    DequantGemmSplit,  ///< slices dequantized to F16 high and low parts, then Gemm::run_split
};

/// The kernel's name as --print-plan prints it, e.g. "qgemm_frag".
const char* kernel_name(Kernel k);

/// Whether k is one of the matvec kernels (the step's matvec path).
bool is_matvec(Kernel k);

/// Whether k reads the activations' F16 high and low parts (GpuBackend makes them once a call).
bool reads_split_parts(Kernel k);

/// How prefill chunks (more than 32 tokens) attend; 1-token rows and short chunks always take
/// split-K decode attention (kernels.hpp attn_decode).
enum class PrefillAttnKernel : uint8_t {
    DecodeAll,  ///< every query through split-K decode attention with the fixed span (Exact)
    Flash,      ///< attn_prefill_flash (tensor cores, F16 pool)
    GemmSplit,  ///< batched F16 products with Q and P split into high and low parts (F16 pool)
    Gemm16,     ///< batched F16 products, Q and P rounded to F16 (F16 pool)
    Tiled,      ///< attn_prefill: the F32 tiled kernel
};

/// Its name as --print-plan prints it, e.g. "flash".
const char* prefill_attn_name(PrefillAttnKernel k);

/// One matrix as the plan sees it: ggml type and shape; absent when rows == 0.
struct PlanMatrix {
    uint32_t type = kF32;
    int64_t rows = 0, cols = 0;
    bool present() const { return rows > 0; }
};

/// One layer's matrices (device_model.hpp DevLayer: qkv, qk and gate_up are the merged matrices
/// where the device model has them) and whether RoPE can be fused into the QKV matvec.
struct PlanLayer {
    PlanMatrix q, k, v, qkv, qk, o, gate, up, gate_up, down;
    /// Q/K/V biases or per-head q/k norms: RoPE runs after them (rope_store), never fused.
    bool qk_extras = false;
};

/// The model as the plan sees it, and the most rows a product is asked for (a step's token rows
/// or the logits' rows, whichever is more).
struct PlanModel {
    std::vector<PlanLayer> layers;
    PlanMatrix output;
    AttnShape attn;
    int max_rows = 1;
};

/// The build and device properties that the choice depends on.
struct PlanDevice {
    bool cublas = false;       ///< Gemm::wants_f16_input(): GEMMs read F16 copies of their inputs
    bool decode_gemm = false;  ///< qgemm_available(): the build has the tensor-core decode GEMM
    bool flash = false;        ///< the build has attn_prefill_flash (CUDA, emulator)
    bool flash_auto = false;   ///< PrefillAttn::Auto takes it where the shape allows (CUDA)
    /// The split products' F16 parts are made even without cuBLAS (the emulator's plain batched
    /// kernel takes them, so that its tests check them as cuBLAS takes them).
    bool split_parts = false;
    /// Default decode GEMM row limits: the fragment kernels (Q4_K, Q6_K) and the others (tile
    /// and exact kernels). CUDA: 256 and 64 (above them dequantize + cuBLAS was faster,
    /// docs/benchmarks.md); 0 (off) in the emulator, where it is checked on request, and HIP.
    int frag_gemm_rows = 0, tile_gemm_rows = 0;
};

/// This build's PlanDevice, with `cublas` as the Gemm engine reports it.
PlanDevice this_build(bool cublas);

/// One matrix's kernels over row counts: runs of (last row count, kernel), ascending, covering
/// 1 .. PlanModel::max_rows.
struct Route {
    std::vector<std::pair<int, Kernel>> runs;
    /// The kernel for a product of `rows` rows (1 <= rows <= max_rows); std::logic_error beyond.
    Kernel at(int rows) const;
};

/// One layer's routes (absent matrices: empty) and its fused epilogues.
struct LayerPlan {
    Route q, k, v, qkv, qk, o, gate, up, gate_up, down;
    bool rope_fused = false;  ///< matvec steps: RoPE and the K/V store in the QKV matvec's epilogue
};

/// The forward plan: every choice the forward pass makes about kernels.
struct ForwardPlan {
    Precision precision = Precision::Fast;
    bool kv_f32 = false;
    int matvec_rows = 0;       ///< steps of at most this many rows run on the matvec path (not Exact)
    int frag_gemm_rows = 0;    ///< the decode GEMM's fragment kernels up to this many rows
    int tile_gemm_rows = 0;    ///< its tile and exact kernels up to this many rows
    bool f16_in = false;       ///< GEMM-path inputs also as F16 copies (cuBLAS reads them)
    bool split_parts = false;  ///< Accurate: the activations' F16 high and low parts are made
    bool split_sums = false;   ///< and their block sums (the exact kernel, QgLow)
    bool fuse_norm1 = false;   ///< one-row steps fuse RMSNorm into their matvecs
    std::vector<LayerPlan> layers;
    Route output;
    PrefillAttnKernel prefill_attn = PrefillAttnKernel::Tiled;
    int max_rows = 1;

    /// Whether a step of `rows` token rows (or a logits call of that many) runs on the matvec
    /// path: every product a matvec, no merged matrices, RoPE fusable.
    bool matvec(int rows) const { return precision == Precision::Exact || rows <= matvec_rows; }
    /// Whether a step of `rows` rows fuses RMSNorm into its matvecs.
    bool fuse_norm(int rows) const { return fuse_norm1 && rows == 1; }
    /// The plan as a table (--print-plan): a header of the step-wide choices, then for each run
    /// of layers with the same types and routes one line per matrix, e.g.
    /// "  q (q4_K 4096x4096):  1: matvec_single  2: matvec  3-256: qgemm_frag  257-2048: dequant_gemm",
    /// and the output projection's. `model` is the one the plan was made for.
    std::string print(const PlanModel& model) const;
};

/// The matvec/GEMM crossover for a model whose FFN matrices have ggml type `ffn_type`: 2 rows
/// for F16 (cuBLAS reads F16 weights as they are, and from 3 rows a GEMM step beats the batched
/// matvec, whose step time grows with its rows: on the H200, 8B F16, 6.2-6.5 ms against 6.7-14.7
/// ms at 3-8 rows; docs/benchmarks.md, "Small batches"); when `decode_gemm` (the decode GEMM
/// runs) 2 for the types it takes (BF16, Q8_0, Q4_K, Q6_K; 8B Q4_K_M on the H200, 2026-12-04:
/// 5.0 ms a step at 2 rows on the matvec, 5.1 at 3-4 rows on the decode GEMM against the
/// matvec's 7.1 and 8.7; docs/benchmarks.md, "Decode steps, prefill attention and graphs") and 4
/// for F32 (cuBLAS in F32); else 8 (their GEMM path first dequantizes each matrix to F16).
int default_matvec_rows(uint32_t ffn_type, bool decode_gemm);

/// Chooses every kernel of the forward pass. Pure: depends on its arguments only (and the kernel
/// predicates of kernels.hpp, pure functions of types and shapes). Throws std::invalid_argument
/// for tuning the build or tier cannot run: decode_gemm_rows > 0 without the decode GEMM,
/// Accurate with decode_gemm_tiled or decode_gemm_f16 (they round operands to F16), and
/// PrefillAttn::Flash where the pool, tier, shape or build does not allow it.
ForwardPlan make_plan(const PlanModel& model, const PlanDevice& dev, Precision precision, bool kv_f32,
                      const GpuTuning& tuning);

}  // namespace loom::gpu
