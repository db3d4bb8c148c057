// loom-gpu-matvec-test: the decode matvec on Q4_K weights (kernels.hpp matvec) against a float64
// product on the host, through both of its kernels: the tensor-core one (k_matvec_q4.cu,
// MatvecArgs::q4_mma) and the batched F32 one (q4_mma = false). Odd sizes: 1-4 activation
// vectors; weight rows that are not a multiple of the 16-row tile (7, 130, 255); rows of 1, 2, 5
// and 17 Q4_K blocks (fewer blocks than the kernel's 4 warps, and a count that leaves warps a
// block short); plain stores, residual adds, the fused RMSNorm, and SwiGLU over two segments;
// activations of ordinary size, tiny (1e-7) and large (3e3), so that the kernel's power-of-two
// scaling is exercised at both ends of F16's range. Weights are random floats quantized with
// model/quant's Q4_K quantizer and repacked into the device layout; the reference dequantizes the
// same blocks exactly (quant.hpp) and sums in double: |gpu - ref| <= 2e-6 * sum |x w| + 1e-6
// |ref| + 1e-30 (the high and low F16 parts of each activation carry about 22 bits). Exit status
// 0 when every case agrees; the first disagreement of a case is printed.
//
// The emulator build (loom-gpu-matvec-test-emu, CTest unit.gpu_matvec_emu) checks the kernels'
// indexing and fragment layouts without a GPU; the CUDA build runs in tools/gpu_check.sh's
// `qgemm` stage.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/gpu/kernels.hpp"
#include "model/quant/quant.hpp"

using namespace loom;
using namespace loom::gpu;

namespace {

template <class T>
T* device_copy(const std::vector<T>& h) {
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, h.size() * sizeof(T) + 16));
    LOOM_GPU_CHECK(gpuMemcpy(p, h.data(), h.size() * sizeof(T), gpuMemcpyHostToDevice));
    return static_cast<T*>(p);
}

struct Case {
    int N, K, nb;
    MvMode mode;
    bool norm;
    float xscale;
};

// One case through one kernel; true when every output agrees with the reference.
bool run_case(const Case& c, bool mma, std::mt19937_64& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int N = c.N, K = c.K, nb = c.nb, nseg = c.mode == MvMode::SwiGLU ? 2 : 1;
    const size_t gg_row = model::row_bytes(kQ4_K, K), dev_row = device_row_bytes(kQ4_K, K);
    std::vector<std::vector<float>> w(nseg, std::vector<float>(static_cast<size_t>(N) * K));
    std::vector<std::vector<uint8_t>> dev(nseg, std::vector<uint8_t>(dev_row * N));
    std::vector<uint8_t> gg(gg_row * N);
    std::vector<float> row(K);
    for (int s = 0; s < nseg; ++s) {
        for (int n = 0; n < N; ++n) {
            for (int k = 0; k < K; ++k) row[k] = nd(rng) * (k % 97 == 0 ? 4.0f : 0.5f);
            model::quantize_row(kQ4_K, row.data(), gg.data() + gg_row * n, K);
            model::dequantize_row(kQ4_K, gg.data() + gg_row * n, w[s].data() + static_cast<size_t>(n) * K, K);
        }
        repack_rows(kQ4_K, gg.data(), N, K, dev[s].data());
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
    a.type = kQ4_K;
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
    a.q4_mma = mma;
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
                    "FAIL %s N=%d K=%d nb=%d %s norm=%d xscale=%g: y[%d][%d] = %.8g, reference %.8g (sum |xw| %.4g)\n",
                    mma ? "mma" : "f32", N, K, nb, mode, c.norm ? 1 : 0, c.xscale, b, n, got, ref, mag);
                return false;
            }
        }
    }
    return true;
}

}  // namespace

int main() {
    std::vector<Case> cases;
    const int Ns[] = {7, 130, 255, 16};
    const int Ks[] = {256, 512, 1280, 4352};
    const MvMode modes[] = {MvMode::Store, MvMode::Add, MvMode::SwiGLU};
    const float scales[] = {1.0f, 1e-7f, 3e3f};
    int i = 0;
    for (int nb = 1; nb <= 4; ++nb)
        for (int K : Ks) {
            const MvMode m = modes[i % 3];
            cases.push_back({Ns[i % 4], K, nb, m, i % 2 == 0, scales[(i / 3) % 3]});
            ++i;
        }
    std::mt19937_64 rng(20261205);
    int bad = 0, n = 0;
    for (const Case& c : cases)
        for (bool mma : {true, false}) {
            ++n;
            if (!run_case(c, mma, rng)) ++bad;
        }
    std::printf("matvec q4_K: %d cases, %d disagree\n", n, bad);
    return bad ? 1 : 0;
}
