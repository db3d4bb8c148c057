// loom-engine-cpu: serves the loom engine protocol on stdin/stdout with the CPU backend.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "engine/backends/cpu/cpu_backend.hpp"
#include "engine/lifeline.hpp"
#include "engine/serve.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
    loom::engine::tie_to_parent();  // die with the gateway; a closed stdout ends us (SIGPIPE)
    po::options_description opts(
        "loom-engine-cpu: loads a GGUF model and speaks the loom engine protocol\n"
        "(docs/protocol.md) on stdin/stdout. Type GEN lines to drive it by hand, e.g.\n"
        "  GEN r1 prompt=1,403,407,261,378 max_tokens=8 temperature=0 logprobs=2\n\n"
        "Options");
    std::string model;
    int threads = 0, ctx = 0, parallel = 4;
    opts.add_options()
        ("help,h", "print this help and exit")
        ("model,m", po::value(&model), "GGUF model file (required)")
        ("threads,t", po::value(&threads)->default_value(0), "worker threads (0: one per CPU this process may use)")
        ("ctx,c", po::value(&ctx)->default_value(0), "context length in tokens (0: the model's training context)")
        ("parallel,p", po::value(&parallel)->default_value(4), "requests decoded together; more wait in line");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, opts), vm);
        po::notify(vm);
    } catch (const std::exception& e) {
        std::cerr << "loom-engine-cpu: " << e.what() << "\n" << opts << "\n";
        return 2;
    }
    if (vm.count("help")) {
        std::cout << opts << "\n";
        return 0;
    }
    if (model.empty() || parallel < 1 || threads < 0 || ctx < 0) {
        std::cerr << "loom-engine-cpu: --model is required (and --parallel >= 1, --threads/--ctx >= 0)\n"
                  << opts << "\n";
        return 2;
    }
    std::unique_ptr<loom::engine::Backend> backend;
    try {
        backend = loom::cpu::make_cpu_backend(model, {threads, ctx});
    } catch (const std::exception& e) {
        // Before HELLO, an ERR line with id "-" tells the gateway why the engine did not start.
        std::string msg = e.what();
        std::fprintf(stdout, "%s\n", loom::protocol::format(loom::protocol::Error{"-", msg}).c_str());
        std::fflush(stdout);
        std::fprintf(stderr, "loom-engine-cpu: cannot load %s: %s\n", model.c_str(), msg.c_str());
        return 1;
    }
    loom::engine::ServeOptions so;
    so.engine_name = "loom-engine-cpu";
    so.max_parallel = parallel;
    return loom::engine::serve(*backend, stdin, stdout, so);
}
