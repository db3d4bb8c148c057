// loom-gpu-sampler-test: the device sampler (k_sample.cu) against the reference sampler
// (engine/sampler.cpp) on random logits and random parameters: same token, same top ids, and
// logprobs within 1e-5. Exit status 0 when every case agrees.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/backends/gpu/gpu_sample.hpp"
#include "engine/sampler.hpp"

using namespace loom;

namespace {

bool close(float a, float b) {
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::fabs(a - b) <= 1e-5f + 1e-6f * std::fabs(a);
}

}  // namespace

int main(int argc, char** argv) {
    const int cases = argc > 1 ? std::atoi(argv[1]) : 400;
    std::mt19937_64 rng(12345);
    std::uniform_real_distribution<double> U(0, 1);
    const int sizes[] = {3, 17, 512, 4099, 40000, 128256};
    int fails = 0, token_diffs = 0;
    for (int ci = 0; ci < cases; ++ci) {
        const int n = sizes[ci % 6 == 5 ? (ci % 12 == 5 ? 5 : 4) : ci % 4];
        std::vector<float> logits(static_cast<size_t>(n));
        std::normal_distribution<float> N(0.0f, ci % 3 == 0 ? 4.0f : 1.5f);
        for (auto& v : logits) v = N(rng);
        // Ties and repeated values.
        for (int i = 0; i < n / 10; ++i) logits[rng() % n] = logits[rng() % n];
        if (ci % 7 == 0) logits[rng() % n] = 30.0f;

        engine::SamplingParams p;
        const float temps[] = {0.0f, 0.7f, 1.0f, 1.5f};
        p.temperature = temps[rng() % 4];
        p.top_k = (rng() % 3 == 0) ? static_cast<int32_t>(1 + rng() % 60) : 0;
        p.top_p = (rng() % 3 == 0) ? static_cast<float>(0.3 + 0.69 * U(rng)) : 1.0f;
        p.min_p = (rng() % 4 == 0) ? static_cast<float>(0.2 * U(rng)) : 0.0f;
        if (rng() % 4 == 0) {
            p.repetition_penalty = 1.3f;
            p.presence_penalty = 0.5f;
            p.frequency_penalty = 0.25f;
        }
        if (rng() % 4 == 0)
            for (int i = 0; i < 5; ++i) p.logit_bias.emplace_back(static_cast<int32_t>(rng() % n), N(rng));
        if (rng() % 4 == 0) {
            for (int i = 0; i < n; ++i)
                if (rng() % 3 == 0) p.allowed.push_back(i);
            if (p.allowed.empty()) p.allowed.push_back(0);
        }
        const int lps[] = {-1, 0, 5, 20};
        p.n_logprobs = lps[rng() % 4];
        p.processed_logprobs = rng() % 3 == 0;
        engine::TokenHistory h;
        for (int i = 0; i < 8; ++i) h.prompt.push_back(static_cast<int32_t>(rng() % n));
        for (int i = 0; i < 6; ++i) h.add_output(static_cast<int32_t>(rng() % n));
        const double u = U(rng);

        engine::SamplerScratch scr;
        const engine::SampleResult ref = engine::sample_logits(logits, p, h, u, scr);

        gpuStream_t s;
        LOOM_GPU_CHECK(gpuStreamCreate(&s));
        void* d = nullptr;
        LOOM_GPU_CHECK(gpuMalloc(&d, sizeof(float) * static_cast<size_t>(n)));
        LOOM_GPU_CHECK(gpuMemcpy(d, logits.data(), sizeof(float) * static_cast<size_t>(n), gpuMemcpyHostToDevice));
        engine::SampleResult got;
        {
            gpu::DeviceSampler ds(n, s);
            got = ds.sample(static_cast<const float*>(d), p, h, u);
        }
        (void)gpuFree(d);
        (void)gpuStreamDestroy(s);

        bool ok = got.token == ref.token;
        if (!ok) ++token_diffs;
        if (p.n_logprobs >= 0) {
            ok = ok && close(got.logprob, ref.logprob) && got.top.size() == ref.top.size();
            for (size_t i = 0; ok && i < ref.top.size(); ++i)
                ok = got.top[i].first == ref.top[i].first && close(got.top[i].second, ref.top[i].second);
        }
        if (!ok) {
            ++fails;
            std::printf("case %d FAIL: n=%d temp=%g top_k=%d top_p=%g min_p=%g rep=%g bias=%zu allowed=%zu lp=%d "
                        "proc=%d u=%.17g\n  ref token %d lp %.7g top",
                        ci, n, p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty, p.logit_bias.size(),
                        p.allowed.size(), p.n_logprobs, p.processed_logprobs ? 1 : 0, u, ref.token, ref.logprob);
            for (auto& [id, lp] : ref.top) std::printf(" %d:%.7g", id, lp);
            std::printf("\n  gpu token %d lp %.7g top", got.token, got.logprob);
            for (auto& [id, lp] : got.top) std::printf(" %d:%.7g", id, lp);
            std::printf("\n");
        }
    }
    std::printf("sampler check: %d cases, %d disagree (%d different tokens)\n", cases, fails, token_diffs);
    return fails == 0 ? 0 : 1;
}
