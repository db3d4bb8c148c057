// loom-gpu-sampler-test: the batched device sampler (SlotSampler, k_sample.cu) against the
// reference sampler (engine/sampler.cpp) on random logits and random parameters, several slots
// per launch, two draws per slot (the second after the device counted the first token in the
// slot's penalty state): same token, same top ids, and logprobs within 1e-5. Some rows' logits
// are rounded to a grid or to two values, so that many candidates tie, or follow a ramp. Two rows in three
// also carry a grammar token mask (SampleRow::mask, a new one each draw: half the ids, a sparse
// set, a single token, now and then none of the candidates), sampled beside the unmasked rows
// of the same launch and compared with sample_logits(..., mask). Now and then a row holds a NaN
// logit, which both refuse. Exit status 0 when every case agrees.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/backends/gpu/gpu_sample.hpp"
#include "engine/sampler.hpp"

using namespace loom;

namespace {

bool close(float a, float b) {
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::fabs(a - b) <= 1e-5f + 1e-6f * std::fabs(a);
}

engine::SamplingParams random_params(std::mt19937_64& rng, int n, std::normal_distribution<float>& N) {
    std::uniform_real_distribution<double> U(0, 1);
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
    if (rng() % 4 == 0) {
        for (int i = 0; i < 5; ++i) p.logit_bias.emplace_back(static_cast<int32_t>(rng() % n), N(rng));
        if (rng() % 2 == 0) p.logit_bias.push_back({p.logit_bias[0].first, N(rng)});  // an id named twice
    }
    if (rng() % 4 == 0) {
        for (int i = 0; i < n; ++i)
            if (rng() % 3 == 0) p.allowed.push_back(i);
        if (p.allowed.empty()) p.allowed.push_back(0);
    }
    const int lps[] = {-1, 0, 5, 20};
    p.n_logprobs = lps[rng() % 4];
    p.processed_logprobs = rng() % 3 == 0;
    return p;
}

void random_logits(std::mt19937_64& rng, int ci, std::vector<float>& logits) {
    const int n = static_cast<int>(logits.size());
    std::normal_distribution<float> N(0.0f, ci % 3 == 0 ? 4.0f : 1.5f);
    for (auto& v : logits) v = N(rng);
    for (int i = 0; i < n / 10; ++i) logits[rng() % n] = logits[rng() % n];  // ties and repeated values
    if (ci % 7 == 0) logits[rng() % n] = 30.0f;
    // Ties at the top-K floor (k_topk.cuh): values on a 0.5 grid, or two values only. Or a ramp
    // repeating every 1,024 ids, which puts the best candidates of a stage-1 block in a few
    // warps, so more than the floor path ranks are left above its floor (its exact fallback).
    if (ci % 5 == 2)
        for (auto& v : logits) v = std::round(2.0f * v) / 2.0f;
    if (ci % 10 == 4)
        for (auto& v : logits) v = v > 1.0f ? 1.0f : 0.0f;
    if (ci % 10 == 9)
        for (int i = 0; i < n; ++i) logits[static_cast<size_t>(i)] = -0.01f * static_cast<float>(i % 1024);
}

// Mask kinds of a masked row's draw.
enum class MaskKind { Half, Sparse, One, Empty };

// A token mask over n ids for candidates `cand` (the allowed ids, or all when empty): `kind`
// decides which candidates it allows (at least one, except Empty, which allows only ids that
// are not candidates); the words past n stay 0.
std::vector<uint32_t> random_mask(std::mt19937_64& rng, int n, const std::vector<int32_t>& cand, MaskKind kind) {
    std::vector<uint32_t> m(static_cast<size_t>((n + 31) / 32), 0u);
    auto set = [&](int id) { m[static_cast<size_t>(id) >> 5] |= 1u << (id & 31); };
    const auto n_cand = cand.empty() ? n : static_cast<int>(cand.size());
    auto cand_at = [&](int i) { return cand.empty() ? i : cand[static_cast<size_t>(i)]; };
    if (kind == MaskKind::Empty) {
        std::vector<char> is_cand(static_cast<size_t>(n), cand.empty() ? 1 : 0);
        for (int32_t id : cand) is_cand[static_cast<size_t>(id)] = 1;
        for (int id = 0; id < n; ++id)
            if (!is_cand[static_cast<size_t>(id)] && rng() % 2 == 0) set(id);
        return m;
    }
    if (kind == MaskKind::Half)
        for (int i = 0; i < n_cand; ++i)
            if (rng() % 2 == 0) set(cand_at(i));
    if (kind == MaskKind::Sparse)
        for (int i = 0; i < n_cand; ++i)
            if (rng() % 50 == 0) set(cand_at(i));
    set(cand_at(static_cast<int>(rng() % static_cast<uint64_t>(n_cand))));
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    const int cases = argc > 1 ? std::atoi(argv[1]) : 400;
    constexpr int kRows = 6;  // slots sampled in one launch
    std::mt19937_64 rng(12345);
    std::uniform_real_distribution<double> U(0, 1);
    const int sizes[] = {3, 17, 512, 4099, 40000, 128256};
    int fails = 0, token_diffs = 0, checked = 0;
    int masked = 0, masked_raw = 0, masked_proc = 0, masked_one = 0, masked_empty = 0, nan_rows = 0;
    gpuStream_t s;
    LOOM_GPU_CHECK(gpuStreamCreate(&s));
    for (int c0 = 0; c0 < cases; c0 += kRows) {
        const int ci0 = c0 / kRows;
        const int n = sizes[ci0 % 6 == 5 ? (ci0 % 12 == 5 ? 5 : 4) : ci0 % 4];
        const int rows = std::min(kRows, cases - c0);
        gpu::SlotSampler sampler(n, kRows, s);
        std::vector<engine::SamplingParams> params;
        std::vector<engine::TokenHistory> hist(static_cast<size_t>(rows));
        std::normal_distribution<float> N(0.0f, 1.5f);
        // Rows with r % 3 != 0 carry a grammar mask; most of them want logprobs, raw or processed.
        auto has_mask = [](int r) { return r % 3 != 0; };
        for (int r = 0; r < rows; ++r) {
            params.push_back(random_params(rng, n, N));
            if (has_mask(r) && params.back().n_logprobs < 0 && rng() % 4 != 0) {
                params.back().n_logprobs = 5;
                params.back().processed_logprobs = r % 2 == 0;
            }
            auto& h = hist[static_cast<size_t>(r)];
            for (int i = 0; i < 8; ++i) h.prompt.push_back(static_cast<int32_t>(rng() % n));
            for (int i = 0; i < 6; ++i) h.add_output(static_cast<int32_t>(rng() % n));
            sampler.open(kRows - 1 - r, params.back(), h.prompt, h.output);  // slots in another order
        }
        std::vector<float> logits(static_cast<size_t>(rows) * n);
        void* d = nullptr;
        LOOM_GPU_CHECK(gpuMalloc(&d, sizeof(float) * logits.size()));
        void* rows_dev = nullptr;
        LOOM_GPU_CHECK(gpuMalloc(&rows_dev, sizeof(gpu::SampleRow) * kRows));
        void* out_dev = nullptr;
        LOOM_GPU_CHECK(gpuMalloc(&out_dev, sizeof(gpu::SampleOut) * kRows));
        const size_t words = static_cast<size_t>((n + 31) / 32);
        void* masks_dev = nullptr;
        LOOM_GPU_CHECK(gpuMalloc(&masks_dev, sizeof(uint32_t) * words * kRows));
        for (int draw = 0; draw < 2; ++draw) {
            std::vector<gpu::SampleRow> srows(static_cast<size_t>(rows));
            std::vector<double> us(static_cast<size_t>(rows));
            std::vector<std::vector<uint32_t>> masks(static_cast<size_t>(rows));
            std::vector<MaskKind> kinds(static_cast<size_t>(rows), MaskKind::Half);
            std::vector<char> nan_row(static_cast<size_t>(rows), 0);
            int nblk = 1;
            for (int r = 0; r < rows; ++r) {
                if (has_mask(r)) {
                    const int pick = (ci0 + r + draw) % 3;
                    auto kind = pick == 0 ? MaskKind::Half : pick == 1 ? MaskKind::Sparse : MaskKind::One;
                    // Now and then a mask that allows no candidate (possible only with `allowed`,
                    // or any mask of the whole vocabulary when every bit is clear).
                    if ((c0 + r + draw) % 17 == 0) kind = MaskKind::Empty;
                    kinds[static_cast<size_t>(r)] = kind;
                    masks[static_cast<size_t>(r)] = random_mask(rng, n, params[static_cast<size_t>(r)].allowed, kind);
                    LOOM_GPU_CHECK(gpuMemcpy(static_cast<uint32_t*>(masks_dev) + static_cast<size_t>(r) * words,
                                             masks[static_cast<size_t>(r)].data(), sizeof(uint32_t) * words,
                                             gpuMemcpyHostToDevice));
                }
                std::vector<float> one(static_cast<size_t>(n));
                random_logits(rng, c0 + r, one);
                std::copy(one.begin(), one.end(), logits.begin() + static_cast<int64_t>(r) * n);
                us[static_cast<size_t>(r)] = U(rng);
                // Row r samples logits row rows-1-r, so rows and logits rows differ in order too.
                const uint32_t* mdev =
                    has_mask(r) ? static_cast<const uint32_t*>(masks_dev) + static_cast<size_t>(r) * words : nullptr;
                srows[static_cast<size_t>(r)] =
                    gpu::SampleRow{kRows - 1 - r, rows - 1 - r, us[static_cast<size_t>(r)], mdev};
                nblk = std::max(nblk, sampler.blocks(kRows - 1 - r));
            }
            // Now and then a NaN at any id of a row's logits, a candidate or not: that row fails,
            // and the others of the launch do not.
            for (int r = 0; r < rows; ++r)
                if ((c0 + r + draw) % 13 == 6 && kinds[static_cast<size_t>(r)] != MaskKind::Empty) {
                    logits[static_cast<size_t>(rows - 1 - r) * n + rng() % static_cast<uint64_t>(n)] = std::nanf("");
                    nan_row[static_cast<size_t>(r)] = 1;
                }
            LOOM_GPU_CHECK(gpuMemcpy(d, logits.data(), sizeof(float) * logits.size(), gpuMemcpyHostToDevice));
            LOOM_GPU_CHECK(
                gpuMemcpy(rows_dev, srows.data(), sizeof(gpu::SampleRow) * srows.size(), gpuMemcpyHostToDevice));
            sampler.sample(static_cast<const float*>(d), n, static_cast<const gpu::SampleRow*>(rows_dev), rows, nblk,
                           static_cast<gpu::SampleOut*>(out_dev));
            std::vector<gpu::SampleOut> outs(static_cast<size_t>(rows));
            LOOM_GPU_CHECK(
                gpuMemcpyAsync(outs.data(), out_dev, sizeof(gpu::SampleOut) * outs.size(), gpuMemcpyDeviceToHost, s));
            LOOM_GPU_CHECK(gpuStreamSynchronize(s));
            for (int r = 0; r < rows; ++r) {
                const auto& p = params[static_cast<size_t>(r)];
                auto& h = hist[static_cast<size_t>(r)];
                const std::span<const float> lg(logits.data() + static_cast<int64_t>(rows - 1 - r) * n,
                                                static_cast<size_t>(n));
                engine::SamplerScratch scr;
                const auto& mask = masks[static_cast<size_t>(r)];
                ++checked;
                if (!mask.empty()) {
                    ++masked;
                    if (p.n_logprobs >= 0) ++(p.processed_logprobs ? masked_proc : masked_raw);
                    if (kinds[static_cast<size_t>(r)] == MaskKind::One) ++masked_one;
                }
                // A row both samplers must refuse (the engine ends the request): the reference
                // throws, and the device reports `want` in SampleOut::nan with no token.
                const auto expect_refusal = [&](int want, const char* what) {
                    bool threw = false;
                    try {
                        (void)engine::sample_logits(lg, p, h, us[static_cast<size_t>(r)], scr, mask);
                    } catch (const std::runtime_error&) { threw = true; }
                    const gpu::SampleOut& o = outs[static_cast<size_t>(r)];
                    if (!threw || o.nan != want || o.token != -1) {
                        ++fails;
                        std::printf("case %d draw %d FAIL: %s: reference threw %d, device nan %d token %d\n", c0 + r,
                                    draw, what, threw ? 1 : 0, o.nan, o.token);
                    }
                };
                if (nan_row[static_cast<size_t>(r)]) {
                    ++nan_rows;
                    expect_refusal(1, "NaN logit");
                    continue;  // no token: the penalty state is unchanged on both sides
                }
                if (!mask.empty() && kinds[static_cast<size_t>(r)] == MaskKind::Empty) {
                    ++masked_empty;
                    expect_refusal(gpu::kMaskEmpty, "empty mask");
                    continue;  // no token: the penalty state is unchanged on both sides
                }
                const engine::SampleResult ref = engine::sample_logits(lg, p, h, us[static_cast<size_t>(r)], scr, mask);
                const engine::SampleResult got = sampler.result(kRows - 1 - r, outs[static_cast<size_t>(r)]);
                bool ok = got.token == ref.token;
                if (!ok) ++token_diffs;
                if (p.n_logprobs >= 0) {
                    ok = ok && close(got.logprob, ref.logprob) && got.top.size() == ref.top.size();
                    for (size_t i = 0; ok && i < ref.top.size(); ++i)
                        ok = got.top[i].first == ref.top[i].first && close(got.top[i].second, ref.top[i].second);
                }
                if (!ok) {
                    ++fails;
                    std::printf(
                        "case %d draw %d FAIL: n=%d temp=%g top_k=%d top_p=%g min_p=%g rep=%g bias=%zu "
                        "allowed=%zu mask=%d lp=%d proc=%d u=%.17g\n  ref token %d lp %.7g top",
                        c0 + r, draw, n, p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty,
                        p.logit_bias.size(), p.allowed.size(),
                        mask.empty() ? -1 : static_cast<int>(kinds[static_cast<size_t>(r)]), p.n_logprobs,
                        p.processed_logprobs ? 1 : 0, us[static_cast<size_t>(r)], ref.token, ref.logprob);
                    for (auto& [id, lp] : ref.top) std::printf(" %d:%.7g", id, lp);
                    std::printf("\n  gpu token %d lp %.7g top", got.token, got.logprob);
                    for (auto& [id, lp] : got.top) std::printf(" %d:%.7g", id, lp);
                    std::printf("\n");
                }
                h.add_output(ref.token);  // the device counted the token it sampled
            }
        }
        for (int r = 0; r < rows; ++r) sampler.close(kRows - 1 - r);
        (void)gpuFree(d);
        (void)gpuFree(rows_dev);
        (void)gpuFree(out_dev);
        (void)gpuFree(masks_dev);
    }
    (void)gpuStreamDestroy(s);
    std::printf("sampler check: %d cases, %d disagree (%d different tokens)\n", checked, fails, token_diffs);
    std::printf(
        "masked draws: %d (raw logprobs %d, processed logprobs %d, single token %d, none allowed %d); "
        "rows with a NaN logit: %d\n",
        masked, masked_raw, masked_proc, masked_one, masked_empty, nan_rows);
    return fails == 0 ? 0 : 1;
}
