// The GPU backend's loading, buffer and KV pool sizing, sampling slots, and the step's host side:
// validation of the plan, its flat batch of token rows, the upload, and the results; see
// gpu_backend.hpp. The forward pass is in gpu_forward.cpp, sampling in gpu_sample.cpp.
#include "engine/backends/gpu/gpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "engine/vocab_bytes.hpp"
#include "model/gguf/vocab.hpp"

namespace loom::gpu {
namespace {

constexpr int32_t kBlockTokens = 16;  // positions per KV block
constexpr int kScoreGroup = 64;       // prompt-scored rows per output projection

int64_t pad64(int64_t n) { return (n + 63) / 64 * 64; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

template <class T>
T* GpuBackend::alloc(size_t n) {
    void* p = nullptr;
    const size_t bytes = sizeof(T) * std::max<size_t>(n, 1);
    if (gpuMalloc(&p, bytes) != gpuSuccess) {
        (void)gpuGetLastError();
        throw GpuError("device memory: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    allocs_.push_back(p);
    return static_cast<T*>(p);
}

template <class T>
void GpuBackend::stage(Staged<T>& s, size_t cap) {
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMallocHost(&p, sizeof(T) * std::max<size_t>(cap, 1)));
    s.host = static_cast<T*>(p);
    s.dev = alloc<T>(cap);
    s.cap = cap;
}

template <class T>
void GpuBackend::upload(Staged<T>& s) {
    if (s.n) LOOM_GPU_CHECK(gpuMemcpyAsync(s.dev, s.host, sizeof(T) * s.n, gpuMemcpyHostToDevice, stream_));
}

int default_matvec_rows(uint32_t ffn_type, bool decode_gemm) {
    if (ffn_type == kF16) return 2;
    if (!decode_gemm) return 8;
    return qgemm_supports(ffn_type, 256) ? 2 : 4;  // F32 weights: cuBLAS, not the decode GEMM
}

GpuBackend::GpuBackend(const std::string& path, const GpuOptions& opts)
    : file_(model::GgufFile::open(path)), opts_(opts) {
    if (opts.max_slots < 1 || opts.max_step_tokens < 1 || opts.kv_tokens < 0 || opts.matvec_rows < -1 ||
        opts.decode_gemm_rows < -1 || !(opts.kv_fraction > 0.0 && opts.kv_fraction <= 1.0))
        throw std::invalid_argument("GPU options out of range (slots and step tokens >= 1, KV fraction in (0, 1])");
    check_tensor_types(file_, opts.engine_name);
    w_ = engine::LlamaWeights::bind(file_, {opts.engine_name, device_type_supported});
    if (opts_.split_products && opts_.decode_gemm_rows > 0)
        throw std::invalid_argument("split products run no decode GEMM (decode_gemm_rows must be 0)");
    if (opts_.split_products) opts_.decode_gemm_rows = 0;
    if (opts_.decode_gemm_rows > 0 && !qgemm_available())
        throw std::invalid_argument("this build has no tensor-core decode GEMM (decode_gemm_rows must be 0)");
#if defined(LOOM_GPU_CUDA)
    constexpr int kDecodeGemmRows = 64;  // above, dequantize + cuBLAS was faster (docs/benchmarks.md)
#else
    constexpr int kDecodeGemmRows = 0;   // the emulator on request only; HIP has no such kernel
#endif
    if (opts_.decode_gemm_rows < 0) opts_.decode_gemm_rows = kDecodeGemmRows;
    if (opts_.matvec_rows < 0)
        opts_.matvec_rows =
            default_matvec_rows(w_.layers.empty() ? kF16 : w_.layers[0].gate.type, opts_.decode_gemm_rows > 0);
    const auto& hp = w_.hp;
    const model::Vocab vocab = model::Vocab::from_gguf(file_);
    if (vocab.size() > hp.n_vocab)
        throw model::ModelError("the vocabulary has " + std::to_string(vocab.size()) + " tokens but the model only " +
                                std::to_string(hp.n_vocab) + " logits");
    if (hp.head_dim > 256) throw model::ModelError("head size " + std::to_string(hp.head_dim) + " above 256");
    info_.name = hp.name.empty() ? std::filesystem::path(path).filename().string() : hp.name;
    info_.backend = LOOM_GPU_BACKEND_NAME;
    info_.n_vocab = hp.n_vocab;
    info_.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : hp.n_ctx_train;
    info_.bos = vocab.bos;
    info_.eos = vocab.eos;
    info_.eog = vocab.eog;
    info_.vocab_bytes = engine::make_vocab_bytes(vocab, hp.n_vocab);  // grammars: masks applied on the device

    LOOM_GPU_CHECK(gpuStreamCreate(&stream_));
    dm_ = std::make_unique<DeviceModel>(w_);
    gemm_ = std::make_unique<Gemm>(stream_, opts.own_gemm);
    f16_in_ = gemm_->wants_f16_input() && !opts.split_products;  // split: linear() makes its own parts
    // RMSNorm fused into single-row matvecs when every matrix that reads a normalised input (Q, K,
    // V, gate, up, output) has a plain type or a quantized one the single-vector kernel takes
    // (it stages the activations once a block); the batched kernel's per-block norm costs more
    // than it saves on quantized rows (docs/benchmarks.md). The fused norm is most of what the
    // single-vector kernel gains (2026-12-06: its matvecs took as long as the batched ones).
    auto takes_norm = [&](const DevMatrix& m) {
        if (m.type == kF16 || m.type == kBF16 || m.type == kF32) return true;
        MatvecArgs a;
        a.type = m.type;
        a.cols = static_cast<int32_t>(m.cols);
        a.single = opts.matvec_single;
        return matvec1_takes(a);
    };
    fuse_norm_ = takes_norm(dm_->output);
    for (const auto& L : dm_->layers)
        for (const DevMatrix* m : {&L.wq, &L.wk, &L.wv, &L.gate, &L.up}) fuse_norm_ = fuse_norm_ && takes_norm(*m);

    d_ = hp.n_embd;
    nq_ = int64_t{hp.n_head} * hp.head_dim;
    nkv_ = int64_t{hp.n_head_kv} * hp.head_dim;
    ff_ = hp.n_ff;
    V_ = hp.n_vocab;
    ld_d_ = pad64(d_);
    ld_qkv_ = pad64(nq_ + 2 * nkv_);
    ld_att_ = pad64(nq_);
    ld_ff2_ = pad64(2 * ff_);
    ld_ff_ = pad64(ff_);
    ld_v_ = pad64(V_);
    sh_.n_head = hp.n_head;
    sh_.n_head_kv = hp.n_head_kv;
    sh_.head_dim = hp.head_dim;
    sh_.rope_dim = hp.rope_dim;
    sh_.neox = w_.neox_rope;
    sh_.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    sh_.eps = hp.rms_eps;
    qpt_ = attn_prefill_tile_queries(sh_);

    const int slots = opts.max_slots;
    const int R = std::max(opts.max_step_tokens, slots);
    geom_.block_tokens = kBlockTokens;
    geom_.max_slots = slots;
    geom_.max_step_tokens = R;
    logit_rows_ = std::max(slots, kScoreGroup);
    const auto Rz = static_cast<size_t>(R), Rx = static_cast<size_t>(std::max(R, logit_rows_));
    x_ = alloc<float>(Rz * ld_d_);
    xn_ = alloc<float>(Rx * ld_d_);
    qkv_ = alloc<float>(Rz * ld_qkv_);
    att_ = alloc<float>(Rz * ld_att_);
    ffy_ = alloc<float>(Rz * ld_ff2_);
    g_ = alloc<float>(Rz * ld_ff_);
    if (f16_in_) {
        xh_ = alloc<uint16_t>(Rx * ld_d_);
        atth_ = alloc<uint16_t>(Rz * ld_att_);
        gh_ = alloc<uint16_t>(Rz * ld_ff_);
    }
#if defined(LOOM_GPU_EMU)
    constexpr bool kSplitParts = true;  // the emulator takes cuBLAS's F16 parts (its tests check them)
#else
    constexpr bool kSplitParts = false;  // HIP: the own GEMM reads F32 activations
#endif
    if (opts.split_products && (gemm_->wants_f16_input() || kSplitParts)) {
        ld_xs_ = std::max({ld_d_, ld_att_, ld_ff_});
        xs_hi_ = alloc<uint16_t>(Rx * ld_xs_);
        xs_lo_ = alloc<uint16_t>(Rx * ld_xs_);
    }
    // GEMM prefill attention: gathered K/V for a whole context, packed Q and O for a step, and
    // scores for kAttnScratch bytes (scores F32 + softmax F16, and its low part when split), at
    // least 16 queries of every head at the full context.
    using PA = GpuOptions::PrefillAttn;
#if defined(LOOM_GPU_CUDA)
    constexpr bool kFlashAuto = true;  // the emulator runs the kernel on request only (slow there)
#else
    constexpr bool kFlashAuto = false;
#endif
    const bool flash_ok = !opts.kv_f32 && !opts.batch_invariant && attn_flash_supports(sh_, true);
    if (opts.prefill_attn == PA::Flash && !flash_ok)
        throw std::invalid_argument(
            "--prefill-attn flash needs the F16 KV pool, no --batch-invariant, head_dim 64 or "
            "128 and a group of query heads that divides 64 (and a CUDA or emulator build)");
    attn_flash_ = flash_ok && (opts.prefill_attn == PA::Flash || (opts.prefill_attn == PA::Auto && kFlashAuto));
    if (attn_flash_) qpt_ = attn_flash_tile_queries(sh_);  // one flash block per tile
    attn_gemm_ = !attn_flash_ && !opts.kv_f32 && !opts.batch_invariant && hp.head_dim % 8 == 0 &&
                 (opts.prefill_attn == PA::Gemm || opts.prefill_attn == PA::Gemm16 ||
                  (opts.prefill_attn == PA::Auto && f16_in_));
    attn_split_ = attn_gemm_ && opts.prefill_attn != PA::Gemm16;
    if (attn_gemm_) {
        constexpr int64_t kAttnScratch = int64_t{256} << 20;
        const int64_t ctx8 = (int64_t{info_.n_ctx} + 7) / 8 * 8;
        attn_elems_ = std::max(kAttnScratch / (attn_split_ ? 8 : 6), int64_t{hp.n_head} * ctx8 * 16);
        kc_ = alloc<uint16_t>(static_cast<size_t>(ctx8 * nkv_));
        vc_ = alloc<uint16_t>(static_cast<size_t>(ctx8 * nkv_));
        qp_ = alloc<uint16_t>(Rz * static_cast<size_t>(nq_));
        op_ = alloc<float>(Rz * static_cast<size_t>(nq_));
        ss_ = alloc<float>(static_cast<size_t>(attn_elems_));
        pp_ = alloc<uint16_t>(static_cast<size_t>(attn_elems_));
        if (attn_split_) {
            qp_lo_ = alloc<uint16_t>(Rz * static_cast<size_t>(nq_));
            pp_lo_ = alloc<uint16_t>(static_cast<size_t>(attn_elems_));
        }
    }
    // Dequantization scratch: the largest quantized matrix of a layer, and a slice of the output.
    auto quantized = [](const DevMatrix& m) { return m.type != kF16 && m.type != kF32; };
    size_t ws = 0;
    for (const auto& L : dm_->layers)
        for (const DevMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
            if (quantized(*m)) ws = std::max(ws, static_cast<size_t>(m->rows * m->cols));
    if (quantized(dm_->output)) ws = std::max(ws, static_cast<size_t>(std::min<int64_t>(V_, 16384) * d_));
    wscratch_elems_ = ws;
    if (ws) wscratch_ = alloc<uint16_t>(ws);
    if (ws && opts.split_products) wscratch_lo_ = alloc<uint16_t>(ws);
    // The decode GEMM's split-K partials: the most any matrix needs at any row count it serves.
    if (opts_.decode_gemm_rows > 0) {
        size_t pf = 0;
        const int max_rows = std::min(opts_.decode_gemm_rows, std::max(R, logit_rows_));
        auto need = [&](const DevMatrix& m) {
            if (!qgemm_supports(m.type, m.cols)) return;
            for (int M = 1; M <= max_rows; ++M) pf = std::max(pf, qgemm_partial_floats(m.rows, m.cols, M));
        };
        for (const auto& L : dm_->layers)
            for (const DevMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down, &L.wqkv, &L.gate_up})
                if (m->data) need(*m);
        need(dm_->output);
        if (pf) qg_part_ = alloc<float>(pf);
    }
    logits_ = alloc<float>(static_cast<size_t>(logit_rows_) * ld_v_);

    // Split-K partials: every decode row (at most one per slot), or in batch-invariant mode
    // groups of part_rows_ query rows of any kind, with splits for the whole context.
    const int span = attn_decode_span(sh_, 0, true);  // the shortest span: the most splits
    while (int64_t{splits_max_} * span < info_.n_ctx) splits_max_ *= 2;
    part_rows_ = opts.batch_invariant ? std::min(R, std::max(slots, 64)) : slots;
    part_ = alloc<float>(static_cast<size_t>(part_rows_) * splits_max_ * hp.n_head * (hp.head_dim + 2));

    const int64_t seq_blocks = ceil_div(info_.n_ctx, kBlockTokens);
    stage(rows_, Rz);
    stage(tables_, static_cast<size_t>(slots) * static_cast<size_t>(seq_blocks));
    stage(tiles_, Rz);
    stage(gather_, static_cast<size_t>(slots) + Rz);
    stage(sample_rows_, static_cast<size_t>(slots));
    stage(score_rows_, Rz);
    mask_words_ = static_cast<size_t>(ceil_div(V_, 32));
    stage(masks_, static_cast<size_t>(slots) * mask_words_);
    out_dev_ = alloc<SampleOut>(static_cast<size_t>(slots) + Rz);
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMallocHost(&p, sizeof(SampleOut) * (static_cast<size_t>(slots) + Rz)));
    out_host_ = static_cast<SampleOut*>(p);

    // RoPE cos/sin per position and pair, in double as the CPU backend computes them.
    const int half = hp.rope_dim / 2;
    std::vector<float> cs(static_cast<size_t>(info_.n_ctx) * half * 2);
    for (int i = 0; i < half; ++i) {
        const double f = std::pow(static_cast<double>(hp.rope_base), -2.0 * static_cast<double>(i) / hp.rope_dim);
        for (int64_t pos = 0; pos < info_.n_ctx; ++pos) {
            double theta = static_cast<double>(pos) * hp.rope_scale * f;
            if (!w_.rope_freqs.empty()) theta /= w_.rope_freqs[static_cast<size_t>(i)];
            cs[(static_cast<size_t>(pos) * half + i) * 2] = static_cast<float>(std::cos(theta));
            cs[(static_cast<size_t>(pos) * half + i) * 2 + 1] = static_cast<float>(std::sin(theta));
        }
    }
    rope_cs_ = alloc<float>(cs.size());
    if (!cs.empty()) LOOM_GPU_CHECK(gpuMemcpy(rope_cs_, cs.data(), cs.size() * 4, gpuMemcpyHostToDevice));

    sampler_ = std::make_unique<SlotSampler>(static_cast<int>(V_), slots, stream_);
    flat_start_.resize(static_cast<size_t>(slots));
    sample_at_.resize(static_cast<size_t>(slots));
    score_at_.resize(static_cast<size_t>(slots));

    // The KV pool, last: --kv-tokens positions, or kv_fraction of what is free now.
    sync("load");
    kv_.f16 = !opts.kv_f32;
    const size_t elem = kv_.f16 ? 2 : 4;
    const size_t block_bytes = static_cast<size_t>(hp.n_layer) * 2 * kBlockTokens * static_cast<size_t>(nkv_) * elem;
    int64_t n_blocks = 0;
    if (opts.kv_tokens > 0) {
        n_blocks = ceil_div(opts.kv_tokens, kBlockTokens);
    } else {
        size_t free_b = 0, total_b = 0;
        LOOM_GPU_CHECK(gpuMemGetInfo(&free_b, &total_b));
        n_blocks =
            static_cast<int64_t>(static_cast<double>(free_b) * opts.kv_fraction / static_cast<double>(block_bytes));
    }
    if (n_blocks < 1)
        throw std::invalid_argument("no room for a KV block of " + std::to_string(block_bytes) + " bytes");
    kv_bytes_ = static_cast<size_t>(n_blocks) * block_bytes;
    kv_.pool = alloc<uint8_t>(kv_bytes_);
    kv_.layout.n_blocks = n_blocks;
    kv_.layout.block_tokens = kBlockTokens;
    kv_.layout.kv_dim = nkv_;
    kv_.tables = tables_.dev;
    geom_.n_blocks = n_blocks;
    std::fprintf(stderr, "%s: KV pool of %lld blocks x %d positions (%.1f MiB, %s)\n", opts.engine_name.c_str(),
                 static_cast<long long>(n_blocks), kBlockTokens, static_cast<double>(kv_bytes_) / (1 << 20),
                 kv_.f16 ? "F16" : "F32");
}

GpuBackend::~GpuBackend() {
    (void)gpuStreamSynchronize(stream_);
    while (!graphs_.empty()) drop_graph(graphs_.begin());
    for (auto& e : events_) (void)gpuEventDestroy(e.second);
    sampler_.reset();
    for (void* h :
         {static_cast<void*>(rows_.host), static_cast<void*>(tables_.host), static_cast<void*>(tiles_.host),
          static_cast<void*>(gather_.host), static_cast<void*>(sample_rows_.host), static_cast<void*>(score_rows_.host),
          static_cast<void*>(masks_.host), static_cast<void*>(out_host_)})
        if (h) (void)gpuFreeHost(h);
    for (void* q : allocs_) (void)gpuFree(q);
    gemm_.reset();
    (void)gpuStreamDestroy(stream_);
}

void GpuBackend::sync(const char* what) {
    const gpuError_t e = gpuStreamSynchronize(stream_);
    if (e != gpuSuccess) throw GpuError(std::string(what) + ": " + gpuGetErrorString(e));
}

void GpuBackend::tick(const char* name) {
    if (!profiling_) return;
    gpuEvent_t e;
    LOOM_GPU_CHECK(gpuEventCreate(&e));
    LOOM_GPU_CHECK(gpuEventRecord(e, stream_));
    events_.emplace_back(name, e);
}

void GpuBackend::open_slot(int32_t slot, const engine::SamplingParams& params, std::span<const int32_t> prompt,
                           std::span<const int32_t> output) {
    sampler_->open(slot, params, prompt, output);
}

void GpuBackend::close_slot(int32_t slot) { sampler_->close(slot); }

void GpuBackend::validate(const engine::StepPlan& plan) const {
    auto bad = [](const std::string& m) { throw std::invalid_argument("step: " + m); };
    if (plan.rows.size() > static_cast<size_t>(geom_.max_slots))
        bad(std::to_string(plan.rows.size()) + " rows, more than the " + std::to_string(geom_.max_slots) + " slots");
    std::vector<char> seen(static_cast<size_t>(geom_.max_slots), 0);
    int64_t total = 0;
    for (const engine::StepRow& r : plan.rows) {
        const std::string who = "slot " + std::to_string(r.slot) + ": ";
        if (!sampler_->is_open(r.slot)) bad(who + "not open");
        if (seen[static_cast<size_t>(r.slot)]++) bad(who + "appears twice");
        const auto n = static_cast<int64_t>(r.tokens.size());
        if (n == 0) bad(who + "no tokens");
        total += n;
        for (int32_t t : r.tokens)
            if (t < 0 || t >= V_) bad(who + "token id " + std::to_string(t) + " out of range");
        if (r.pos0 < 0 || r.pos0 + n > info_.n_ctx)
            bad(who + "positions " + std::to_string(r.pos0) + ".." + std::to_string(r.pos0 + n - 1) +
                " outside the context of " + std::to_string(info_.n_ctx));
        const int64_t need = ceil_div(r.pos0 + n, kBlockTokens);
        if (static_cast<int64_t>(r.blocks.size()) < need)
            bad(who + "block table of " + std::to_string(r.blocks.size()) + " blocks for " +
                std::to_string(r.pos0 + n) + " positions");
        for (int64_t i = 0; i < need; ++i)
            if (r.blocks[static_cast<size_t>(i)] < 0 || r.blocks[static_cast<size_t>(i)] >= geom_.n_blocks)
                bad(who + "block id " + std::to_string(r.blocks[static_cast<size_t>(i)]) + " out of range");
        if (r.prompt_k > kMaxTop) bad(who + "prompt_k above " + std::to_string(kMaxTop));
        if (!r.mask.empty() && r.mask.size() < mask_words_) bad(who + "token mask shorter than the vocabulary");
        if (r.prompt_k >= 0) {
            const auto nt = static_cast<int64_t>(r.targets.size());
            if (nt != n && nt != n - 1)
                bad(who + "targets for " + std::to_string(nt) + " of " + std::to_string(n) + " tokens");
            for (int32_t t : r.targets)
                if (t < 0 || t >= V_) bad(who + "target id " + std::to_string(t) + " out of range");
        }
    }
    if (total > geom_.max_step_tokens)
        bad(std::to_string(total) + " tokens, more than " + std::to_string(geom_.max_step_tokens));
}

void GpuBackend::build_rows(const engine::StepPlan& plan) {
    const size_t n_rows = plan.rows.size();
    // Flat order: the 1-token rows first, then the short chunks (both through split-K decode
    // attention, one query row each), then the long chunks (prefill tiles). A short chunk after
    // a long cached prefix would give the tile kernel a few blocks (one per tile and KV-head
    // group) to walk the whole context alone (measured on the H200: 16 tokens behind 4,080
    // cached, 184 ms to the first token; 34 ms this way, docs/benchmarks.md).
    const auto short_chunk = [](size_t n) { return n <= static_cast<size_t>(kShortChunkRows); };
    std::vector<size_t> order;
    order.reserve(n_rows);
    n_dec_ = 0;
    for (size_t i = 0; i < n_rows; ++i)
        if (plan.rows[i].tokens.size() == 1) order.push_back(i);
    for (size_t i = 0; i < n_rows; ++i)
        if (plan.rows[i].tokens.size() > 1 && short_chunk(plan.rows[i].tokens.size())) order.push_back(i);
    for (size_t i : order) n_dec_ += static_cast<int>(plan.rows[i].tokens.size());
    for (size_t i = 0; i < n_rows; ++i)
        if (!short_chunk(plan.rows[i].tokens.size())) order.push_back(i);

    rows_.n = tables_.n = tiles_.n = gather_.n = sample_rows_.n = score_rows_.n = 0;
    chunks_.clear();
    int32_t max_pos = 0;
    pure_decode_ = true;
    nblk_ = 1;
    any_mask_ = false;
    for (size_t i : order) {
        const engine::StepRow& r = plan.rows[i];
        const auto n = static_cast<int32_t>(r.tokens.size());
        const auto f = static_cast<int32_t>(rows_.n);
        const auto table = static_cast<int32_t>(tables_.n);
        const int64_t need = ceil_div(r.pos0 + n, kBlockTokens);
        std::copy_n(r.blocks.begin(), need, tables_.host + tables_.n);
        tables_.n += static_cast<size_t>(need);
        for (int32_t t = 0; t < n; ++t)
            rows_.host[rows_.n++] =
                RowDesc{r.tokens[static_cast<size_t>(t)], static_cast<int32_t>(r.pos0) + t, table, 0};
        flat_start_[i] = f;
        const bool dec_attn = n <= kShortChunkRows;
        if (dec_attn || opts_.batch_invariant) max_pos = std::max(max_pos, static_cast<int32_t>(r.pos0) + n - 1);
        if (!dec_attn) chunks_.push_back(PrefillTile{f, n, static_cast<int32_t>(r.pos0), table});
        if (!dec_attn)
            for (int32_t q0 = 0; q0 < n; q0 += qpt_)
                tiles_.host[tiles_.n++] =
                    PrefillTile{f + q0, std::min(qpt_, n - q0), static_cast<int32_t>(r.pos0) + q0, table};
        pure_decode_ = pure_decode_ && n == 1 && r.sample && r.prompt_k < 0;
    }
    // Sampled rows (their last token), in flat order: in a pure-decode step sampled row k is flat row k.
    for (size_t i : order) {
        const engine::StepRow& r = plan.rows[i];
        sample_at_[i] = -1;
        if (!r.sample) continue;
        const auto k = static_cast<int32_t>(sample_rows_.n++);
        sample_at_[i] = k;
        gather_.host[gather_.n++] = flat_start_[i] + static_cast<int32_t>(r.tokens.size()) - 1;
        // A masked row's words go to entry k of masks_ (packed by upload_masks, after the forward
        // pass is enqueued); the pointer is known now.
        const uint32_t* mask = r.mask.empty() ? nullptr : masks_.dev + static_cast<size_t>(k) * mask_words_;
        any_mask_ = any_mask_ || mask != nullptr;
        sample_rows_.host[k] = SampleRow{r.slot, k, r.u, mask};
        nblk_ = std::max(nblk_, sampler_->blocks(r.slot));
    }
    // Prompt-scored rows: logits row j % logit_rows_ of their group.
    for (size_t i : order) {
        const engine::StepRow& r = plan.rows[i];
        score_at_[i] = -1;
        if (r.prompt_k < 0) continue;
        score_at_[i] = static_cast<int>(score_rows_.n);
        for (size_t j = 0; j < r.targets.size(); ++j) {
            const auto e = static_cast<int32_t>(score_rows_.n++);
            gather_.host[gather_.n++] = flat_start_[i] + static_cast<int32_t>(j);
            score_rows_.host[e] = ScoreRow{e % logit_rows_, r.targets[j], r.prompt_k, 0};
        }
    }
    span_ = attn_decode_span(sh_, n_dec_, opts_.batch_invariant);
    splits_ = 1;
    while (int64_t{splits_} * span_ <= max_pos) splits_ *= 2;
}

void GpuBackend::upload() {
    upload(rows_);
    upload(tables_);
    upload(tiles_);
    if (!pure_decode_) upload(gather_);  // a pure-decode step's sampled rows are its flat rows
    upload(sample_rows_);
    upload(score_rows_);
}

void GpuBackend::step(const engine::StepPlan& plan, engine::StepOutput& out) {
    begin_step(plan);
    finish_step(plan, out);
}

void GpuBackend::begin_step(const engine::StepPlan& plan) {
    if (begun_) {  // a step begun and never finished: let its copies out of the host buffers end
        begun_ = false;
        sync("abandoned step");
    }
    validate(plan);
    begun_ = true;  // from here work may be enqueued, even when a launch below throws
    if (plan.rows.empty()) return;
    build_rows(plan);
    upload();
    const int T = static_cast<int>(rows_.n);
    const int ns = static_cast<int>(sample_rows_.n), nsc = static_cast<int>(score_rows_.n);
    tick("upload");
    ++steps_;
    if (pure_decode_ && opts_.graphs && LOOM_GPU_HAS_GRAPHS && !profiling_) {
        decode_graph(T);
    } else {
        forward(T);
        for (int g0 = 0; g0 < nsc; g0 += logit_rows_) {
            const int g = std::min(logit_rows_, nsc - g0);
            logits(gather_.dev + ns + g0, g);
            score_rows(logits_, ld_v_, static_cast<int>(V_), score_rows_.dev + g0, g, out_dev_ + ns + g0, stream_);
            tick("prompt_scores");
        }
        if (ns) logits(pure_decode_ ? nullptr : gather_.dev, ns);
    }
}

void GpuBackend::finish_step(const engine::StepPlan& plan, engine::StepOutput& out) {
    if (!begun_) throw std::logic_error("GpuBackend::finish_step without begin_step");
    const size_t n_rows = plan.rows.size();
    out.sampled.assign(n_rows, std::nullopt);
    out.prompt_scores.assign(n_rows, {});
    out.errors.assign(n_rows, std::string());
    if (n_rows == 0) {
        begun_ = false;
        return;
    }
    const int ns = static_cast<int>(sample_rows_.n), nsc = static_cast<int>(score_rows_.n);
    // The forward pass was enqueued by begin_step and runs while the caller built the masks;
    // now they are packed and copied, ordered before the sampling launches on the stream. No
    // mask this step: no copy.
    if (any_mask_) upload_masks(plan);
    if (ns) {
        sampler_->sample(logits_, ld_v_, sample_rows_.dev, ns, nblk_, out_dev_);
        tick("sample");
    }
    if (ns + nsc)
        LOOM_GPU_CHECK(gpuMemcpyAsync(out_host_, out_dev_, sizeof(SampleOut) * static_cast<size_t>(ns + nsc),
                                      gpuMemcpyDeviceToHost, stream_));
    sync("step");
    begun_ = false;  // only now: a throw before the sync leaves work that the next begin_step waits for
    finish(plan, out);
}

void GpuBackend::upload_masks(const engine::StepPlan& plan) {
    masks_.n = 0;
    for (size_t i = 0; i < plan.rows.size(); ++i) {
        const engine::StepRow& r = plan.rows[i];
        if (sample_at_[i] < 0 || r.mask.empty()) continue;
        const auto k = static_cast<size_t>(sample_at_[i]);
        std::copy_n(r.mask.begin(), mask_words_, masks_.host + k * mask_words_);
        masks_.n = std::max(masks_.n, (k + 1) * mask_words_);
    }
    upload(masks_);  // one copy: entries 0..last masked row (unmasked entries in between unread)
}

void GpuBackend::finish(const engine::StepPlan& plan, engine::StepOutput& out) {
    const int ns = static_cast<int>(sample_rows_.n);
    const std::string nan = "the model produced NaN logits";
    for (size_t i = 0; i < plan.rows.size(); ++i) {
        const engine::StepRow& r = plan.rows[i];
        if (score_at_[i] >= 0) {
            auto& scores = out.prompt_scores[i];
            scores.reserve(r.targets.size());
            for (size_t j = 0; j < r.targets.size(); ++j) {
                const SampleOut& o = out_host_[static_cast<size_t>(ns + score_at_[i]) + j];
                if (o.nan) out.errors[i] = nan;
                engine::SampleResult s;
                s.token = o.token;
                s.logprob = o.logprob;
                for (int t = 0; t < o.n_top; ++t) s.top.emplace_back(o.top_id[t], o.top_lp[t]);
                scores.push_back(std::move(s));
            }
        }
        if (sample_at_[i] >= 0) {
            const SampleOut& o = out_host_[static_cast<size_t>(sample_at_[i])];
            if (o.nan == kMaskEmpty)
                out.errors[i] = "sampling failed: the grammar allows none of the request's candidate tokens";
            else if (o.nan) out.errors[i] = nan;
            else out.sampled[i] = sampler_->result(r.slot, o);
        }
    }
}

void GpuBackend::drop_graph(std::map<std::pair<int, int>, DecodeGraph>::iterator it) {
#if LOOM_GPU_HAS_GRAPHS
    (void)gpuGraphExecDestroy(it->second.exec);
    (void)gpuGraphDestroy(it->second.graph);
#endif
    graphs_.erase(it);
}

void GpuBackend::decode_graph(int T) {
    auto eager = [&] {
        forward(T);
        logits(nullptr, T);
    };
#if LOOM_GPU_HAS_GRAPHS
    const auto key = std::make_pair(T, splits_);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
        // First sight: eager, so that lazily initialised kernels and cuBLAS shapes are set up
        // outside a capture, and a row count seen once costs no capture.
        if (graph_seen_[key]++ == 0) {
            eager();
            return;
        }
        graph_seen_.erase(key);
        if (graphs_.size() >= kMaxGraphs)
            drop_graph(std::min_element(graphs_.begin(), graphs_.end(),
                                        [](const auto& a, const auto& b) { return a.second.used < b.second.used; }));
        DecodeGraph d;
        LOOM_GPU_CHECK(gpuStreamBeginCapture(stream_));
        try {
            eager();
        } catch (...) {
            (void)gpuStreamEndCapture(stream_, &d.graph);
            if (d.graph) (void)gpuGraphDestroy(d.graph);
            throw;
        }
        LOOM_GPU_CHECK(gpuStreamEndCapture(stream_, &d.graph));
        if (gpuGraphInstantiate(&d.exec, d.graph) != gpuSuccess) {
            (void)gpuGraphDestroy(d.graph);
            throw GpuError("decode graph: instantiation failed");
        }
        it = graphs_.emplace(key, d).first;
    }
    it->second.used = steps_;
    LOOM_GPU_CHECK(gpuGraphLaunch(it->second.exec, stream_));
#else
    eager();
#endif
}

OpTimes GpuBackend::profile_step(const engine::StepPlan& plan, engine::StepOutput& out) {
    for (auto& e : events_) (void)gpuEventDestroy(e.second);
    events_.clear();
    profiling_ = true;
    try {
        tick("start");
        step(plan, out);
        tick("end");
    } catch (...) {
        profiling_ = false;
        throw;
    }
    profiling_ = false;
    OpTimes times;
    for (size_t i = 1; i < events_.size(); ++i) {
        float ms = 0;
        LOOM_GPU_CHECK(gpuEventElapsedTime(&ms, events_[i - 1].second, events_[i].second));
        auto it =
            std::find_if(times.ms.begin(), times.ms.end(), [&](const auto& p) { return p.first == events_[i].first; });
        if (it == times.ms.end()) times.ms.emplace_back(events_[i].first, ms);
        else it->second += ms;
    }
    return times;
}

std::unique_ptr<engine::Backend> make_gpu_backend(const std::string& path, const GpuOptions& opts) {
    return std::make_unique<GpuBackend>(path, opts);
}

}  // namespace loom::gpu
