// loom-engine-cpu: serves the loom engine protocol on stdin/stdout with the CPU backend.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "engine/backends/cpu/cpu_backend.hpp"
#include "engine/lifeline.hpp"
#include "engine/serve.hpp"

namespace po = boost::program_options;

int main(int argc, char** argv) {
    loom::engine::tie_to_parent();  // die with the gateway; a closed stdout ends us (SIGPIPE)
    po::options_description opts(
        "loom-engine-cpu: loads a GGUF model and speaks the loom engine protocol\n"
        "(docs/protocol.md) on stdin/stdout. Type GEN lines to drive it by hand, e.g.\n"
        "  GEN r1 prompt=1,403,407,261,378 max_tokens=8 temperature=0 logprobs=2\n"
        "Requests are batched continuously over a paged KV cache: each step evaluates one\n"
        "token of every running request and prefill chunks of new ones, up to\n"
        "--max-batch-tokens; full 16-token blocks are shared between requests with the\n"
        "same prefix; when the cache is full the latest request is preempted and later\n"
        "recomputed. Precision is exact (the GPU engines' --precision exact): each\n"
        "request's tokens and logprobs are bitwise the same whatever the batching,\n"
        "chunking and prefix caching, every product in F32 over exactly decoded weights.\n\n"
        "Options");
    std::string model;
    int threads = 0, ctx = 0, parallel = 0, batch_tokens = 128;
    int64_t kv_tokens = 0;
    bool stats = false;
    std::string precision;
    // clang-format off  (one option a line reads better than the chained calls clang-format makes)
    opts.add_options()("help,h", "print this help and exit")("model,m", po::value(&model),
                                                             "GGUF model file (required); weight types f32, f16, "
                                                             "bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, "
                                                             "q5_K, q6_K, iq4_nl, iq4_xs, iq1_s, iq1_m, iq2_xxs, "
                                                             "iq2_xs, iq2_s, iq3_xxs, iq3_s")(
        "threads,t", po::value(&threads)->default_value(0), "worker threads (0: one per CPU this process may use)")(
        "ctx,c", po::value(&ctx)->default_value(0),
        "context length in tokens (0: the model's training context; never more than --kv-tokens)")(
        "kv-tokens", po::value(&kv_tokens)->default_value(0),
        "KV cache size in tokens, over all requests (0: 16 x the context, at most a quarter of the "
        "machine's memory; memory is used only as the cache fills)")(
        "max-batch-tokens", po::value(&batch_tokens)->default_value(128),
        "tokens evaluated per step, decodes and prefill chunks together; longer prompts are "
        "prefilled in chunks")("parallel,p", po::value(&parallel)->default_value(0),
                               "requests running at once, more wait in line (0: as many as the KV cache has blocks, "
                               "at most 1024; never more than --max-batch-tokens, so each decodes every step)")(
        "precision", po::value(&precision)->default_value("exact"),
        "exact, the only tier this engine has: each request's tokens and logprobs bitwise independent "
        "of batching, chunking and prefix caching (accepted so that any engine can be given "
        "--precision exact; fast and accurate are the GPU engines')")(
        "stats", po::bool_switch(&stats), "write the scheduler's counters to stderr at exit");
    // clang-format on
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--batch-invariant") {
            std::cerr << "loom-engine-cpu: --batch-invariant was replaced by --precision exact, which this engine "
                         "always is\n";
            return 2;
        }
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
    if (precision != "exact") {
        std::cerr << "loom-engine-cpu: --precision " << precision
                  << " is not available: the CPU engine computes every product in F32 and is always exact "
                     "(--precision exact); fast and accurate are tiers of the GPU engines\n";
        return 2;
    }
    if (model.empty() || parallel < 0 || threads < 0 || ctx < 0 || kv_tokens < 0 || batch_tokens < 1) {
        std::cerr << "loom-engine-cpu: --model is required (and --max-batch-tokens >= 1; --parallel, --threads, "
                     "--ctx, --kv-tokens >= 0)\n"
                  << opts << "\n";
        return 2;
    }
    std::unique_ptr<loom::engine::Backend> backend;
    try {
        loom::cpu::CpuOptions co;
        co.threads = threads;
        co.n_ctx = ctx;
        co.kv_tokens = kv_tokens;
        co.max_step_tokens = batch_tokens;
        co.max_slots = parallel;
        backend = loom::cpu::make_cpu_backend(model, co);
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
    so.max_batch_tokens = batch_tokens;
    so.stats = stats ? stderr : nullptr;
    return loom::engine::serve(*backend, stdin, stdout, so);
}
