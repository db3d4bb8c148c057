// loom-bench-matvec: speed of the CPU dot kernels (engine/backends/cpu/matvec.hpp) per weight type.
//
// Builds one random matrix of `rows` x `n` weights (default 4096 x 4096), stores it in
// every type loom can decode (the IQ1/IQ2/IQ3 types' simple quantizer takes seconds here), and times a full matrix-vector product (dot_row over
// all rows, one thread) and a prefill product (dot_row_multi with --vecs vectors).
// Reports GB/s of weight bytes read, G weights/s, and the speed of each type relative
// to the F32 kernel measured in the same run (time of F32 / time of the type, per
// matrix product: >1 means faster than F32).
//
// Usage: loom-bench-matvec [--n N] [--rows R] [--vecs V] [--seconds S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/cpu/matvec.hpp"
#include "model/gguf/ggml_types.hpp"
#include "model/quant/quant.hpp"

namespace {

using loom::model::GgmlType;
using Clock = std::chrono::steady_clock;

struct Result {
    double seconds_per_product = 0;  // one full matrix-vector product
    double seconds_per_multi = 0;    // one full matrix x vecs product
};

volatile float g_sink = 0;

// Runs fn for about `budget` seconds in five rounds and returns the best round's
// seconds per call (the box is shared: the best round is the least disturbed one).
template <class Fn>
double time_it(Fn&& fn, double budget) {
    fn();  // warm-up: page in the weights
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
        int reps = 0;
        const auto t0 = Clock::now();
        double el = 0;
        do {
            fn();
            ++reps;
            el = std::chrono::duration<double>(Clock::now() - t0).count();
        } while (el < budget / 5);
        best = std::min(best, el / reps);
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t n = 4096, rows = 4096, vecs = 8;
    double budget = 0.5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--n") n = std::atoll(argv[i + 1]);
        else if (a == "--rows") rows = std::atoll(argv[i + 1]);
        else if (a == "--vecs") vecs = std::atoll(argv[i + 1]);
        else if (a == "--seconds") budget = std::atof(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: %s [--n N] [--rows R] [--vecs V] [--seconds S]\n", argv[0]);
            return 2;
        }
    }
    if (n <= 0 || n % 256 != 0 || rows <= 0 || vecs <= 0) {
        std::fprintf(stderr, "--n must be a positive multiple of 256; --rows and --vecs positive\n");
        return 2;
    }

    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> w(static_cast<size_t>(n * rows));
    for (float& v : w) v = nd(rng);
    std::vector<float> xs(static_cast<size_t>(n * vecs));
    for (float& v : xs) v = nd(rng) * 50.0f;
    std::vector<float> out(static_cast<size_t>(rows * vecs));

    const GgmlType types[] = {GgmlType::F32,     GgmlType::F16,    GgmlType::BF16,  GgmlType::Q8_0,    GgmlType::Q4_0,
                              GgmlType::Q4_1,    GgmlType::Q5_0,   GgmlType::Q5_1,  GgmlType::Q2_K,    GgmlType::Q3_K,
                              GgmlType::Q4_K,    GgmlType::Q5_K,   GgmlType::Q6_K,  GgmlType::IQ4_NL,  GgmlType::IQ4_XS,
                              GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S,
                              GgmlType::IQ1_S,   GgmlType::IQ1_M};
    std::printf("matrix %lld x %lld, one thread; multi = dot_row_multi with %lld vectors\n",
                static_cast<long long>(rows), static_cast<long long>(n), static_cast<long long>(vecs));
    std::printf("%-7s %9s %9s %9s %9s %11s %10s\n", "type", "MB", "GB/s", "Gw/s", "vs f32", "multi Gw/s", "multi vs");
    Result f32;
    for (GgmlType gt : types) {
        const auto type = static_cast<uint32_t>(gt);
        const uint64_t rb = loom::model::row_bytes(type, n);
        std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) loom::model::quantize_row(type, w.data() + r * n, q.data() + r * rb, n);
        Result res;
        res.seconds_per_product = time_it(
            [&] {
                float s = 0;
                for (int64_t r = 0; r < rows; ++r) s += loom::cpu::dot_row(type, q.data() + r * rb, xs.data(), n);
                g_sink = s;
            },
            budget);
        res.seconds_per_multi = time_it(
            [&] {
                for (int64_t r = 0; r < rows; ++r)
                    loom::cpu::dot_row_multi(type, q.data() + r * rb, n, xs.data(), n, vecs, out.data() + r, rows);
                g_sink = out[0];
            },
            budget);
        if (gt == GgmlType::F32) f32 = res;
        const double bytes = static_cast<double>(q.size());
        const double weights = static_cast<double>(n * rows);
        std::printf("%-7s %9.1f %9.2f %9.2f %8.2fx %11.2f %9.2fx\n", loom::model::type_name(type).c_str(), bytes / 1e6,
                    bytes / res.seconds_per_product / 1e9, weights / res.seconds_per_product / 1e9,
                    f32.seconds_per_product / res.seconds_per_product,
                    weights * static_cast<double>(vecs) / res.seconds_per_multi / 1e9,
                    f32.seconds_per_multi / res.seconds_per_multi);
        std::fflush(stdout);
    }
    return 0;
}
