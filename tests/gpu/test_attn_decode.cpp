// loom-gpu-attn-test: decode attention over the paged KV cache (kernels.hpp attn_decode,
// k_attn_decode.cu) against a float64 softmax attention on the host, over the values the pool
// holds (F16-rounded for the F16 pool), for every kernel attn_decode picks:
// - the page kernel: head_dim 32, 64 and 128 with 1, 2, 4, 7 and 8 query heads a KV head, spans
//   of 64, 256 and 1,024 positions (one KV block a warp, several, and more warps than blocks);
// - the fast kernel (head_dim 16 and 96) and the general split kernel (head_dim 8);
// each with the F16 and the F32 pool, on one step of 5 query rows whose contexts end inside a KV
// block, on its first and last position, across several splits, and at position 0 (and again
// with every context inside one split); every row's block table a random permutation of the
// pool's blocks, in the second of two layers; NaN wherever no row's context reaches.
// Checks: |gpu - ref| <= 2e-6 * max |v| + 1e-7 (F32 sums of about head_dim and context terms),
// and, bitwise, the same output with twice the splits (a split beyond every context: the
// combine instead of the split kernel's own normalisation, and a query's result independent of
// `splits`). Exit status 0 when every case agrees; the worst error of each case is printed.
//
// The emulator build (loom-gpu-attn-test-emu, CTest unit.gpu_attn_emu; every third case with
// --quick, under the sanitizers) checks the indexing, the shuffles, the fragments and the merges
// without a GPU; the CUDA build runs on the GPU machine (tools/gpu_check.sh qgemm).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/backends/gpu/kernels.hpp"
#include "model/quant/quant.hpp"
#include "tests/gpu/device_copy.hpp"

using namespace loom;
using namespace loom::gpu;
using loom::gpu::test::device_copy;

namespace {

struct Case {
    int hd, n_head, n_head_kv;
    bool f16;
    int span;     // 0: attn_decode_span's for `rows`
    int rows;     // the row count attn_decode_span sees
    bool short_;  // every context inside one split: the split kernel's own output against the combine's
};

constexpr int kLayers = 2, kLayer = 1, kBlock = 16;

bool run_case(const Case& c, std::mt19937_64& rng) {
    AttnShape sh;
    sh.n_head = c.n_head, sh.n_head_kv = c.n_head_kv, sh.head_dim = c.hd, sh.rope_dim = c.hd;
    sh.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    const int span = c.span ? c.span : attn_decode_span(sh, c.rows, 0, false);
    // Contexts (last positions) of the step's rows: inside a block, a block's first and last
    // position, several splits, position 0.
    const std::vector<int> pos = c.short_ ? std::vector<int>{37, 16, span - 1, 0, span / 2}
                                          : std::vector<int>{37, 16, 2 * span + 15, 0, span + 40};
    const int nq = static_cast<int>(pos.size());
    const int max_pos = *std::max_element(pos.begin(), pos.end());
    int splits = 1;
    while (int64_t{splits} * span <= max_pos) splits *= 2;
    const int per_row = max_pos / kBlock + 1;  // blocks each row's table holds

    engine::KvLayout lay;
    lay.block_tokens = kBlock, lay.kv_dim = sh.kv_dim(), lay.n_blocks = int64_t{per_row} * nq + 3;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    const size_t n_pool = static_cast<size_t>(lay.pool_elems(kLayers));
    std::vector<float> pool(n_pool);
    for (auto& v : pool) v = ud(rng);
    // Where no row's context reaches, NaN: a kernel that reads past a context shows.
    std::vector<char> used(n_pool, 0);
    std::vector<int32_t> blocks(static_cast<size_t>(lay.n_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<int32_t> tables(static_cast<size_t>(per_row) * nq);
    std::vector<RowDesc> rd(static_cast<size_t>(nq));
    for (int b = 0; b < nq; ++b) {
        rd[b].pos = pos[b], rd[b].table = b * per_row;
        for (int j = 0; j < per_row; ++j) tables[static_cast<size_t>(b * per_row + j)] = blocks[b * per_row + j];
        for (int p = 0; p <= pos[b]; ++p)
            for (int v = 0; v < 2; ++v) {
                const int64_t off = lay.offset_at(kLayer, tables.data() + rd[b].table, p, v);
                std::fill(used.begin() + off, used.begin() + off + lay.kv_dim, 1);
            }
    }
    for (size_t i = 0; i < n_pool; ++i)
        if (!used[i]) pool[i] = NAN;
    if (c.f16)
        for (auto& v : pool) v = model::fp16_to_fp32(model::fp32_to_fp16(v));
    const int q_ld = c.n_head * c.hd + 8;
    std::vector<float> q(static_cast<size_t>(nq) * q_ld);
    for (auto& v : q) v = 3.0f * nd(rng);  // scores of a few units: peaked softmax rows

    // float64 reference.
    std::vector<double> ref(static_cast<size_t>(nq) * c.n_head * c.hd);
    const int group = c.n_head / c.n_head_kv;
    for (int b = 0; b < nq; ++b)
        for (int h = 0; h < c.n_head; ++h) {
            const int kvh = h / group;
            std::vector<double> s(static_cast<size_t>(pos[b] + 1));
            for (int p = 0; p <= pos[b]; ++p) {
                const int64_t off = lay.offset_at(kLayer, tables.data() + rd[b].table, p, 0) + int64_t{kvh} * c.hd;
                double d = 0.0;
                for (int i = 0; i < c.hd; ++i) d += double{q[b * q_ld + h * c.hd + i]} * pool[off + i];
                s[p] = d * sh.scale;
            }
            const double m = *std::max_element(s.begin(), s.end());
            double l = 0.0;
            for (auto& v : s) l += (v = std::exp(v - m));
            for (int i = 0; i < c.hd; ++i) {
                double o = 0.0;
                for (int p = 0; p <= pos[b]; ++p)
                    o +=
                        s[p] * pool[lay.offset_at(kLayer, tables.data() + rd[b].table, p, 1) + int64_t{kvh} * c.hd + i];
                ref[(static_cast<size_t>(b) * c.n_head + h) * c.hd + i] = o / l;
            }
        }

    PagedKv kv;
    kv.layout = lay, kv.f16 = c.f16;
    std::vector<uint16_t> pool16;
    if (c.f16) {
        pool16.resize(n_pool);
        for (size_t i = 0; i < n_pool; ++i) pool16[i] = model::fp32_to_fp16(pool[i]);
        kv.pool = device_copy(pool16);
    } else {
        kv.pool = device_copy(pool);
    }
    int32_t* d_tables = device_copy(tables);
    kv.tables = d_tables;
    RowDesc* d_rd = device_copy(rd);
    float* d_q = device_copy(q);
    const int att_ld = c.n_head * c.hd + 4;
    std::vector<float> part(static_cast<size_t>(nq) * 2 * splits * c.n_head * (c.hd + 2), 0.0f);
    float* d_part = device_copy(part);
    std::vector<float> att(static_cast<size_t>(nq) * att_ld, 0.0f), att2 = att;
    float* d_att = device_copy(att);
    // Twice the splits: the last one past every context.
    attn_decode(d_q, q_ld, d_rd, nq, kLayer, sh, kv, span, 2 * splits, d_part, d_att, att_ld, nullptr);
    LOOM_GPU_CHECK(gpuMemcpy(att2.data(), d_att, att2.size() * sizeof(float), gpuMemcpyDeviceToHost));
    attn_decode(d_q, q_ld, d_rd, nq, kLayer, sh, kv, span, splits, d_part, d_att, att_ld, nullptr);
    LOOM_GPU_CHECK(gpuMemcpy(att.data(), d_att, att.size() * sizeof(float), gpuMemcpyDeviceToHost));
    for (void* p : {kv.pool, static_cast<void*>(d_tables), static_cast<void*>(d_rd), static_cast<void*>(d_q),
                    static_cast<void*>(d_part), static_cast<void*>(d_att)})
        LOOM_GPU_CHECK(gpuFree(p));

    double worst = 0.0;
    bool ok = true;
    for (int b = 0; b < nq && ok; ++b)
        for (int h = 0; h < c.n_head && ok; ++h)
            for (int i = 0; i < c.hd; ++i) {
                const float got = att[static_cast<size_t>(b) * att_ld + h * c.hd + i];
                const double want = ref[(static_cast<size_t>(b) * c.n_head + h) * c.hd + i];
                const double err = std::fabs(got - want);
                worst = std::max(worst, std::isnan(err) ? INFINITY : err);
                if (!(err <= 2e-6 + 1e-7)) {  // |v| <= 1
                    std::printf("  row %d (pos %d) head %d dim %d: gpu %.9g ref %.9g\n", b, pos[b], h, i, got, want);
                    ok = false;
                    break;
                }
                if (std::memcmp(&got, &att2[static_cast<size_t>(b) * att_ld + h * c.hd + i], sizeof got) != 0) {
                    std::printf("  row %d (pos %d) head %d dim %d: %.9g with %d splits, %.9g with %d\n", b, pos[b], h,
                                i, got, splits, att2[static_cast<size_t>(b) * att_ld + h * c.hd + i], 2 * splits);
                    ok = false;
                    break;
                }
            }
    std::printf("%s head_dim %3d heads %2d/%d %s span %4d splits %d: worst %.3g\n", ok ? "ok  " : "FAIL", c.hd,
                c.n_head, c.n_head_kv, c.f16 ? "f16" : "f32", span, splits, worst);
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    // --quick (the sanitizer build, whose emulator runs about ten times slower): every third case.
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    std::vector<Case> cases;
    // Page kernel shapes, each span; the fast kernel's (head_dim 16, 96) and the split kernel's
    // (head_dim 8) at attn_decode_span's spans for 1 and 64 rows.
    const int page[][3] = {{32, 8, 4}, {64, 4, 4}, {64, 14, 2}, {128, 32, 8}, {128, 8, 1}};
    int i = 0;
    for (const auto& s : page)
        for (int span : {64, 256, 1024})
            for (bool f16 : {true, false})
                if ((i++ + span / 64) % 2 == 0 || s[0] == 128)
                    for (bool short_ : {false, true}) cases.push_back({s[0], s[1], s[2], f16, span, 1, short_});
    const int other[][3] = {{16, 4, 2}, {96, 8, 2}, {8, 8, 2}};
    for (const auto& s : other)
        for (int rows : {1, 128})
            for (bool f16 : {true, false}) cases.push_back({s[0], s[1], s[2], f16, 0, rows, rows == 1});
    std::mt19937_64 rng(20261206);
    int bad = 0;
    // attn_decode_span's rule on Llama 3's shape (8 KV heads of 4 query heads, head_dim 128).
    AttnShape l3;
    l3.n_head = 32, l3.n_head_kv = 8, l3.head_dim = 128;
    const int want[][4] = {{1, 200, 0, 64},    {1, 8000, 0, 64},    {1, 30000, 0, 256}, {16, 200, 0, 256},
                           {64, 200, 0, 1024}, {256, 200, 0, 1024}, {256, 200, 1, 64},  {1, 30000, 1, 64}};
    for (const auto& w : want)
        if (attn_decode_span(l3, w[0], w[1], w[2] != 0) != w[3]) {
            std::printf("FAIL attn_decode_span(rows %d, max_pos %d, fixed %d) = %d, want %d\n", w[0], w[1], w[2],
                        attn_decode_span(l3, w[0], w[1], w[2] != 0), w[3]);
            ++bad;
        }
    size_t ran = 0;
    for (size_t k = 0; k < cases.size(); ++k) {
        if (quick && k % 3 != 0) continue;
        ++ran;
        if (!run_case(cases[k], rng)) ++bad;
    }
    std::printf("attn_decode: %zu cases, %d disagree\n", ran, bad);
    return bad ? 1 : 0;
}
