// loom-engine-cuda / loom-engine-hip / loom-engine-gpuemu: serves the loom engine protocol
// (docs/protocol.md) on stdin/stdout with the GPU backend; the GPU options are parsed by
// gpu_options.hpp's parse_gpu_option, as the GPU tools parse them.
#include <cstdio>
#include <cstdlib>
#include <iostream>
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
    "  --print-plan           load the model, print the forward plan (which kernel computes each\n"
    "                         product, attention and the logits at each row count) and exit\n"
    "  --stats                write the scheduler's counters to stderr at exit\n"
    "  -t, --threads N        accepted for compatibility with loom-engine-cpu; ignored\n";

[[noreturn]] void usage_error(const std::string& msg) {
    std::cerr << LOOM_ENGINE_NAME << ": " << msg << "\n" << kUsage << loom::gpu::gpu_options_help();
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    loom::engine::tie_to_parent();  // die with the gateway; a closed stdout ends us (SIGPIPE)
    std::string model;
    bool stats = false, print_plan = false;
    loom::gpu::GpuOptions opts;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        try {
            if (loom::gpu::parse_gpu_option(argc, argv, i, opts)) continue;
        } catch (const std::invalid_argument& e) { usage_error(e.what()); }
        if (a == "-h" || a == "--help") {
            std::cout << kUsage << loom::gpu::gpu_options_help();
            return 0;
        } else if (a == "-m" || a == "--model" || a.rfind("--model=", 0) == 0) {
            if (a.size() > 8 && a[7] == '=') model = a.substr(8);
            else if (i + 1 < argc) model = argv[++i];
            else usage_error(a + " needs a value");
        } else if (a == "--stats") {
            stats = true;
        } else if (a == "--print-plan") {
            print_plan = true;
        } else if (a == "-t" || a == "--threads" || a.rfind("--threads=", 0) == 0) {
            if (a.find('=') == std::string::npos && ++i >= argc) usage_error(a + " needs a value");
        } else {
            usage_error("unknown option " + a);
        }
    }
    if (model.empty()) usage_error("--model is required");
    if (opts.max_slots < 1 || opts.max_step_tokens < 1) usage_error("--parallel and --max-batch-tokens must be >= 1");
    opts.engine_name = LOOM_ENGINE_NAME;
    if (print_plan) opts.kv_tokens = 1;  // the plan does not depend on the pool: one block
    std::unique_ptr<loom::gpu::GpuBackend> backend;
    try {
        backend = std::make_unique<loom::gpu::GpuBackend>(model, opts);
    } catch (const std::exception& e) {
        // Before HELLO, an ERR line with id "-" tells the gateway why the engine did not start.
        const std::string msg = e.what();
        std::fprintf(stdout, "%s\n", loom::protocol::format(loom::protocol::Error{"-", msg}).c_str());
        std::fflush(stdout);
        std::fprintf(stderr, "%s: cannot load %s: %s\n", LOOM_ENGINE_NAME, model.c_str(), msg.c_str());
        return 1;
    }
    if (print_plan) {
        std::cout << backend->forward_plan().print(backend->plan_model());
        return 0;
    }
    loom::engine::ServeOptions so;
    so.engine_name = LOOM_ENGINE_NAME;
    so.max_parallel = opts.max_slots;
    so.stats = stats ? stderr : nullptr;
    return loom::engine::serve(*backend, stdin, stdout, so);
}
