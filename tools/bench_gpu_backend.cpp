// loom-gpu-bench: times the GPU backend directly through its step interface (no protocol): the
// device-to-device copy bandwidth (the roofline), batch-1 decode with and without top-20
// logprobs, the per-operation device time of one decode step and of a 512-token prefill (CUDA
// events), prefill of 512 and 2048 tokens, batched decode, and a mixed step (decode rows beside
// a prefill chunk). Prints a table and one JSON line ("BENCH {...}") for tools/bench_gpu.py.
//
// Usage: loom-gpu-bench --model FILE [--prompt 512] [--gen 128] [--decode-only] [GPU options]
// where the GPU options are the engine's, parsed by the same function (gpu_options.hpp:
// --precision TIER, --kv-f32, --ctx N, --prefill-attn MODE, --matvec-rows N, ...; --ctx defaults
// to 4096 here); --prefill-list N,N,... times only those prefills (TTFT of the backend);
// --step-rows N,N,... times and profiles only decode steps of those many rows (one row a sequence, after 128-token prompts), with top-K logprobs under
// --step-logprobs K.
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
    for (int i = 0; i < reps; ++i)
        LOOM_GPU_CHECK(gpuMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, gpuMemcpyDeviceToDevice, nullptr));
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

// A sequence as a scheduler would keep it: its slot, block table and position.
struct Seq {
    int slot = 0;
    std::vector<int32_t> blocks;
    int64_t pos = 0;
    int32_t last = 0;
};

// Drives the backend's step() for the benchmark phases; blocks come from a bump allocator that
// each phase resets.
class Driver {
public:
    explicit Driver(gpu::GpuBackend& be) : be_(be) {}

    Seq open(int slot, int64_t capacity, int n_logprobs) {
        engine::SamplingParams p;
        p.temperature = 0;
        p.n_logprobs = n_logprobs;
        be_.open_slot(slot, p, {}, {});
        Seq s;
        s.slot = slot;
        const int bt = be_.kv().block_tokens;
        while (static_cast<int64_t>(s.blocks.size()) * bt < capacity) s.blocks.push_back(next_block_++);
        return s;
    }
    void close(Seq& s) { be_.close_slot(s.slot); }
    // n sequences in slots 0..n-1, each prefilled with 128 random tokens (seeds seed + i), with
    // room for `capacity` positions; ptrs points at them (seqs is not resized afterwards).
    void open_batch(int n, int64_t capacity, uint64_t seed, std::vector<Seq>& seqs, std::vector<Seq*>& ptrs,
                    int n_logprobs = -1) {
        seqs.clear();
        ptrs.clear();
        for (int i = 0; i < n; ++i) seqs.push_back(open(i, capacity, n_logprobs));
        for (int i = 0; i < n; ++i) {
            prefill(seqs[static_cast<size_t>(i)],
                    random_tokens(128, be_.info().n_vocab, seed + static_cast<uint64_t>(i)));
            ptrs.push_back(&seqs[static_cast<size_t>(i)]);
        }
    }
    void reset_blocks() { next_block_ = 0; }

    // Prefills `tokens` in chunks of the step limit, sampling after the last.
    void prefill(Seq& s, const std::vector<int32_t>& tokens) {
        const int64_t chunk = be_.kv().max_step_tokens;
        for (int64_t c0 = 0; c0 < static_cast<int64_t>(tokens.size()); c0 += chunk) {
            const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(tokens.size()) - c0);
            engine::StepPlan plan;
            plan.rows.push_back(row(s, std::span<const int32_t>(tokens.data() + c0, static_cast<size_t>(n)),
                                    c0 + n == static_cast<int64_t>(tokens.size())));
            run(plan, {&s});
        }
    }
    // One decode step of every sequence in `seqs` (their last tokens).
    void decode(const std::vector<Seq*>& seqs) { run(decode_plan(seqs), seqs); }
    // The plan of one decode step of every sequence in `seqs` (for profiling).
    engine::StepPlan decode_plan(const std::vector<Seq*>& seqs) {
        engine::StepPlan plan;
        for (Seq* s : seqs) plan.rows.push_back(row(*s, std::span<const int32_t>(&s->last, 1), true));
        return plan;
    }
    void run(const engine::StepPlan& plan, const std::vector<Seq*>& seqs) {
        be_.step(plan, out_);
        advance(plan, seqs);
    }
    void advance(const engine::StepPlan& plan, const std::vector<Seq*>& seqs) {
        for (size_t i = 0; i < seqs.size(); ++i) {
            if (!out_.errors[i].empty()) throw std::runtime_error(out_.errors[i]);
            seqs[i]->pos += static_cast<int64_t>(plan.rows[i].tokens.size());
            if (out_.sampled[i]) seqs[i]->last = out_.sampled[i]->token;
        }
    }
    engine::StepRow row(Seq& s, std::span<const int32_t> tokens, bool sample) {
        engine::StepRow r;
        r.slot = s.slot;
        r.pos0 = s.pos;
        r.tokens = tokens;
        r.blocks = s.blocks;
        r.sample = sample;
        r.u = 0.5;
        return r;
    }
    engine::StepOutput out_;

private:
    gpu::GpuBackend& be_;
    int32_t next_block_ = 0;
};

void print_ops(const char* what, const gpu::OpTimes& ops) {
    double tot = 0;
    for (auto& [n, ms] : ops.ms) tot += ms;
    std::printf("%s, eager, per operation (ms, all layers):\n", what);
    for (auto& [n, ms] : ops.ms) std::printf("  %-14s %8.3f  %5.1f%%\n", n.c_str(), ms, 100 * ms / tot);
    std::printf("  %-14s %8.3f\n", "total", tot);
}

// "N,N,..." as integers (parsing stops at the first item that is not a number).
std::vector<int> int_list(const char* p) {
    std::vector<int> v;
    while (*p) {
        char* end = nullptr;
        const long n = std::strtol(p, &end, 10);
        if (end == p) break;
        v.push_back(static_cast<int>(n));
        p = *end == ',' ? end + 1 : end;
    }
    return v;
}

float op_ms(const gpu::OpTimes& ops, const char* name) {
    for (auto& [n, ms] : ops.ms)
        if (n == name) return ms;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string model;
    int prompt = 512, gen = 128;
    bool decode_only = false;
    std::vector<int> prefill_list;  // --prefill-list: only these prefills, timed
    std::vector<int> step_rows;     // --step-rows: only decode steps of these many rows, timed and profiled
    int step_logprobs = -1;         // --step-logprobs K: those rows ask for top-K logprobs
    gpu::GpuOptions opts;
    opts.engine_name = "loom-gpu-bench";
    opts.n_ctx = 4096;
    opts.max_slots = 8;
    opts.kv_tokens = 8 * 4096;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        try {
            if (gpu::parse_gpu_option(argc, argv, i, opts)) continue;
        } catch (const std::invalid_argument& e) {
            std::fprintf(stderr, "loom-gpu-bench: %s\n", e.what());
            return 2;
        }
        auto next = [&]() { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
        if (a == "--decode-only") decode_only = true;
        else if (a == "--model" && i + 1 < argc) model = argv[++i];
        else if (a == "--prompt") prompt = next();
        else if (a == "--gen") gen = next();
        else if (a == "--prefill-list" && i + 1 < argc) prefill_list = int_list(argv[++i]);
        else if (a == "--step-rows" && i + 1 < argc) step_rows = int_list(argv[++i]);
        else if (a == "--step-logprobs") step_logprobs = next();
        else {
            std::fprintf(stderr, "loom-gpu-bench: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    int max_list = 0, max_rows = 0;
    for (int n : prefill_list) max_list = std::max(max_list, n);
    for (int n : step_rows) max_rows = std::max(max_rows, n);
    if (max_rows > opts.max_slots) {
        opts.max_slots = max_rows;
        opts.kv_tokens = std::max<int64_t>(opts.kv_tokens, int64_t{max_rows} * 256);
    }
    if (max_list + 8 > opts.n_ctx) opts.n_ctx = max_list + 8;
    opts.kv_tokens = std::max<int64_t>(opts.kv_tokens, opts.n_ctx);
    if (model.empty() || prompt < 1 || gen < 1 || prompt + gen + 8 > opts.n_ctx ||
        std::find_if(prefill_list.begin(), prefill_list.end(), [](int n) { return n < 1; }) != prefill_list.end() ||
        std::find_if(step_rows.begin(), step_rows.end(), [](int n) { return n < 1; }) != step_rows.end()) {
        std::fprintf(stderr,
                     "usage: loom-gpu-bench --model FILE [--prompt 512] [--gen 128] [--decode-only] "
                     "[--prefill-list N,N,...] [--step-rows N,N,...] [--step-logprobs K] [GPU options]\n"
                     "GPU options (the engine's):\n%s",
                     gpu::gpu_options_help());
        return 2;
    }
    const double bw = copy_bandwidth();
    const auto t_load0 = Clock::now();
    gpu::GpuBackend be(model, opts);
    const double load_s = secs(t_load0, Clock::now());
    const int V = be.info().n_vocab;
    const double wbytes = static_cast<double>(be.weight_bytes());
    Driver dr(be);

    // --prefill-list: each prompt prefilled in chunks of the step limit and its first token
    // sampled (the backend's TTFT), median of 3 up to 4,096 tokens, one run above; one warm-up.
    if (!prefill_list.empty()) {
        auto once = [&](int n, uint64_t seed) {
            dr.reset_blocks();
            Seq s = dr.open(0, n + 1, -1);
            const auto toks = random_tokens(n, V, seed);
            const auto t0 = Clock::now();
            dr.prefill(s, toks);
            const double t = secs(t0, Clock::now());
            dr.close(s);
            return t;
        };
        once(std::min(prefill_list.front(), 512), 9);
        std::string json;
        for (int n : prefill_list) {
            std::vector<double> ts;
            for (int r = 0; r < (n <= 4096 ? 3 : 1); ++r) ts.push_back(once(n, 10 + static_cast<uint64_t>(r)));
            std::sort(ts.begin(), ts.end());
            const double t = ts[ts.size() / 2];
            std::printf("prefill %d: %.0f tok/s (%.1f ms, %zu run%s)\n", n, n / t, t * 1e3, ts.size(),
                        ts.size() > 1 ? "s, median" : "");
            json += (json.empty() ? "" : ", ") + ("\"" + std::to_string(n) + "\": " + std::to_string(t * 1e3));
        }
        std::printf("BENCHP {\"load_s\": %.2f, \"prefill_ms\": {%s}}\n", load_s, json.c_str());
        return 0;
    }

    // --step-rows: per row count n, n sequences after 128-token prompts; the median of 9 timed
    // decode steps (sampling included, graphs where the engine uses them) and one profiled step.
    if (!step_rows.empty()) {
        std::string json;
        for (int n : step_rows) {
            dr.reset_blocks();
            std::vector<Seq> seqs;
            std::vector<Seq*> ptrs;
            dr.open_batch(n, 128 + 24, 500, seqs, ptrs, step_logprobs);
            for (int w = 0; w < 2; ++w) dr.decode(ptrs);
            std::vector<double> ts;
            for (int st = 0; st < 9; ++st) {
                const auto t0 = Clock::now();
                dr.decode(ptrs);
                ts.push_back(secs(t0, Clock::now()));
            }
            std::sort(ts.begin(), ts.end());
            const engine::StepPlan plan = dr.decode_plan(ptrs);
            const gpu::OpTimes ops = be.profile_step(plan, dr.out_);
            dr.advance(plan, ptrs);
            for (auto& q : seqs) dr.close(q);
            const double ms = ts[4] * 1e3;
            std::printf(
                "decode step of %d rows: %.3f ms (%.0f tok/s; weights once a step: %.3f ms at the copy bandwidth)\n", n,
                ms, n / ts[4], wbytes / bw * 1e3);
            print_ops("  profiled", ops);
            json += (json.empty() ? "" : ", ") + ("\"" + std::to_string(n) + "\": {\"step_ms\": " + std::to_string(ms));
            for (auto& [name, t] : ops.ms) json += ", \"" + name + "\": " + std::to_string(t);
            json += "}";
        }
        std::printf("BENCHS {\"copy_bw\": %.0f, \"weight_bytes\": %.0f, \"steps\": {%s}}\n", bw, wbytes, json.c_str());
        return 0;
    }

    // Batch-1 decode after a prompt, as the serve loop drives it (one step, sampling included).
    auto decode_run = [&](int n_lp, double& step_ms) {
        dr.reset_blocks();
        Seq s = dr.open(0, prompt + gen + 8, n_lp);
        dr.prefill(s, random_tokens(prompt, V, 1));
        double st = 0;
        const auto t0 = Clock::now();
        for (int i = 0; i < gen; ++i) {
            const auto a = Clock::now();
            dr.decode({&s});
            st += secs(a, Clock::now());
        }
        const double total = secs(t0, Clock::now());
        dr.close(s);
        step_ms = st / gen * 1e3;
        return gen / total;
    };
    double st0, st1;
    decode_run(-1, st0);  // warm-up: graph capture
    const double tps = decode_run(-1, st0);
    const double tps_lp = decode_run(20, st1);

    // One decode step, eager, with an event after every operation (sums over layers), without
    // and with top-20 logprobs.
    gpu::OpTimes ops, ops_lp;
    for (int lp : {-1, 20}) {
        dr.reset_blocks();
        Seq s = dr.open(0, prompt + 8, lp);
        dr.prefill(s, random_tokens(prompt, V, 2));
        for (int rep = 0; rep < 2; ++rep) {
            const engine::StepPlan plan = dr.decode_plan({&s});
            (lp < 0 ? ops : ops_lp) = be.profile_step(plan, dr.out_);
            dr.advance(plan, {&s});
        }
        dr.close(s);
    }

    // Prefill (median of 3), sampling the first token after it.
    auto prefill = [&](int n) {
        std::vector<double> ts;
        for (int r = 0; r < 3; ++r) {
            dr.reset_blocks();
            Seq s = dr.open(0, n + 1, -1);
            const auto toks = random_tokens(n, V, 10 + static_cast<uint64_t>(r));
            const auto t0 = Clock::now();
            dr.prefill(s, toks);
            ts.push_back(secs(t0, Clock::now()));
            dr.close(s);
        }
        std::sort(ts.begin(), ts.end());
        return ts[1];
    };
    double p512 = 0, p2048 = 0, mixed_ms = 0;
    gpu::OpTimes pops;
    if (!decode_only) {
        p512 = prefill(512);
        p2048 = prefill(2048);
        dr.reset_blocks();
        Seq s = dr.open(0, 513, -1);
        const auto toks = random_tokens(512, V, 3);
        engine::StepPlan plan;
        plan.rows.push_back(dr.row(s, toks, true));
        pops = be.profile_step(plan, dr.out_);
        dr.close(s);
    }

    // Batched decode: nb sequences of 128-token prompts, 32 steps.
    auto batched = [&](int nb) {
        dr.reset_blocks();
        std::vector<Seq> seqs;
        std::vector<Seq*> ptrs;
        dr.open_batch(nb, 128 + 40, 100, seqs, ptrs);
        dr.decode(ptrs);
        const auto t0 = Clock::now();
        for (int st = 0; st < 32; ++st) dr.decode(ptrs);
        const double r = 32.0 * nb / secs(t0, Clock::now());
        for (auto& s : seqs) dr.close(s);
        return r;
    };
    const double b4 = decode_only ? 0.0 : batched(4), b8 = decode_only ? 0.0 : batched(8);

    // A mixed step: 7 sequences decoding beside a 256-token prefill chunk (median of 5 steps).
    if (!decode_only) {
        dr.reset_blocks();
        std::vector<Seq> seqs;
        for (int i = 0; i < 8; ++i) seqs.push_back(dr.open(i, i < 7 ? 128 + 16 : 5 * 256 + 8, -1));
        for (int i = 0; i < 7; ++i) dr.prefill(seqs[static_cast<size_t>(i)], random_tokens(128, V, 200 + i));
        const auto chunk = random_tokens(5 * 256, V, 300);
        std::vector<double> ts;
        for (int st = 0; st < 5; ++st) {
            engine::StepPlan plan;
            std::vector<Seq*> ptrs;
            for (int i = 0; i < 7; ++i) {
                Seq& s = seqs[static_cast<size_t>(i)];
                plan.rows.push_back(dr.row(s, std::span<const int32_t>(&s.last, 1), true));
                ptrs.push_back(&s);
            }
            Seq& p = seqs[7];
            plan.rows.push_back(dr.row(p, std::span<const int32_t>(chunk.data() + st * 256, 256), false));
            ptrs.push_back(&p);
            const auto t0 = Clock::now();
            dr.run(plan, ptrs);
            ts.push_back(secs(t0, Clock::now()));
        }
        std::sort(ts.begin(), ts.end());
        mixed_ms = ts[2] * 1e3;
        for (auto& s : seqs) dr.close(s);
    }

    const double roof = bw / wbytes;  // tokens/s if every weight byte is read once per token
    std::printf("model %s: weights %.2f GB on the device, KV pool %.2f GB, load %.1f s\n", model.c_str(), wbytes / 1e9,
                static_cast<double>(be.kv_bytes()) / 1e9, load_s);
    std::printf("device-to-device copy: %.0f GB/s (read + write) -> weight-streaming roofline %.0f tok/s\n", bw / 1e9,
                roof);
    std::printf(
        "decode batch 1 (%d tokens after %d): %.1f tok/s = %.0f%% of roofline (step %.3f ms, sampling %.3f ms)\n", gen,
        prompt, tps, 100 * tps / roof, st0, op_ms(ops, "sample"));
    std::printf("decode with top-20 logprobs: %.1f tok/s (%.2f%% slower; sampling %.3f ms)\n", tps_lp,
                100 * (tps / tps_lp - 1), op_ms(ops_lp, "sample"));
    if (!decode_only) {
        std::printf("prefill 512: %.0f tok/s (%.1f ms); prefill 2048: %.0f tok/s (%.1f ms)\n", 512 / p512, p512 * 1e3,
                    2048 / p2048, p2048 * 1e3);
        std::printf("mixed step (7 decode rows + a 256-token chunk): %.2f ms\n", mixed_ms);
    }
    std::printf("batched decode: 4 seqs %.0f tok/s, 8 seqs %.0f tok/s\n", b4, b8);
    print_ops("one decode step", ops);
    if (!decode_only) print_ops("prefill of 512 tokens", pops);
    std::printf(
        "BENCH {\"model\": \"%s\", \"weight_bytes\": %.0f, \"copy_bw\": %.0f, \"roofline_tps\": %.1f, "
        "\"decode_tps\": %.2f, \"decode_lp20_tps\": %.2f, \"step_ms\": %.4f, \"step_lp20_ms\": %.4f, "
        "\"sample_ms\": %.4f, \"sample_lp20_ms\": %.4f, \"prefill512_tps\": %.1f, \"prefill2048_tps\": %.1f, "
        "\"mixed_step_ms\": %.3f, \"batch4_tps\": %.1f, \"batch8_tps\": %.1f, \"ops\": {",
        model.c_str(), wbytes, bw, roof, tps, tps_lp, st0, st1, op_ms(ops, "sample"), op_ms(ops_lp, "sample"),
        p512 > 0 ? 512 / p512 : 0.0, p2048 > 0 ? 2048 / p2048 : 0.0, mixed_ms, b4, b8);
    for (size_t i = 0; i < ops.ms.size(); ++i)
        std::printf("%s\"%s\": %.4f", i ? ", " : "", ops.ms[i].first.c_str(), ops.ms[i].second);
    std::printf("}}\n");
    return 0;
}
