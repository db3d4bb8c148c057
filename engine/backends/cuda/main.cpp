// loom-engine-cuda / loom-engine-hip: serves the loom engine protocol (docs/protocol.md) on
// stdin/stdout with the GPU backend.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "engine/backends/cuda/gpu_backend.hpp"
#include "engine/lifeline.hpp"
#include "engine/serve.hpp"

#ifndef LOOM_ENGINE_NAME
#define LOOM_ENGINE_NAME "loom-engine-cuda"
#endif

namespace {

const char* kUsage =
    LOOM_ENGINE_NAME
    ": loads a GGUF model onto the GPU and speaks the loom engine protocol\n"
    "(docs/protocol.md) on stdin/stdout, e.g.\n"
    "  GEN r1 prompt=1,403,407,261,378 max_tokens=8 temperature=0 logprobs=2\n\n"
    "Options:\n"
    "  -h, --help           print this help and exit\n"
    "  -m, --model FILE     GGUF model file (required); weight types f32, f16, bf16, q8_0, q4_K, q6_K\n"
    "  -c, --ctx N          context length in tokens (0: the model's training context)\n"
    "  -p, --parallel N     requests decoded together (default 8); more wait in line\n"
    "  --prefill-chunk N    prompt tokens per forward pass (default 2048)\n"
    "  --no-graphs          launch decode kernels one by one instead of replaying a graph\n"
    "  --kv-f16             keep the KV cache in F16 (half the memory; default F32)\n"
    "  -t, --threads N      accepted for compatibility with loom-engine-cpu; ignored\n";

bool parse_int(const std::string& s, int& out) {
    try {
        size_t pos = 0;
        const long v = std::stol(s, &pos);
        if (pos != s.size() || v < 0 || v > 1 << 30) return false;
        out = static_cast<int>(v);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace

int main(int argc, char** argv) {
    loom::engine::tie_to_parent();  // die with the gateway; a closed stdout ends us (SIGPIPE)
    std::string model;
    int ctx = 0, parallel = 8, chunk = 2048, threads = 0;
    loom::gpu::GpuOptions opts;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i], v;
        const auto eq = a.find('=');
        const bool has_eq = a.rfind("--", 0) == 0 && eq != std::string::npos;
        if (has_eq) v = a.substr(eq + 1), a = a.substr(0, eq);
        auto value = [&]() -> std::string {
            if (has_eq) return v;
            if (i + 1 >= argc) {
                std::cerr << LOOM_ENGINE_NAME << ": " << a << " needs a value\n" << kUsage;
                std::exit(2);
            }
            return argv[++i];
        };
        auto number = [&](int& out) {
            const std::string s = value();
            if (!parse_int(s, out)) {
                std::cerr << LOOM_ENGINE_NAME << ": bad value '" << s << "' for " << a << "\n" << kUsage;
                std::exit(2);
            }
        };
        if (a == "-h" || a == "--help") {
            std::cout << kUsage;
            return 0;
        } else if (a == "-m" || a == "--model") {
            model = value();
        } else if (a == "-c" || a == "--ctx") {
            number(ctx);
        } else if (a == "-p" || a == "--parallel") {
            number(parallel);
        } else if (a == "--prefill-chunk") {
            number(chunk);
        } else if (a == "-t" || a == "--threads") {
            number(threads);
        } else if (a == "--no-graphs") {
            opts.graphs = false;
        } else if (a == "--kv-f16") {
            opts.kv_f16 = true;
        } else {
            std::cerr << LOOM_ENGINE_NAME << ": unknown option " << a << "\n" << kUsage;
            return 2;
        }
    }
    if (model.empty() || parallel < 1 || chunk < 1) {
        std::cerr << LOOM_ENGINE_NAME << ": --model is required (and --parallel, --prefill-chunk >= 1)\n" << kUsage;
        return 2;
    }
    opts.n_ctx = ctx;
    opts.engine_name = LOOM_ENGINE_NAME;
    opts.prefill_chunk = chunk;
    opts.max_batch = std::max(parallel, 1);
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
    so.max_parallel = parallel;
    return loom::engine::serve(*backend, stdin, stdout, so);
}
