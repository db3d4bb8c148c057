// GpuBackend's construction and teardown: the options checked, the model uploaded, the step
// buffers sized for the largest step (and the split products' parts), the RoPE table, the
// sampling slots and the KV pool from what device memory is left; see gpu_backend.hpp.
#include "engine/backends/gpu/gpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "engine/rope_angles.hpp"
#include "engine/vocab_bytes.hpp"
#include "model/gguf/vocab.hpp"

namespace loom::gpu {
namespace {

int64_t pad64(int64_t n) { return (n + 63) / 64 * 64; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The GPU kernels have no experts yet: a mixture (a llama file with expert_count, or a MoE
// architecture) is refused by name at load, never run as a dense model.
void refuse_experts(const model::GgufFile& f, const std::string& engine) {
    const std::string arch = f.get_string("general.architecture");
    const int64_t n_expert = f.get_int(arch + ".expert_count", 0);
    if (n_expert > 0 || arch == "qwen2moe" || arch == "qwen3moe" || arch == "gpt-oss")
        throw model::ModelError("'" + arch + "' is a mixture of experts (" + arch +
                                ".expert_count = " + std::to_string(n_expert) + "), which " + engine +
                                " does not run yet (loom-engine-cpu does)");
}

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
    refuse_experts(file_, opts.engine_name);
    check_tensor_types(file_, opts.engine_name);
    w_ = engine::LlamaWeights::bind(file_, {opts.engine_name, device_type_supported});
    // The GPU kernels attend to every cached position: a declared window that the served
    // context can exceed is refused, never ignored (the CPU engine applies it).
    const int32_t ctx_limit = opts.n_ctx > 0 ? opts.n_ctx : w_.hp.n_ctx_train;
    if (w_.hp.sliding_window > 0 && w_.hp.sliding_window < ctx_limit)
        throw model::ModelError(w_.hp.arch + ".attention.sliding_window = " + std::to_string(w_.hp.sliding_window) +
                                ": " + opts.engine_name +
                                " has no sliding-window attention (loom-engine-cpu applies it; a context of at "
                                "most the window, --ctx " +
                                std::to_string(w_.hp.sliding_window) + ", also loads here)");
    if (opts_.split_products && (opts_.decode_gemm_tiled || opts_.decode_gemm_f16))
        throw std::invalid_argument(
            "split products take the decode GEMM's exact kernel for Q4_K and Q6_K and split the others' "
            "operands: not the tile kernel or F16 matrices through the decode GEMM, which round to F16");
    if (opts_.decode_gemm_rows > 0 && !qgemm_available())
        throw std::invalid_argument("this build has no tensor-core decode GEMM (decode_gemm_rows must be 0)");
#if defined(LOOM_GPU_CUDA)
    // Above these, dequantize + cuBLAS was faster (docs/benchmarks.md): the fragment kernels
    // (Q4_K, Q6_K) and the others (the tile and exact kernels).
    constexpr int kFragGemmRows = 256, kTileGemmRows = 64;
#else
    // The emulator takes the decode GEMM on request only, and HIP has no such kernel.
    constexpr int kFragGemmRows = 0, kTileGemmRows = 0;
#endif
    tile_gemm_rows_ = opts_.decode_gemm_rows < 0 ? kTileGemmRows : opts_.decode_gemm_rows;
    if (opts_.decode_gemm_rows < 0) opts_.decode_gemm_rows = kFragGemmRows;
    if (opts_.matvec_rows < 0) {
        // Under split products only Q4_K and Q6_K take the decode GEMM (its exact kernel); other
        // types keep the F32 matvec up to 8 rows, as without the decode GEMM.
        const engine::Matrix* gate = w_.layers.empty() ? nullptr : &w_.layers[0].gate;
        const uint32_t ffn_type = gate ? gate->type : kF16;
        const bool dg = opts_.decode_gemm_rows > 0 &&
                        (!opts_.split_products || (gate && qgemm_exact_supports(gate->type, gate->cols)));
        opts_.matvec_rows = default_matvec_rows(ffn_type, dg);
    }
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
        if (opts_.decode_gemm_rows > 0) {  // the decode GEMM's exact kernel: block sums (QgLow)
            ld_sum_ = ld_xs_ / 16;
            xs_sum_ = alloc<uint16_t>(Rx * ld_sum_);
        }
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
            for (int M = 1; M <= max_rows; ++M) pf = std::max(pf, qgemm_partial_floats(m, M));
        };
        for (const auto& L : dm_->layers)
            for (const DevMatrix* m :
                 {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down, &L.wqkv, &L.wqk, &L.gate_up})
                if (m->data) need(*m);
        need(dm_->output);
        if (pf) qg_part_ = alloc<float>(pf);
    }
    logits_ = alloc<float>(static_cast<size_t>(logit_rows_) * ld_v_);

    // Split-K partials: every decode row (at most one per slot), or in batch-invariant mode
    // groups of part_rows_ query rows of any kind, with splits for the whole context.
    const int span = attn_decode_span(sh_, 0, 0, true);  // the shortest span: the most splits
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

    // RoPE cos/sin per position and pair: the CPU backend's values (engine::RopeAngles, with
    // linear, YaRN and rope_freqs scaling).
    const int half = hp.rope_dim / 2;
    std::vector<float> cs(static_cast<size_t>(info_.n_ctx) * half * 2);
    {
        const engine::RopeAngles angles(engine::RopeSpec::from_hparams(hp, w_.rope_freqs));
        std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
        for (int64_t pos = 0; pos < info_.n_ctx; ++pos) {
            angles.at(pos, c.data(), s.data());
            for (int i = 0; i < half; ++i) {
                cs[(static_cast<size_t>(pos) * half + i) * 2] = c[static_cast<size_t>(i)];
                cs[(static_cast<size_t>(pos) * half + i) * 2 + 1] = s[static_cast<size_t>(i)];
            }
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

}  // namespace loom::gpu
