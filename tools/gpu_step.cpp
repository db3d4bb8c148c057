// loom-gpu-step-emu: drives the GPU backend's step interface directly, as a scheduler would
// (block tables, chunked prefill, concurrent requests, prefix blocks reused from earlier
// requests), and prints each request's greedy tokens with their top logprobs, one line per token:
//   T <request> <token> <logprob> <id>:<logprob> ...
// so that runs with different chunking, batching or prefix reuse can be compared (bitwise with
// --precision exact) and against another engine.
//
// Usage: loom-gpu-step-emu --model FILE --prompts 1,2,3;4,5 [--max-tokens N] [--chunk N]
//        [--together] [--reuse-prefix] [--logprobs K] [GPU options: the engine's, e.g.
//        --precision exact, --kv-f32, --no-graphs; parsed by gpu_options.hpp's parse_gpu_option]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backends/gpu/gpu_backend.hpp"

using namespace loom;

namespace {

std::vector<int32_t> ids(const std::string& s) {
    std::vector<int32_t> v;
    std::stringstream ss(s);
    std::string t;
    while (std::getline(ss, t, ','))
        if (!t.empty()) v.push_back(std::stoi(t));
    return v;
}

struct Request {
    std::vector<int32_t> prompt, seq;  // seq: prompt + output so far
    std::vector<int32_t> blocks;
    int64_t pos = 0;  // positions in the cache
    int out = 0;
    int slot = -1;
    std::vector<engine::SampleResult> results;
};

}  // namespace

int main(int argc, char** argv) {
    std::string model, prompts;
    int max_tokens = 8, chunk = 1 << 30, k = 5;
    bool together = false, reuse = false;
    gpu::GpuOptions opts;
    opts.engine_name = "loom-gpu-step-emu";
    opts.kv_tokens = 4096;
    opts.n_ctx = 512;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        try {
            if (gpu::parse_gpu_option(argc, argv, i, opts)) continue;
        } catch (const std::invalid_argument& e) {
            std::fprintf(stderr, "loom-gpu-step-emu: %s\n", e.what());
            return 2;
        }
        auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
        if (a == "--model") model = next();
        else if (a == "--prompts") prompts = next();
        else if (a == "--max-tokens") max_tokens = std::atoi(next().c_str());
        else if (a == "--chunk") chunk = std::atoi(next().c_str());
        else if (a == "--logprobs") k = std::atoi(next().c_str());
        else if (a == "--together") together = true;
        else if (a == "--reuse-prefix") reuse = true;
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 2;
        }
    }
    std::vector<Request> reqs;
    std::stringstream ps(prompts);
    std::string p;
    while (std::getline(ps, p, ';')) {
        Request r;
        r.prompt = r.seq = ids(p);
        reqs.push_back(r);
    }
    if (model.empty() || reqs.empty()) {
        std::fprintf(stderr, "usage: loom-gpu-step-emu --model FILE --prompts 1,2;3,4 [...] [GPU options]\n%s",
                     gpu::gpu_options_help());
        return 2;
    }
    gpu::GpuBackend be(model, opts);
    const int bt = be.kv().block_tokens;
    int32_t next_block = 0;
    // Earlier requests' (tokens, blocks), for prefix reuse: full blocks whose tokens all match.
    std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> done;
    engine::SamplingParams sp;
    sp.temperature = 0;
    sp.n_logprobs = k;

    auto start = [&](Request& r, int slot) {
        r.slot = slot;
        be.open_slot(slot, sp, r.prompt, {});
        if (reuse) {
            size_t best = 0;
            const std::vector<int32_t>* from = nullptr;
            for (const auto& [toks, blocks] : done) {
                size_t n = 0;
                while (n < toks.size() && n + 1 < r.prompt.size() && toks[n] == r.prompt[n]) ++n;
                n = n / static_cast<size_t>(bt) * static_cast<size_t>(bt);
                if (n > best) best = n, from = &blocks;
            }
            for (size_t b = 0; b < best / static_cast<size_t>(bt); ++b) r.blocks.push_back((*from)[b]);
            r.pos = static_cast<int64_t>(best);
        }
        const int64_t total = static_cast<int64_t>(r.prompt.size()) + max_tokens;
        while (static_cast<int64_t>(r.blocks.size()) * bt < total) r.blocks.push_back(next_block++);
    };
    auto run = [&](std::vector<Request*> active) {
        std::vector<std::vector<int32_t>> toks(active.size());
        while (true) {
            engine::StepPlan plan;
            std::vector<Request*> in_plan;
            for (size_t i = 0; i < active.size(); ++i) {
                Request& r = *active[i];
                if (r.out >= max_tokens) continue;
                const auto n_prompt = static_cast<int64_t>(r.prompt.size());
                engine::StepRow row;
                row.slot = r.slot;
                row.pos0 = r.pos;
                if (r.pos < n_prompt) {
                    const int64_t n = std::min<int64_t>(chunk, n_prompt - r.pos);
                    toks[i].assign(r.prompt.begin() + r.pos, r.prompt.begin() + r.pos + n);
                    row.sample = r.pos + n == n_prompt;
                } else {
                    toks[i] = {r.seq.back()};
                    row.sample = true;
                }
                row.tokens = toks[i];
                row.blocks = r.blocks;
                plan.rows.push_back(row);
                in_plan.push_back(&r);
            }
            if (plan.rows.empty()) break;
            engine::StepOutput out;
            be.step(plan, out);
            for (size_t j = 0; j < plan.rows.size(); ++j) {
                Request& r = *in_plan[j];
                if (!out.errors[j].empty()) {
                    std::fprintf(stderr, "request error: %s\n", out.errors[j].c_str());
                    std::exit(1);
                }
                r.pos += static_cast<int64_t>(plan.rows[j].tokens.size());
                if (out.sampled[j]) {
                    r.results.push_back(*out.sampled[j]);
                    r.seq.push_back(out.sampled[j]->token);
                    ++r.out;
                }
            }
        }
        for (Request* r : active) {
            be.close_slot(r->slot);
            // Positions 0..pos-1 are in the cache (the last sampled token never was evaluated).
            done.emplace_back(std::vector<int32_t>(r->seq.begin(), r->seq.begin() + r->pos), r->blocks);
        }
    };
    if (together) {
        std::vector<Request*> all;
        for (size_t i = 0; i < reqs.size(); ++i) {
            start(reqs[i], static_cast<int>(i));
            all.push_back(&reqs[i]);
        }
        run(all);
    } else {
        for (auto& r : reqs) {
            start(r, 0);
            run({&r});
        }
    }
    for (size_t i = 0; i < reqs.size(); ++i)
        for (const auto& s : reqs[i].results) {
            std::printf("T r%zu %d %.9g", i, s.token, s.logprob);
            for (const auto& [id, lp] : s.top) std::printf(" %d:%.9g", id, lp);
            std::printf("\n");
        }
    return 0;
}
