// loom-engine-cuda / loom-engine-hip / loom-engine-gpuemu: serves the loom engine protocol
// (docs/protocol.md) on stdin/stdout with the GPU backend; parses the GPU options (GpuOptions).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>

#include "engine/backends/gpu/gpu_backend.hpp"
#include "engine/lifeline.hpp"
#include "engine/serve.hpp"

#ifndef LOOM_ENGINE_NAME
#define LOOM_ENGINE_NAME "loom-engine-cuda"
#endif

namespace {

const char* kUsage = LOOM_ENGINE_NAME
    ": loads a GGUF model onto the GPU and speaks the loom engine protocol\n"
    "(docs/protocol.md) on stdin/stdout, e.g.\n"
    "  GEN r1 prompt=1,403,407,261,378 max_tokens=8 temperature=0 logprobs=2\n\n"
    "Options:\n"
    "  -h, --help             print this help and exit\n"
    "  -m, --model FILE       GGUF model file (required); weight types f32, f16, bf16, q8_0, q4_K, q6_K\n"
    "  -c, --ctx N            context length in tokens (0: the model's training context)\n"
    "  -p, --parallel N       sequences running at once (default 64); more wait in line\n"
    "  --max-batch-tokens N   tokens one step evaluates, decodes and prefill chunks together; longer\n"
    "                         prompts are prefilled in chunks (default 2048)\n"
    "  --prefill-chunk N      the same as --max-batch-tokens (its former name)\n"
    "  --kv-tokens N          KV cache pool size in positions (default: --kv-fraction of the free memory)\n"
    "  --kv-fraction F        share of the device memory free after weights and buffers that the KV pool\n"
    "                         takes when --kv-tokens is not given (default 0.9)\n"
    "  --kv-f32               keep the KV cache in F32 (default F16, half the memory)\n"
    "  --kv-f16               accepted for compatibility: F16 is the default\n"
    "  --batch-invariant      a request's tokens and logprobs bitwise identical whatever shares its\n"
    "                         batch, however its prompt is chunked and whether its prefix was cached\n"
    "                         (slower: one kernel and reduction order for every batch size); every\n"
    "                         product in F32 on exactly decoded weights, so with --kv-f32 logprobs\n"
    "                         within about 2e-5 of loom-engine-cpu (the default paths round tensor-\n"
    "                         core operands to F16: about 1e-2)\n"
    "  --split-products       every GEMM-path product (prefill, steps of more than --matvec-rows rows,\n"
    "                         the logits) on F16 high and low parts of its activations and weights:\n"
    "                         Q4_K and Q6_K in steps of up to --decode-gemm-rows rows through the\n"
    "                         decode GEMM's exact kernel (exact integer quants, two or three products\n"
    "                         where one runs), the rest two (F16 weights) or three tensor-core\n"
    "                         products on split copies (and --matvec-rows 8 for other types); with\n"
    "                         --kv-f32 logprobs within 2e-3 of loom-engine-cpu (costs: docs/\n"
    "                         benchmarks.md; not with --decode-gemm-tiled or --decode-gemm-f16)\n"
    "  --stats                write the scheduler's counters to stderr at exit\n"
    "  -t, --threads N        accepted for compatibility with loom-engine-cpu; ignored\n"
    "Tuning (for benchmarks):\n"
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
    "                         --batch-invariant always use their own paths\n"
    "  --matvec-rows N        steps of at most N token rows use the matvec kernel, larger ones GEMMs\n"
    "                         (default 2 for F16 weights, where cuBLAS is faster from 3 rows; for\n"
    "                         BF16 and quantized ones 2 where the decode GEMM runs, F32 ones 4;\n"
    "                         8 without the decode GEMM)\n"
    "  --decode-gemm-rows N   steps of more rows than --matvec-rows and at most N run BF16 and\n"
    "                         quantized matrices through the tensor-core decode GEMM, which\n"
    "                         dequantizes in registers; larger steps dequantize to F16 for cuBLAS\n"
    "                         (default in CUDA builds: 256 for Q4_K and Q6_K on its fragment\n"
    "                         kernels, 64 for the others, --decode-gemm-tiled and --split-products;\n"
    "                         N given applies to all; 0, off, in the emulator; HIP: 0 only; with\n"
    "                         --split-products only Q4_K and Q6_K, through its exact kernel)\n"
    "  --decode-gemm-f16      F16 matrices through the decode GEMM too (default: cuBLAS)\n"
    "  --decode-gemm-tiled    Q4_K and Q6_K matrices through the decode GEMM's shared-memory tile\n"
    "                         kernel, as the other types, instead of its fragment kernel (quants\n"
    "                         decoded straight into the tensor-core operands; for comparisons)\n"
    "  --no-matvec-single     one-row steps of Q4_K, Q6_K and Q8_0 matrices through the batched\n"
    "                         matvec kernel after a separate RMSNorm instead of the single-vector\n"
    "                         kernel, which fuses it (for comparisons)\n";

bool parse_int(const std::string& s, long long max, long long& out) {
    try {
        size_t pos = 0;
        const long long v = std::stoll(s, &pos);
        if (pos != s.size() || v < 0 || v > max) return false;
        out = v;
        return true;
    } catch (const std::exception&) { return false; }
}

bool parse_fraction(const std::string& s, double& out) {
    try {
        size_t pos = 0;
        const double v = std::stod(s, &pos);
        if (pos != s.size() || !(v > 0.0 && v <= 1.0)) return false;
        out = v;
        return true;
    } catch (const std::exception&) { return false; }
}

[[noreturn]] void usage_error(const std::string& msg) {
    std::cerr << LOOM_ENGINE_NAME << ": " << msg << "\n" << kUsage;
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    loom::engine::tie_to_parent();  // die with the gateway; a closed stdout ends us (SIGPIPE)
    std::string model;
    bool stats = false;
    loom::gpu::GpuOptions opts;
    // The options that take no value: each sets one flag to a fixed value.
    const struct {
        const char* name;
        bool* flag;
        bool value;
    } switches[] = {
        {"--kv-f32", &opts.kv_f32, true},
        {"--kv-f16", &opts.kv_f32, false},
        {"--batch-invariant", &opts.batch_invariant, true},
        {"--split-products", &opts.split_products, true},
        {"--stats", &stats, true},
        {"--no-graphs", &opts.graphs, false},
        {"--no-fuse-rope", &opts.fuse_rope, false},
        {"--own-gemm", &opts.own_gemm, true},
        {"--decode-gemm-f16", &opts.decode_gemm_f16, true},
        {"--decode-gemm-tiled", &opts.decode_gemm_tiled, true},
        {"--no-matvec-single", &opts.matvec_single, false},
    };
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i], v;
        const auto eq = a.find('=');
        const bool has_eq = a.rfind("--", 0) == 0 && eq != std::string::npos;
        if (has_eq) v = a.substr(eq + 1), a = a.substr(0, eq);
        const auto sw =
            std::find_if(std::begin(switches), std::end(switches), [&](const auto& s) { return a == s.name; });
        if (sw != std::end(switches)) {
            *sw->flag = sw->value;
            continue;
        }
        auto value = [&]() -> std::string {
            if (has_eq) return v;
            if (i + 1 >= argc) usage_error(a + " needs a value");
            return argv[++i];
        };
        auto number = [&](long long max) {
            const std::string s = value();
            long long n = 0;
            if (!parse_int(s, max, n)) usage_error("bad value '" + s + "' for " + a);
            return n;
        };
        constexpr long long kMaxInt = 1 << 30;
        if (a == "-h" || a == "--help") {
            std::cout << kUsage;
            return 0;
        } else if (a == "-m" || a == "--model") {
            model = value();
        } else if (a == "-c" || a == "--ctx") {
            opts.n_ctx = static_cast<int32_t>(number(kMaxInt));
        } else if (a == "-p" || a == "--parallel") {
            opts.max_slots = static_cast<int>(number(1 << 16));
        } else if (a == "--max-batch-tokens" || a == "--prefill-chunk") {
            opts.max_step_tokens = static_cast<int>(number(kMaxInt));
        } else if (a == "--kv-tokens") {
            opts.kv_tokens = number(int64_t{1} << 40);
        } else if (a == "--kv-fraction") {
            const std::string s = value();
            if (!parse_fraction(s, opts.kv_fraction))
                usage_error("bad value '" + s + "' for --kv-fraction (0 < F <= 1)");
        } else if (a == "-t" || a == "--threads") {
            (void)number(kMaxInt);
        } else if (a == "--prefill-attn") {
            const std::string m = value();
            using PA = loom::gpu::GpuOptions::PrefillAttn;
            if (m == "auto") opts.prefill_attn = PA::Auto;
            else if (m == "tiled") opts.prefill_attn = PA::Tiled;
            else if (m == "gemm") opts.prefill_attn = PA::Gemm;
            else if (m == "gemm16") opts.prefill_attn = PA::Gemm16;
            else if (m == "flash") opts.prefill_attn = PA::Flash;
            else usage_error("bad value '" + m + "' for --prefill-attn (auto, flash, tiled, gemm or gemm16)");
        } else if (a == "--matvec-rows") {
            opts.matvec_rows = static_cast<int>(number(kMaxInt));
        } else if (a == "--decode-gemm-rows") {
            opts.decode_gemm_rows = static_cast<int>(number(kMaxInt));
        } else {
            usage_error("unknown option " + a);
        }
    }
    if (model.empty()) usage_error("--model is required");
    if (opts.max_slots < 1 || opts.max_step_tokens < 1) usage_error("--parallel and --max-batch-tokens must be >= 1");
    opts.engine_name = LOOM_ENGINE_NAME;
    std::unique_ptr<loom::engine::Backend> backend;
    try {
        backend = loom::gpu::make_gpu_backend(model, opts);
    } catch (const std::exception& e) {
        // Before HELLO, an ERR line with id "-" tells the gateway why the engine did not start.
        const std::string msg = e.what();
        std::fprintf(stdout, "%s\n", loom::protocol::format(loom::protocol::Error{"-", msg}).c_str());
        std::fflush(stdout);
        std::fprintf(stderr, "%s: cannot load %s: %s\n", LOOM_ENGINE_NAME, model.c_str(), msg.c_str());
        return 1;
    }
    loom::engine::ServeOptions so;
    so.engine_name = LOOM_ENGINE_NAME;
    so.max_parallel = opts.max_slots;
    so.stats = stats ? stderr : nullptr;
    return loom::engine::serve(*backend, stdin, stdout, so);
}
