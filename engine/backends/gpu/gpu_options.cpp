// The GPU options' parser and help, shared by the GPU engines and the GPU tools; see
// gpu_options.hpp.
#include "engine/backends/gpu/gpu_options.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

namespace loom::gpu {
namespace {

constexpr long long kMaxInt = 1 << 30;

long long parse_int(const std::string& name, const std::string& s, long long max) {
    try {
        size_t pos = 0;
        const long long v = std::stoll(s, &pos);
        if (pos == s.size() && v >= 0 && v <= max) return v;
    } catch (const std::exception&) {}
    throw std::invalid_argument("bad value '" + s + "' for " + name + " (an integer from 0 to " + std::to_string(max) +
                                ")");
}

double parse_fraction(const std::string& name, const std::string& s) {
    try {
        size_t pos = 0;
        const double v = std::stod(s, &pos);
        if (pos == s.size() && v > 0.0 && v <= 1.0) return v;
    } catch (const std::exception&) {}
    throw std::invalid_argument("bad value '" + s + "' for " + name + " (0 < F <= 1)");
}

}  // namespace

const char* precision_name(Precision p) {
    switch (p) {
        case Precision::Fast: return "fast";
        case Precision::Accurate: return "accurate";
        case Precision::Exact: return "exact";
    }
    return "?";
}

bool parse_gpu_option(int argc, const char* const* argv, int& i, GpuOptions& opts) {
    std::string name = argv[i], v;
    const auto eq = name.find('=');
    const bool has_eq = name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_eq) v = name.substr(eq + 1), name = name.substr(0, eq);
    GpuTuning& t = opts.tuning;
    // The options that take no value: each sets one flag to a fixed value.
    const struct {
        const char* name;
        bool* flag;
        bool value;
    } switches[] = {
        {"--no-graphs", &t.graphs, false},
        {"--no-fuse-rope", &t.fuse_rope, false},
        {"--own-gemm", &t.own_gemm, true},
        {"--decode-gemm-f16", &t.decode_gemm_f16, true},
        {"--decode-gemm-tiled", &t.decode_gemm_tiled, true},
        {"--no-matvec-single", &t.matvec_single, false},
    };
    const auto sw =
        std::find_if(std::begin(switches), std::end(switches), [&](const auto& s) { return name == s.name; });
    if (sw != std::end(switches)) {
        *sw->flag = sw->value;
        return true;
    }
    if (name == "--kv-f32" || name == "--kv-f16") {
        opts.kv_f32 = name == "--kv-f32";
        return true;
    }
    if (name == "--batch-invariant")
        throw std::invalid_argument(
            "--batch-invariant was replaced by --precision exact (which also keeps the KV "
            "cache in F32; add --kv-f16 for the former F16 pool)");
    if (name == "--split-products")
        throw std::invalid_argument(
            "--split-products was replaced by --precision accurate (which also keeps the KV "
            "cache in F32; add --kv-f16 for the former F16 pool)");
    auto value = [&]() -> std::string {
        if (has_eq) return v;
        if (i + 1 >= argc) throw std::invalid_argument(name + " needs a value");
        return argv[++i];
    };
    auto number = [&](long long max) { return parse_int(name, value(), max); };
    if (name == "-c" || name == "--ctx") {
        opts.n_ctx = static_cast<int32_t>(number(kMaxInt));
    } else if (name == "-p" || name == "--parallel") {
        opts.max_slots = static_cast<int>(number(1 << 16));
    } else if (name == "--max-batch-tokens" || name == "--prefill-chunk") {
        opts.max_step_tokens = static_cast<int>(number(kMaxInt));
    } else if (name == "--kv-tokens") {
        opts.kv_tokens = number(int64_t{1} << 40);
    } else if (name == "--kv-fraction") {
        opts.kv_fraction = parse_fraction(name, value());
    } else if (name == "--precision") {
        const std::string p = value();
        if (p == "fast") opts.precision = Precision::Fast;
        else if (p == "accurate") opts.precision = Precision::Accurate;
        else if (p == "exact") opts.precision = Precision::Exact;
        else throw std::invalid_argument("bad value '" + p + "' for --precision (fast, accurate or exact)");
    } else if (name == "--prefill-attn") {
        const std::string m = value();
        using PA = GpuTuning::PrefillAttn;
        if (m == "auto") t.prefill_attn = PA::Auto;
        else if (m == "tiled") t.prefill_attn = PA::Tiled;
        else if (m == "gemm") t.prefill_attn = PA::Gemm;
        else if (m == "gemm16") t.prefill_attn = PA::Gemm16;
        else if (m == "flash") t.prefill_attn = PA::Flash;
        else
            throw std::invalid_argument("bad value '" + m +
                                        "' for --prefill-attn (auto, flash, tiled, gemm or gemm16)");
    } else if (name == "--matvec-rows") {
        t.matvec_rows = static_cast<int>(number(kMaxInt));
    } else if (name == "--decode-gemm-rows") {
        t.decode_gemm_rows = static_cast<int>(number(kMaxInt));
    } else {
        return false;
    }
    return true;
}

const char* gpu_options_help() {
    return "  -c, --ctx N            context length in tokens (0: the model's training context)\n"
           "  -p, --parallel N       sequences running at once (default 64); more wait in line\n"
           "  --max-batch-tokens N   tokens one step evaluates, decodes and prefill chunks together; longer\n"
           "                         prompts are prefilled in chunks (default 2048)\n"
           "  --prefill-chunk N      the same as --max-batch-tokens (its former name)\n"
           "  --kv-tokens N          KV cache pool size in positions (default: --kv-fraction of the free memory)\n"
           "  --kv-fraction F        share of the device memory free after weights and buffers that the KV pool\n"
           "                         takes when --kv-tokens is not given (default 0.9)\n"
           "  --precision TIER       fast (default): GEMM-path products on F16 tensor-core operands, F16 KV\n"
           "                         cache (logprobs about 1e-2 from loom-engine-cpu); accurate: those\n"
           "                         products on F16 high and low parts of activations and weights (F32's\n"
           "                         accuracy on the tensor cores) and an F32 KV cache, within 2e-3 of\n"
           "                         loom-engine-cpu; exact: a request's tokens and logprobs bitwise\n"
           "                         identical whatever shares its batch, however its prompt is chunked and\n"
           "                         whether its prefix was cached (every product on the F32 matvec, one\n"
           "                         reduction order for every batch size: slower), F32 KV cache, within\n"
           "                         about 2e-5 of loom-engine-cpu (costs: docs/benchmarks.md)\n"
           "  --kv-f32               keep the KV cache in F32 whatever the tier (default: F16 for fast)\n"
           "  --kv-f16               keep the KV cache in F16 whatever the tier (half the memory; default for\n"
           "                         fast)\n"
           "Tuning (for benchmarks and tests; the defaults are what the tier serves with):\n"
           "  --no-graphs            launch decode kernels one by one instead of replaying a graph\n"
           "  --no-fuse-rope         RoPE and the K/V store as their own kernel, not in the QKV matvec\n"
           "  --own-gemm             loom's GEMM kernel instead of cuBLAS for prefill (CUDA)\n"
           "  --prefill-attn MODE    prefill attention: flash (FlashAttention on the tensor cores, scores\n"
           "                         kept on chip, Q and the softmax split into F16 high and low parts;\n"
           "                         head_dim 64 or 128), gemm (products on cuBLAS's tensor cores, split the\n"
           "                         same way; loom's plain kernel without cuBLAS), gemm16 (one F16 product\n"
           "                         each: faster, Q and softmax rounded to F16), tiled (the F32 tiled\n"
           "                         kernel), or auto (default: flash in CUDA builds where the shape allows,\n"
           "                         else gemm where cuBLAS runs, else tiled); the F32 KV pool and\n"
           "                         --precision exact always use their own paths\n"
           "  --matvec-rows N        steps of at most N token rows use the matvec kernel, larger ones GEMMs\n"
           "                         (default 2 for F16 weights, where cuBLAS is faster from 3 rows; for\n"
           "                         BF16 and quantized ones 2 where the decode GEMM runs, F32 ones 4;\n"
           "                         8 without the decode GEMM)\n"
           "  --decode-gemm-rows N   steps of more rows than --matvec-rows and at most N run BF16 and\n"
           "                         quantized matrices through the tensor-core decode GEMM, which\n"
           "                         dequantizes in registers; larger steps dequantize to F16 for cuBLAS\n"
           "                         (default in CUDA builds: 256 for Q4_K and Q6_K on its fragment\n"
           "                         kernels, 64 for the others, --decode-gemm-tiled and --precision\n"
           "                         accurate; N given applies to all; 0, off, in the emulator; HIP: 0\n"
           "                         only; under --precision accurate only Q4_K and Q6_K, through its\n"
           "                         exact kernel)\n"
           "  --decode-gemm-f16      F16 matrices through the decode GEMM too (default: cuBLAS)\n"
           "  --decode-gemm-tiled    Q4_K and Q6_K matrices through the decode GEMM's shared-memory tile\n"
           "                         kernel, as the other types, instead of its fragment kernel (quants\n"
           "                         decoded straight into the tensor-core operands; for comparisons)\n"
           "  --no-matvec-single     one-row steps of Q4_K, Q6_K and Q8_0 matrices through the batched\n"
           "                         matvec kernel after a separate RMSNorm instead of the single-vector\n"
           "                         kernel, which fuses it (for comparisons)\n";
}

}  // namespace loom::gpu
