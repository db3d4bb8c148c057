// loom-gpu-bench: times the GPU backend directly (no protocol): the device-to-device copy
// bandwidth (the roofline), batch-1 decode with and without top-20 logprobs, the per-operation
// device time of one decode step (CUDA events), prefill of 512 and 2048 tokens, and batched
// decode. Prints a table and one JSON line ("BENCH {...}") for tools/bench_gpu.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/gpu/gpu_backend.hpp"

using namespace loom;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Bytes read plus bytes written per second of a large device-to-device copy.
double copy_bandwidth() {
    const size_t n = size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&a, n));
    LOOM_GPU_CHECK(gpuMalloc(&b, n));
    LOOM_GPU_CHECK(gpuMemsetAsync(a, 1, n, nullptr));
    gpuEvent_t e0, e1;
    LOOM_GPU_CHECK(gpuEventCreate(&e0));
    LOOM_GPU_CHECK(gpuEventCreate(&e1));
    for (int i = 0; i < 3; ++i) LOOM_GPU_CHECK(gpuMemcpyAsync(b, a, n, gpuMemcpyDeviceToDevice, nullptr));
    const int reps = 20;
    LOOM_GPU_CHECK(gpuEventRecord(e0, nullptr));
    for (int i = 0; i < reps; ++i) LOOM_GPU_CHECK(gpuMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, gpuMemcpyDeviceToDevice, nullptr));
    LOOM_GPU_CHECK(gpuEventRecord(e1, nullptr));
    LOOM_GPU_CHECK(gpuEventSynchronize(e1));
    float ms = 0;
    LOOM_GPU_CHECK(gpuEventElapsedTime(&ms, e0, e1));
    (void)gpuFree(a);
    (void)gpuFree(b);
    return 2.0 * static_cast<double>(n) * reps / (ms * 1e-3);
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(100 + rng() % static_cast<uint64_t>(n_vocab - 200));
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    std::string model;
    int prompt = 512, gen = 128;
    bool decode_only = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--decode-only") {
            decode_only = true;
            continue;
        }
        if (i + 1 >= argc) break;
        if (a == "--model") model = argv[++i];
        else if (a == "--prompt") prompt = std::atoi(argv[++i]);
        else if (a == "--gen") gen = std::atoi(argv[++i]);
    }
    if (model.empty()) {
        std::fprintf(stderr, "usage: loom-gpu-bench --model FILE [--prompt 512] [--gen 128] [--decode-only]\n");
        return 2;
    }
    const double bw = copy_bandwidth();
    gpu::GpuOptions opts;
    opts.n_ctx = 4096;
    opts.max_batch = 8;
    const auto t_load0 = Clock::now();
    gpu::GpuBackend be(model, opts);
    const double load_s = secs(t_load0, Clock::now());
    const int V = be.info().n_vocab;
    const double wbytes = static_cast<double>(be.weight_bytes());

    // Batch-1 decode after a prompt, as the serve loop drives it (decode step + sampling).
    auto decode_run = [&](int n_lp, double& step_ms, double& sample_ms) {
        auto seq = be.new_sequence(prompt + gen + 8);
        const auto toks = random_tokens(prompt, V, 1);
        be.eval(*seq, toks);
        engine::SamplingParams p;
        p.temperature = 0;
        p.n_logprobs = n_lp;
        engine::TokenHistory h;
        int32_t tok = be.sample(*seq, p, h, 0.5).token;
        double st = 0, sa = 0;
        const auto t0 = Clock::now();
        for (int i = 0; i < gen; ++i) {
            engine::Sequence* one[1] = {seq.get()};
            const auto a = Clock::now();
            be.decode_batch(one, std::span<const int32_t>(&tok, 1));
            const auto b = Clock::now();
            tok = be.sample(*seq, p, h, 0.5).token;
            const auto c = Clock::now();
            st += secs(a, b);
            sa += secs(b, c);
        }
        const double total = secs(t0, Clock::now());
        step_ms = st / gen * 1e3;
        sample_ms = sa / gen * 1e3;
        return gen / total;
    };
    double st0, sa0, st1, sa1;
    decode_run(-1, st0, sa0);  // warm-up: graph capture, allocations
    const double tps = decode_run(-1, st0, sa0);
    const double tps_lp = decode_run(20, st1, sa1);

    // One decode step, eager, with an event after every operation (sums over layers).
    gpu::OpTimes ops;
    {
        auto seq = be.new_sequence(prompt + 8);
        be.eval(*seq, random_tokens(prompt, V, 2));
        engine::Sequence* one[1] = {seq.get()};
        const int32_t tok = 1000;
        be.profile_decode(one, std::span<const int32_t>(&tok, 1));
        ops = be.profile_decode(one, std::span<const int32_t>(&tok, 1));
    }

    // Prefill (median of 3) and time to first token (prefill + first sample).
    auto prefill = [&](int n) {
        std::vector<double> ts;
        for (int r = 0; r < 3; ++r) {
            auto seq = be.new_sequence(n + 1);
            const auto toks = random_tokens(n, V, 10 + static_cast<uint64_t>(r));
            const auto t0 = Clock::now();
            be.eval(*seq, toks);
            ts.push_back(secs(t0, Clock::now()));
        }
        std::sort(ts.begin(), ts.end());
        return ts[1];
    };
    double p512 = 0, p2048 = 0;
    gpu::OpTimes pops;
    if (!decode_only) {
        p512 = prefill(512);
        p2048 = prefill(2048);
        auto seq = be.new_sequence(513);
        pops = be.profile_prefill(*seq, random_tokens(512, V, 3));
    }

    // Batched decode: nb sequences of 128-token prompts, 32 steps.
    auto batched = [&](int nb) {
        std::vector<std::unique_ptr<engine::Sequence>> seqs;
        std::vector<engine::Sequence*> ptrs;
        for (int i = 0; i < nb; ++i) {
            seqs.push_back(be.new_sequence(128 + 40));
            be.eval(*seqs.back(), random_tokens(128, V, 100 + static_cast<uint64_t>(i)));
            ptrs.push_back(seqs.back().get());
        }
        std::vector<int32_t> toks(static_cast<size_t>(nb), 1000);
        be.decode_batch(ptrs, toks);
        const auto t0 = Clock::now();
        for (int s = 0; s < 32; ++s) be.decode_batch(ptrs, toks);
        return 32.0 * nb / secs(t0, Clock::now());
    };
    const double b4 = decode_only ? 0.0 : batched(4), b8 = decode_only ? 0.0 : batched(8);

    const double roof = bw / wbytes;  // tokens/s if every weight byte is read once per token
    std::printf("model %s: weights %.2f GB on the device, load %.1f s\n", model.c_str(), wbytes / 1e9, load_s);
    std::printf("device-to-device copy: %.0f GB/s (read + write) -> weight-streaming roofline %.0f tok/s\n", bw / 1e9,
                roof);
    std::printf("decode batch 1 (%d tokens after %d): %.1f tok/s = %.0f%% of roofline (step %.3f ms, sample %.3f ms)\n",
                gen, prompt, tps, 100 * tps / roof, st0, sa0);
    std::printf("decode with top-20 logprobs: %.1f tok/s (%.2f%% slower; sample %.3f ms)\n", tps_lp,
                100 * (tps / tps_lp - 1), sa1);
    if (!decode_only)
        std::printf("prefill 512: %.0f tok/s (%.1f ms); prefill 2048: %.0f tok/s (%.1f ms)\n", 512 / p512, p512 * 1e3,
                    2048 / p2048, p2048 * 1e3);
    std::printf("batched decode: 4 seqs %.0f tok/s, 8 seqs %.0f tok/s\n", b4, b8);
    double tot = 0;
    for (auto& [n, ms] : ops.ms) tot += ms;
    std::printf("one decode step, eager, per operation (ms, all layers):\n");
    for (auto& [n, ms] : ops.ms) std::printf("  %-14s %8.3f  %5.1f%%\n", n.c_str(), ms, 100 * ms / tot);
    std::printf("  %-14s %8.3f\n", "total", tot);
    double ptot = 0;
    for (auto& [n, ms] : pops.ms) ptot += ms;
    std::printf("prefill of 512 tokens, eager, per operation (ms, all layers):\n");
    for (auto& [n, ms] : pops.ms) std::printf("  %-14s %8.3f  %5.1f%%\n", n.c_str(), ms, 100 * ms / ptot);
    std::printf("  %-14s %8.3f\n", "total", ptot);
    std::printf("BENCH {\"model\": \"%s\", \"weight_bytes\": %.0f, \"copy_bw\": %.0f, \"roofline_tps\": %.1f, "
                "\"decode_tps\": %.2f, \"decode_lp20_tps\": %.2f, \"step_ms\": %.4f, \"sample_ms\": %.4f, "
                "\"sample_lp20_ms\": %.4f, \"prefill512_tps\": %.1f, \"prefill2048_tps\": %.1f, \"batch4_tps\": %.1f, "
                "\"batch8_tps\": %.1f, \"ops\": {",
                model.c_str(), wbytes, bw, roof, tps, tps_lp, st0, sa0, sa1, p512 > 0 ? 512 / p512 : 0.0,
                p2048 > 0 ? 2048 / p2048 : 0.0, b4, b8);
    for (size_t i = 0; i < ops.ms.size(); ++i)
        std::printf("%s\"%s\": %.4f", i ? ", " : "", ops.ms[i].first.c_str(), ops.ms[i].second);
    std::printf("}}\n");
    return 0;
}
