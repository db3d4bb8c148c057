// loom-gpu-qgemm-test: the tensor-core decode GEMM (kernels.hpp qgemm, k_qgemm.cu) against a
// float64 product on the host, for every weight type it takes (F16, BF16, Q8_0, Q4_K, Q6_K) at
// odd sizes: 1, 3, 16, 17, 64, 65 and 255 activation rows; weight rows that are not a multiple
// of the 128-row tile (7 and 130); a last column tile that is partial (Q8_0 at 96 columns, the
// 16-bit types at 200) or whole (K-quants at 512: several K splits); F16 and F32 activations;
// y stored or added to; the Q4_K fragment kernel also with one K split over 24 and 40 blocks,
// and the Q6_K fragment kernel (q6_frag) at every row count, over 24 blocks in one split and
// over 40 blocks in its own splits, against f16(f16(d * sc) * (q - 32)). The exact kernel (split
// products: QgLow, the activations' parts and block sums made by to_f16 on the device) for Q4_K
// and Q6_K at 1-65 rows and over 40 blocks, against the unrounded product of the F32 dequantized
// weights (the CPU engine's) and F32 activations: |gpu - ref| <= 2e-6 * sum |x w| + 1e-6 (on the
// emulator at most 9.5e-7 of it, Q4_K's d sc q and dmin m terms being larger than w; without the
// activations' low parts, Q6_K's low parts or the sums' low parts, 1e-5 and more).
// Weights are random floats quantized with model/quant's quantizers and
// repacked into the device layout; the reference dequantizes the same blocks (quant.hpp) and
// rounds weights and activations to F16 as the kernel's operands are, so that only the F32
// summation order may differ: |gpu - ref| <= 1e-5 * sum |x w| + 1e-6. Q4_K with F16 activations
// runs both kernels: the fragment kernel (k_qgemm_q4.cu), whose reference rounds each weight as
// it does, f16(n * f16(d * sc) - f16(dmin * m)), and the tile kernel (q4_frag = false). Exit
// status 0 when every case agrees; the first disagreement of a case is printed.
//
// The emulator build (loom-gpu-qgemm-test-emu, CTest unit.gpu_qgemm_emu) checks the kernel's
// indexing and fragment layouts without a GPU; the CUDA build runs on the H200 in
// tools/gpu_check.sh's `qgemm` stage.
#include <algorithm>
#include <array>
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

float f16_round(float v) { return model::fp16_to_fp32(model::fp32_to_fp16(v)); }

// The weights of GGUF Q4_K rows (ggml-quants.c block_q4_K: d, dmin, scales[12], qs[128]) as the
// fragment kernel rounds them: scale f16(d * sc), min f16(dmin * m), weight f16(n * scale - min).
void q4k_f16_weights(const uint8_t* gg, int K, float* w) {
    auto h = [](const uint8_t* p) { return model::fp16_to_fp32(static_cast<uint16_t>(p[0] | (p[1] << 8))); };
    for (int b = 0; b < K / 256; ++b) {
        const uint8_t* blk = gg + 144 * b;
        const float d = h(blk), dmin = h(blk + 2);
        const uint8_t *q = blk + 4, *qs = blk + 16;
        for (int sb = 0; sb < 8; ++sb) {
            int sc, m;  // get_scale_min_k4
            if (sb < 4) {
                sc = q[sb] & 63, m = q[sb + 4] & 63;
            } else {
                sc = (q[sb + 4] & 0xF) | ((q[sb - 4] >> 6) << 4);
                m = (q[sb + 4] >> 4) | ((q[sb] >> 6) << 4);
            }
            const float scale = f16_round(d * static_cast<float>(sc)), mn = f16_round(dmin * static_cast<float>(m));
            for (int i = 0; i < 32; ++i) {
                const int byte = qs[32 * (sb / 2) + i], n = sb % 2 ? byte >> 4 : byte & 0xF;
                w[256 * b + 32 * sb + i] = f16_round(std::fmaf(static_cast<float>(n), scale, -mn));
            }
        }
    }
}

// The weights of GGUF Q6_K rows (ggml-quants.c block_q6_K: ql[128], qh[64], int8 scales[16],
// d) as the fragment kernel rounds them: with d * sc = hi + lo (F16 parts),
// f16(fma(q - 32, hi, f16((q - 32) * lo))).
void q6k_f16_weights(const uint8_t* gg, int K, float* w) {
    for (int b = 0; b < K / 256; ++b) {
        const uint8_t* blk = gg + 210 * b;
        const uint8_t *ql = blk, *qh = blk + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
        const float d = model::fp16_to_fp32(static_cast<uint16_t>(blk[208] | (blk[209] << 8)));
        for (int n = 0; n < 2; ++n)
            for (int l = 0; l < 32; ++l)
                for (int k = 0; k < 4; ++k) {  // dequantize_row_q6_K's q1..q4
                    const int lo = ql[64 * n + l + 32 * (k % 2)] >> (4 * (k / 2)) & 0xF;
                    const int q = lo | ((qh[32 * n + l] >> (2 * k)) & 3) << 4;
                    const float v = d * static_cast<float>(sc[8 * n + l / 16 + 2 * k]);
                    const float hi = f16_round(v), low = f16_round(v - hi);
                    const auto qm = static_cast<float>(q - 32);
                    w[256 * b + 128 * n + 32 * k + l] = f16_round(std::fmaf(qm, hi, f16_round(qm * low)));
                }
    }
}

struct Case {
    uint32_t type;
    const char* name;
    int N, K, M;
    bool x16, add;
    bool tiled = false;   // Q4_K with F16 x: the tile kernel instead of the fragment kernel
    int splits = 0;       // > 0: this many K splits instead of qgemm_splits's
    bool q6frag = false;  // Q6_K with F16 x: the fragment kernel instead of the tile kernel
    bool exact = false;   // Q4_K or Q6_K: the exact kernel (split products)
    bool big = false;     // activations whose 32-column sums overflow F16 (see run_case)
};

// Whether the case runs a fragment kernel (Q4_K with F16 x unless tiled, or q6frag).
bool frag(const Case& c) { return (c.type == kQ4_K && c.x16 && !c.tiled) || c.q6frag || c.exact; }

// The case's kernel, as qgemm picks it.
QgKernel kernel_of(const Case& c) { return c.exact ? QgKernel::Exact : frag(c) ? QgKernel::Frag : QgKernel::Tile; }

// A matrix of the case's shape (no data), for the split rule.
DevMatrix shape_of(uint32_t type, int N, int K) {
    DevMatrix m;
    m.type = type;
    m.rows = N;
    m.cols = K;
    m.row_bytes = device_row_bytes(type, K);
    return m;
}

// The case's kernel, for the printed lines.
const char* kernel_label(const Case& c) { return c.exact ? " exact" : c.tiled ? " tiled" : frag(c) ? " frag" : ""; }

// Runs one case; returns true when every output agrees with the reference. `worst` gets the
// largest |gpu - ref| / sum |x w| of the case.
bool run_case(const Case& c, std::mt19937_64& rng, double& worst) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int N = c.N, K = c.K, M = c.M;
    // Weights: random rows (a few large values so the scales vary), in GGUF layout.
    const size_t gg_row = model::row_bytes(c.type, K);
    std::vector<uint8_t> gg(gg_row * static_cast<size_t>(N));
    std::vector<float> w(static_cast<size_t>(N) * K), row(static_cast<size_t>(K));
    for (int n = 0; n < N; ++n) {
        for (int k = 0; k < K; ++k) row[k] = nd(rng) * (k % 97 == 0 ? 4.0f : 0.5f);
        model::quantize_row(c.type, row.data(), gg.data() + gg_row * n, K);
        if (c.exact) model::dequantize_row(c.type, gg.data() + gg_row * n, w.data() + static_cast<size_t>(n) * K, K);
        else if (frag(c) && c.type == kQ4_K) q4k_f16_weights(gg.data() + gg_row * n, K, w.data() + size_t(n) * K);
        else if (frag(c)) q6k_f16_weights(gg.data() + gg_row * n, K, w.data() + size_t(n) * K);
        else model::dequantize_row(c.type, gg.data() + gg_row * n, w.data() + static_cast<size_t>(n) * K, K);
    }
    const size_t dev_row = device_row_bytes(c.type, K);
    std::vector<uint8_t> dev(dev_row * static_cast<size_t>(N));
    repack_rows(c.type, gg.data(), N, K, dev.data());

    const int64_t ldx = (K + 63) / 64 * 64 + 8, ldy = N + 5;
    std::vector<float> x(static_cast<size_t>(M) * ldx, 0.0f), y0(static_cast<size_t>(M) * ldy);
    std::vector<uint16_t> xh(x.size(), 0);
    for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k) {
            // c.big: the first 32-column sub-block of each row near 3,000, so that its sum (about
            // 96,000) is past F16's range although every element is inside it.
            const float v = c.big && k < 32 ? 3000.0f + 100.0f * nd(rng) : nd(rng);
            x[m * ldx + k] = v;
            xh[m * ldx + k] = model::fp32_to_fp16(v);
        }
    for (auto& v : y0) v = nd(rng);

    uint8_t* dw = device_copy(dev);
    float* dx = device_copy(x);
    uint16_t* dxh = device_copy(xh);
    float* dy = device_copy(y0);
    DevMatrix dm;
    dm.type = c.type;
    dm.rows = N;
    dm.cols = K;
    dm.row_bytes = dev_row;
    dm.data = dw;
    const size_t pf = qgemm_partial_floats(dm, M);
    void* dpart = nullptr;
    if (pf) LOOM_GPU_CHECK(gpuMalloc(&dpart, pf * sizeof(float)));
    uint16_t *dxl = nullptr, *dsums = nullptr;
    if (c.exact) {  // the parts and block sums as the engine makes them: to_f16 over dx
        const int64_t ld_sums = K / 16 + 2;
        dxl = device_copy(xh);
        dsums = device_copy(std::vector<uint16_t>(static_cast<size_t>(M) * ld_sums, 0));
        to_f16(dx, ldx, K, M, dxh, ldx, nullptr, dxl, dsums, ld_sums);
        const QgLow low{dxl, dsums, ld_sums};
        qgemm(dm, nullptr, dxh, ldx, M, dy, ldy, c.add, static_cast<float*>(dpart), nullptr, true, c.splits, true,
              &low);
    } else {
        qgemm(dm, c.x16 ? nullptr : dx, c.x16 ? dxh : nullptr, ldx, M, dy, ldy, c.add, static_cast<float*>(dpart),
              nullptr, !c.tiled, c.splits, c.q6frag);
    }
    LOOM_GPU_CHECK(gpuDeviceSynchronize());
    std::vector<float> y(y0.size());
    LOOM_GPU_CHECK(gpuMemcpy(y.data(), dy, y.size() * sizeof(float), gpuMemcpyDeviceToHost));
    for (void* p : {static_cast<void*>(dw), static_cast<void*>(dx), static_cast<void*>(dxh), static_cast<void*>(dy),
                    dpart, static_cast<void*>(dxl), static_cast<void*>(dsums)})
        if (p) (void)gpuFree(p);

    bool ok = true;
    worst = 0.0;
    for (int m = 0; m < M && ok; ++m)
        for (int n = 0; n < ldy && ok; ++n) {
            const size_t i = static_cast<size_t>(m) * ldy + n;
            if (n >= N) {  // past the matrix: untouched
                if (y[i] != y0[i]) {
                    std::printf("FAIL %s N=%d K=%d M=%d: y[%d][%d] past N was written\n", c.name, N, K, M, m, n);
                    ok = false;
                }
                continue;
            }
            double ref = 0.0, mag = 0.0;
            for (int k = 0; k < K; ++k) {
                const float xv = x[m * ldx + k], wv = w[static_cast<size_t>(n) * K + k];
                const double p =
                    c.exact ? static_cast<double>(xv) * wv : static_cast<double>(f16_round(xv)) * f16_round(wv);
                ref += p;
                mag += std::fabs(p);
            }
            if (c.add) ref += y0[i];
            // (c.big: Q4_K's d sc q x and dmin m x terms, which cancel, are far larger than the
            // result there, and F32 sums err relative to them: 7.4e-6 of sum |x w| on the
            // emulator; sums that overflowed F16 gave NaN.)
            const double rel = c.big ? 5e-5 : c.exact ? 2e-6 : 1e-5;
            worst = std::max(worst, std::fabs(y[i] - ref) / std::max(mag, 1e-30));
            if (!(std::fabs(y[i] - ref) <= rel * mag + 1e-6 * (1.0 + std::fabs(ref)))) {
                std::printf(
                    "FAIL %s%s N=%d K=%d M=%d x16=%d add=%d: y[%d][%d] = %.7g, reference %.7g (sum |xw| %.4g)\n",
                    c.name, kernel_label(c), N, K, M, c.x16, c.add, m, n, y[i], ref, mag);
                ok = false;
            }
        }
    return ok;
}

// The split rule on Llama 3 8B's Q4_K_M shapes (q | k | v, the attention output, gate | up,
// down in Q4_K and Q6_K) at 16 and 64 rows, for 132 SMs, against the choices worked by hand from
// the rule's cost (kernels.hpp qgemm_splits). The rule before it asked for about 264 blocks and
// got 288 (6 or 9 splits: a second wave of 24 blocks) on all but gate | up. Returns the
// mismatches.
int check_split_rule() {
    if (qgemm_sm_count() != 132) {
        std::printf("split rule: %d SMs, the expectations are for 132; skipped\n", qgemm_sm_count());
        return 0;
    }
    struct Want {
        uint32_t type;
        int N, K, M;
        QgKernel kernel;
        int splits;
    };
    const Want wants[] = {
        {kQ4_K, 6144, 4096, 64, QgKernel::Frag, 4},  {kQ4_K, 4096, 4096, 64, QgKernel::Frag, 4},
        {kQ4_K, 28672, 4096, 64, QgKernel::Frag, 1}, {kQ4_K, 4096, 14336, 64, QgKernel::Frag, 8},
        {kQ6_K, 4096, 14336, 64, QgKernel::Frag, 4}, {kQ4_K, 6144, 4096, 16, QgKernel::Frag, 8},
        {kQ4_K, 4096, 4096, 16, QgKernel::Frag, 8},  {kQ4_K, 28672, 4096, 16, QgKernel::Frag, 1},
        {kQ4_K, 4096, 14336, 16, QgKernel::Frag, 8}, {kQ6_K, 4096, 14336, 16, QgKernel::Frag, 4},
        {kQ8_0, 4096, 4096, 64, QgKernel::Tile, 8},  {kQ4_K, 4096, 14336, 32, QgKernel::Exact, 4},
    };
    int bad = 0;
    for (const Want& w : wants) {
        const int got = qgemm_splits(shape_of(w.type, w.N, w.K), w.M, w.kernel);
        std::printf("split rule: type %u N=%d K=%d M=%d kernel %d: %d splits (want %d)\n", w.type, w.N, w.K, w.M,
                    static_cast<int>(w.kernel), got, w.splits);
        bad += got != w.splits;
    }
    return bad;
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";  // fewer, smaller cases (sanitizers)
    if (!qgemm_available()) {
        std::printf("qgemm: not available in this build\n");
        return 1;
    }
    std::vector<Case> cases;
    const struct {
        uint32_t type;
        const char* name;
        int K;
    } types[] = {{kF16, "f16", 200},   {kBF16, "bf16", 200}, {kQ8_0, "q8_0", 96},
                 {kQ8_0, "q8_0", 128}, {kQ4_K, "q4_K", 512}, {kQ6_K, "q6_K", 512}};
    const int Ms[] = {1, 3, 16, 17, 64, 65, 255};
    int i = 0;
    for (const auto& t : types)
        for (int M : Ms) {
            if (quick && M > 17 && t.type != kQ4_K) continue;
            if (M == 255 && t.type != kQ4_K && t.type != kF16) continue;  // the emulator's time
            const int N = (i % 3 == 0) ? 7 : 130;
            cases.push_back({t.type, t.name, N, t.K, M, i % 2 == 0, i % 4 < 2});
            // Q4_K with F16 activations: every row count through both kernels.
            if (t.type == kQ4_K) {
                cases.back().x16 = true;
                cases.push_back(cases.back());
                cases.back().tiled = true;
                cases.push_back({t.type, t.name, N, t.K, M, false, i % 4 < 2});
            }
            // Q6_K with F16 activations: also through the fragment kernel (q6_frag).
            if (t.type == kQ6_K) {
                cases.push_back({t.type, t.name, N, t.K, M, true, i % 4 >= 2});
                cases.back().q6frag = true;
            }
            ++i;
        }
    // The fragment kernel at one block a row (no split) and at 40 blocks (16 splits of 2-3
    // blocks: both register sets, an odd count).
    for (const auto& [K, M, N] :
         {std::array<int, 3>{256, 5, 130}, std::array<int, 3>{10240, 3, 7}, std::array<int, 3>{10240, 17, 130}})
        cases.push_back({kQ4_K, "q4_K", N, K, M, true, M == 3});
    // One split (qgemm's splits argument) over all of a row's 24 or 40 blocks: the two register
    // sets alternate many times in one block; 40 rows take the 48-row block, its last 8-row
    // group partial (48 rows, below, fill it).
    for (const auto& [K, M, N] : {std::array<int, 3>{6144, 9, 130}, std::array<int, 3>{10240, 40, 7}})
        cases.push_back({kQ4_K, "q4_K", N, K, M, true, M == 9, false, 1});
    cases.push_back({kQ4_K, "q4_K", 130, 512, 48, true, false});
    // The Q6_K fragment kernel the same ways: one split over 24 blocks, and its own splits over 40.
    for (const auto& [K, M, N, sp] : {std::array<int, 4>{6144, 9, 130, 1}, std::array<int, 4>{10240, 40, 7, 0}})
        cases.push_back({kQ6_K, "q6_K", N, K, M, true, M == 9, false, sp, true});
    // The exact kernel (split products): 2-row tiles (1-16 rows) and 4 (17-32 and beyond, several
    // blocks of 32 rows), partial tiles, weight rows past a 128-row block, one split over 24
    // blocks, its own splits over 40.
    for (uint32_t type : {kQ4_K, kQ6_K}) {
        const char* name = type == kQ4_K ? "q4_K" : "q6_K";
        for (int M : {1, 3, 16, 17, 33, 64, 65}) {
            if (quick && M > 17) continue;
            cases.push_back({type, name, M % 2 ? 130 : 7, 512, M, true, M % 4 == 1});
            cases.back().exact = true;
        }
        cases.push_back({type, name, 130, 6144, 9, true, false, false, 1});
        cases.back().exact = true;
        cases.push_back({type, name, 7, 10240, 40, true, true});
        cases.back().exact = true;
    }
    // to_f16's grid-stride loop past one pass (16,384 columns), and sums past F16's range.
    cases.push_back({kQ4_K, "q4_K", 7, 16896, 3, true, false});
    cases.back().exact = true;
    cases.push_back({kQ4_K, "q4_K", 130, 512, 5, true, false});
    cases.back().exact = cases.back().big = true;
    std::mt19937_64 rng(20261203);
    int bad = 0;
    for (const Case& c : cases) {
        double worst = 0.0;
        if (!run_case(c, rng, worst)) {
            ++bad;
            continue;
        }
        const int splits = c.splits > 0 ? c.splits : qgemm_splits(shape_of(c.type, c.N, c.K), c.M, kernel_of(c));
        std::printf("ok %s%s N=%d K=%d M=%d x16=%d add=%d splits=%d worst %.2e of sum |xw|\n", c.name, kernel_label(c),
                    c.N, c.K, c.M, c.x16, c.add, splits, worst);
    }
    std::printf("qgemm: %zu cases, %d disagree\n", cases.size(), bad);
    bad += check_split_rule();
    return bad ? 1 : 0;
}
