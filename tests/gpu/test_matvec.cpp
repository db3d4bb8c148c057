// loom-gpu-matvec-test: the decode matvec (kernels.hpp matvec, k_matvec.cu's batched kernel)
// against a float64 product on the host, for F16, BF16, Q8_0, Q4_K and Q6_K weights at odd
// sizes: 1-4 activation vectors (the 1-, 2- and 4-vector instantiations; one quantized vector
// through the single-vector kernel, k_matvec1.cu, on the device's grid and on 2 blocks whose
// warps loop over the rows, and through the batched one), and 3
// through the fixed 8-vector tiling (fixed_tiling); weight rows that are not a multiple of the kernel's rows
// a block (7, 130, 255); rows of one to 17 blocks, and 16-bit rows of 200 columns (a partial last chunk); plain stores,
// residual adds, the fused RMSNorm, and SwiGLU over two segments; activations of ordinary size,
// tiny (1e-7) and large (3e3). Weights are random floats quantized with model/quant's quantizers
// and repacked into the device layout; the reference dequantizes the same rows exactly
// (quant.hpp) and sums in double: |gpu - ref| <= 2e-6 * sum |x w| + 1e-6 |ref| + 1e-30. Exit
// status 0 when every case agrees; the first disagreement of a case is printed.
//
// The emulator build (loom-gpu-matvec-test-emu, CTest unit.gpu_matvec_emu) checks the kernel's
// indexing without a GPU; the CUDA build runs in tools/gpu_check.sh's `qgemm` stage.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/gpu/kernels.hpp"
#include "tests/gpu/device_copy.hpp"
#include "model/quant/quant.hpp"

using namespace loom;
using namespace loom::gpu;
using loom::gpu::test::device_copy;

namespace {

struct Case {
    uint32_t type;
    const char* name;
    int N, K, nb;
    MvMode mode;
    bool norm;
    float xscale;
};

// One case (fixed: the 8-vector tiling whatever nb; single: quantized weights through the
// single-vector kernel, k_matvec1.cu, where it takes the case); true when every output agrees
// with the reference.
bool run_case(const Case& c, bool fixed, bool single, int max_blocks, std::mt19937_64& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int N = c.N, K = c.K, nb = c.nb, nseg = c.mode == MvMode::SwiGLU ? 2 : 1;
    const size_t gg_row = model::row_bytes(c.type, K), dev_row = device_row_bytes(c.type, K);
    std::vector<std::vector<float>> w(nseg, std::vector<float>(static_cast<size_t>(N) * K));
    std::vector<std::vector<uint8_t>> dev(nseg, std::vector<uint8_t>(dev_row * N));
    std::vector<uint8_t> gg(gg_row * N);
    std::vector<float> row(K);
    for (int s = 0; s < nseg; ++s) {
        for (int n = 0; n < N; ++n) {
            for (int k = 0; k < K; ++k) row[k] = nd(rng) * (k % 97 == 0 ? 4.0f : 0.5f);
            model::quantize_row(c.type, row.data(), gg.data() + gg_row * n, K);
            model::dequantize_row(c.type, gg.data() + gg_row * n, w[s].data() + static_cast<size_t>(n) * K, K);
        }
        repack_rows(c.type, gg.data(), N, K, dev[s].data());
    }
    const int64_t ldx = K + 4, ldy = N + 3;
    std::vector<float> x(static_cast<size_t>(nb) * ldx, 0.0f), nw(K), y0(static_cast<size_t>(nb) * ldy);
    for (auto& v : x) v = nd(rng) * c.xscale;
    for (auto& v : nw) v = 0.5f + 0.1f * nd(rng);
    for (auto& v : y0) v = nd(rng);

    std::vector<uint8_t*> dw;
    for (int s = 0; s < nseg; ++s) dw.push_back(device_copy(dev[s]));
    float* dx = device_copy(x);
    float* dnw = device_copy(nw);
    float* dy = device_copy(y0);
    MatvecArgs a;
    a.type = c.type;
    a.cols = K;
    a.row_bytes = dev_row;
    a.nseg = nseg;
    for (int s = 0; s < nseg; ++s) a.seg[s] = MvSeg{dw[s], N, s == 0 ? dy : nullptr};
    a.x = dx;
    a.x_stride = ldx;
    a.y_stride = ldy;
    a.nb = nb;
    a.mode = c.mode;
    a.norm_w = c.norm ? dnw : nullptr;
    a.norm_eps = 1e-5f;
    a.fixed_tiling = fixed;
    a.single = single;
    a.max_blocks = max_blocks;
    matvec(a, nullptr);
    LOOM_GPU_CHECK(gpuDeviceSynchronize());
    std::vector<float> y(y0.size());
    LOOM_GPU_CHECK(gpuMemcpy(y.data(), dy, y.size() * sizeof(float), gpuMemcpyDeviceToHost));
    for (uint8_t* p : dw) (void)gpuFree(p);
    for (float* p : {dx, dnw, dy}) (void)gpuFree(p);

    const char* mode = c.mode == MvMode::SwiGLU ? "swiglu" : c.mode == MvMode::Add ? "add" : "store";
    for (int b = 0; b < nb; ++b) {
        std::vector<double> xs(K);
        double ss = 0.0;
        for (int k = 0; k < K; ++k) ss += static_cast<double>(x[b * ldx + k]) * x[b * ldx + k];
        const double sc = c.norm ? 1.0 / std::sqrt(ss / K + 1e-5) : 1.0;
        for (int k = 0; k < K; ++k) xs[k] = x[b * ldx + k] * (c.norm ? sc * nw[k] : 1.0);
        for (int n = 0; n < ldy; ++n) {
            const size_t i = static_cast<size_t>(b) * ldy + n;
            const float got = y[i];
            double ref = y0[i], mag = 0.0;
            if (n < N) {
                double d[2] = {0.0, 0.0};
                for (int s = 0; s < nseg; ++s)
                    for (int k = 0; k < K; ++k) {
                        const double p = xs[k] * w[s][static_cast<size_t>(n) * K + k];
                        d[s] += p;
                        mag += std::fabs(p);
                    }
                if (c.mode == MvMode::SwiGLU) {
                    ref = d[0] / (1.0 + std::exp(-d[0])) * d[1];
                    mag *= 1.0 + std::fabs(d[1]) + std::fabs(d[0]);
                } else {
                    ref = c.mode == MvMode::Add ? ref + d[0] : d[0];
                }
            }
            const bool ok = n < N ? std::fabs(got - ref) <= 2e-6 * mag + 1e-6 * std::fabs(ref) + 1e-30 : got == y0[i];
            if (!ok) {
                std::printf(
                    "FAIL %s%s%s N=%d K=%d nb=%d %s norm=%d xscale=%g: y[%d][%d] = %.8g, reference %.8g (sum "
                    "|xw| %.4g)\n",
                    c.name, fixed ? " fixed" : "", single ? " single" : "", N, K, nb, mode, c.norm ? 1 : 0, c.xscale, b,
                    n, got, ref, mag);
                return false;
            }
        }
    }
    return true;
}

}  // namespace

int main() {
    std::vector<Case> cases;
    const struct {
        uint32_t type;
        const char* name;
        int K[4];
    } types[] = {{kQ4_K, "q4_K", {256, 512, 1280, 4352}},
                 {kQ6_K, "q6_K", {256, 768, 4352, 512}},
                 {kQ8_0, "q8_0", {32, 96, 4352, 1024}},
                 {kF16, "f16", {200, 64, 1000, 4352}},
                 {kBF16, "bf16", {200, 96, 520, 2048}}};
    const int Ns[] = {7, 130, 255, 16};
    const MvMode modes[] = {MvMode::Store, MvMode::Add, MvMode::SwiGLU};
    const float scales[] = {1.0f, 1e-7f, 3e3f};
    int i = 0;
    for (const auto& t : types)
        for (int nb : {1, 2, 3, 4})
            for (int K : t.K) {
                if ((K + i) % 3 != 0 && nb > 2) continue;  // the emulator's time
                cases.push_back({t.type, t.name, Ns[i % 4], K, nb, modes[i % 3], i % 2 == 0, scales[(i / 3) % 3]});
                ++i;
            }
    std::mt19937_64 rng(20261205);
    int bad = 0, n = 0;
    for (const Case& c : cases)
        for (int v = 0; v < 4; ++v) {
            const bool fixed = v == 1, single = v >= 2;
            if (fixed && c.nb != 3) continue;  // the 8-vector tiling with 3 of its 8 used
            // One quantized vector: the batched kernel (v = 0) and the single-vector one, on the
            // device's grid (v = 2) and on 2 blocks whose warps loop over the row groups (v = 3).
            if (single && (c.nb > 1 || (c.type != kQ4_K && c.type != kQ6_K && c.type != kQ8_0))) continue;
            ++n;
            if (!run_case(c, fixed, single, v == 3 ? 2 : 0, rng)) ++bad;
        }
    std::printf("matvec: %d cases, %d disagree\n", n, bad);
    return bad ? 1 : 0;
}
