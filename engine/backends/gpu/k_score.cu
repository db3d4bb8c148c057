// Prompt logprobs on the device (the PLP lines): for each scored row, the raw logprob of the
// prompt's next token over the whole vocabulary and the top-k raw pairs, as engine/sampler.cpp's
// score_token computes them (sums of exponentials in double).
#include "engine/backends/gpu/k_sample.cuh"

namespace loom::gpu {
namespace {

// Prompt logprobs: one block per scored row.
__global__ void __launch_bounds__(kST)
    score_kernel(const float* logits, int64_t ld, int n, const ScoreRow* rows, SampleOut* out) {
    __shared__ Cand shc[kST / 32 + 1];
    __shared__ float shf[kST / 32];
    __shared__ double shd[kST / 32];
    __shared__ int s_nan;
    const int t = static_cast<int>(threadIdx.x), r = static_cast<int>(blockIdx.x);
    const ScoreRow sr = rows[r];
    const float* row = logits + sr.logits_row * ld;
    const int k = sr.k;
    if (t == 0) s_nan = 0;
    __syncthreads();
    float m = -INFINITY;
    bool nan = false;
    for (int i = t; i < n; i += kST) {
        const float v = row[i];
        nan |= v != v;
        m = fmaxf(m, v);
    }
    if (nan) s_nan = 1;
    m = block_max(m, shf);
    double s = 0;
    for (int i = t; i < n; i += kST) s += exp(static_cast<double>(row[i]) - m);
    s = block_sum(s, shd);
    const double lz = m + log(s);
    SampleOut& o = out[r];
    Cand prev{0.0f, -1};
    for (int j = 0; j < k; ++j) {
        Cand mine{0.0f, -1};
        for (int i = t; i < n; i += kST) {
            const Cand x{row[i], i};
            if ((prev.id < 0 || better(prev, x)) && better(x, mine)) mine = x;
        }
        prev = block_best(mine, shc);
        if (t == 0) o.top_id[j] = prev.id, o.top_lp[j] = static_cast<float>(prev.v - lz);
    }
    if (t == 0) {
        o.token = sr.target;
        o.logprob = static_cast<float>(row[sr.target] - lz);
        o.n_top = k;
        o.nan = s_nan;
    }
}

}  // namespace

void score_rows(const float* logits, int64_t ld, int n_vocab, const ScoreRow* rows, int n, SampleOut* out,
                gpuStream_t s) {
    if (n <= 0) return;
    auto kk = score_kernel;
    LOOM_LAUNCH(kk, static_cast<unsigned>(n), kST, 0, s, logits, ld, n_vocab, rows, out);
    LOOM_GPU_CHECK_LAUNCH();
}

}  // namespace loom::gpu
