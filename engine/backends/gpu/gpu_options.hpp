// The GPU engine's options: the serving options, the precision tier and the tuning knobs
// (benchmarks and tests), and the one command-line parser that loom-engine-cuda/-hip/-gpuemu,
// loom-gpu-bench and loom-gpu-step-emu share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace loom::gpu {

/// What a request's logprobs promise (--precision; docs/architecture.md, "Precision tiers").
enum class Precision {
    /// The default: F16 operands on the tensor cores for GEMM-path products, F16 KV pool (about
    /// 1e-2 from loom-engine-cpu on the shared models).
    Fast,
    /// Every GEMM-path product on F16 high and low parts of its operands (F32's accuracy on the
    /// tensor cores) and the F32 KV pool: within 2e-3 of loom-engine-cpu.
    Accurate,
    /// Every row through the same kernels in the same order whatever the batch (the 8-vector F32
    /// matvec for every product, split-K attention with a fixed span for every query, no fused
    /// RMSNorm or RoPE) and the F32 KV pool: bitwise independent of batching, chunking and
    /// prefix caching, within 2e-5 of loom-engine-cpu.
    Exact,
};

/// "fast", "accurate" or "exact".
const char* precision_name(Precision p);

/// Paths that benchmarks and tests choose; the engine's defaults are what serving should use.
/// Each field has a flag in gpu_options_help().
struct GpuTuning {
    bool graphs = true;     ///< replay pure-decode steps as graphs (CUDA/HIP), any row count
    bool fuse_rope = true;  ///< RoPE and the K/V store in the QKV matvec's epilogue
    bool own_gemm = false;  ///< loom's GEMM kernel instead of cuBLAS (CUDA)
    /// Prefill attention: Auto is Flash in CUDA builds where attn_flash_supports() the shape,
    /// else Gemm where cuBLAS runs the GEMMs, else Tiled; Flash (F16 KV pool, not Exact) is the
    /// tensor-core FlashAttention kernel (kernels.hpp attn_prefill_flash; the emulator runs it on
    /// request); Gemm and Gemm16 (F16 KV pool, not Exact) run products on cuBLAS or, without it,
    /// loom's plain kernel: Gemm16 one F16 product each for QK^T and PV (Q and P rounded to
    /// F16), Gemm two (Q and P split into F16 high and low parts, about F32's accuracy, twice
    /// the products).
    enum class PrefillAttn { Auto, Tiled, Gemm, Gemm16, Flash } prefill_attn = PrefillAttn::Auto;
    /// Steps of at most this many rows use the matvec kernel, larger ones GEMMs; -1 (the
    /// default): default_matvec_rows() of the model's weights (gpu_plan.hpp).
    int matvec_rows = -1;
    /// Steps of more than matvec_rows and at most this many rows run their BF16 and quantized
    /// matrices through the tensor-core decode GEMM (kernels.hpp qgemm: dequantized in
    /// registers, no F16 copy of the weights); larger steps dequantize to F16 for the prefill
    /// GEMM. -1 (the default): the build's (PlanDevice::frag_gemm_rows and tile_gemm_rows). A
    /// value given applies to every kernel. Under Precision::Accurate only Q4_K and Q6_K
    /// matrices take it (its exact kernel), and the default matvec_rows is 8 for other types.
    int decode_gemm_rows = -1;
    /// F16 matrices through the decode GEMM too (default: cuBLAS reads them as they are).
    bool decode_gemm_f16 = false;
    /// Q4_K and Q6_K matrices through the decode GEMM's tile kernel (weights decoded in F32
    /// into shared memory) instead of its fragment kernel (k_qgemm_frag.cu, the default): for
    /// comparisons.
    bool decode_gemm_tiled = false;
    /// One-row steps of Q4_K, Q6_K and Q8_0 matrices through the single-vector kernel
    /// (k_matvec1.cu, MatvecArgs::single), which fuses RMSNorm, instead of the batched matvec
    /// kernel after a separate RMSNorm (false: --no-matvec-single, for comparisons).
    bool matvec_single = true;
};

/// The GPU engine's options (each has a flag in gpu_options_help()).
struct GpuOptions {
    int32_t n_ctx = 0;  ///< 0: the model's training context
    std::string engine_name = "loom-engine-cuda";
    int max_slots = 64;          ///< sequences running at once (--parallel)
    int max_step_tokens = 2048;  ///< tokens one step evaluates at most, over all its rows
    int64_t kv_tokens = 0;       ///< KV pool size in positions; 0: kv_fraction of the free memory
    double kv_fraction = 0.9;    ///< share of the device memory free after weights and buffers
    Precision precision = Precision::Fast;
    /// The KV pool's type when given (--kv-f32, --kv-f16); else the tier's: F16 for Fast, F32
    /// for Accurate and Exact.
    std::optional<bool> kv_f32;
    GpuTuning tuning;

    /// Whether the KV pool holds F32 (else F16, half the memory).
    bool kv_pool_f32() const { return kv_f32 ? *kv_f32 : precision != Precision::Fast; }
};

/// Parses the GPU option at argv[i] (`--name value` or `--name=value`) into `opts`, moving i to
/// its value's index when it takes one. Returns false when argv[i] is not a GPU option (the
/// caller's own, or unknown). Throws std::invalid_argument with a message naming the option for
/// a missing or bad value, and for a switch that --precision replaced (--batch-invariant,
/// --split-products).
bool parse_gpu_option(int argc, const char* const* argv, int& i, GpuOptions& opts);

/// The --help lines of every option parse_gpu_option() takes (two-space indent, one option a
/// line as the engines print them), the tuning knobs under their own heading.
const char* gpu_options_help();

}  // namespace loom::gpu
