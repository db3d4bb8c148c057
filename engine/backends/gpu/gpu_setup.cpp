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

namespace {

PlanMatrix plan_matrix(const DevMatrix& m) {
    PlanMatrix p;
    if (!m.data) return p;
    p.type = m.type;
    p.rows = m.rows;
    p.cols = m.cols;
    return p;
}

}  // namespace

GpuBackend::GpuBackend(const std::string& path, const GpuOptions& opts)
    : file_(model::GgufFile::open(path)), opts_(opts) {
    if (opts.max_slots < 1 || opts.max_step_tokens < 1 || opts.kv_tokens < 0 || opts.tuning.matvec_rows < -1 ||
        opts.tuning.decode_gemm_rows < -1 || !(opts.kv_fraction > 0.0 && opts.kv_fraction <= 1.0))
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
    gemm_ = std::make_unique<Gemm>(stream_, opts.tuning.own_gemm);
    init_shapes();

    // The forward plan: every kernel choice, from the matrices as uploaded (with their merged
    // forms), the build, the tier and the tuning.
    const int slots = opts.max_slots;
    const int R = std::max(opts.max_step_tokens, slots);
    act_.logit_rows = std::max(slots, kScoreGroup);
    for (const DevLayer& L : dm_->layers) {
        PlanLayer pl;
        pl.q = plan_matrix(L.wq), pl.k = plan_matrix(L.wk), pl.v = plan_matrix(L.wv);
        pl.qkv = plan_matrix(L.wqkv), pl.qk = plan_matrix(L.wqk), pl.o = plan_matrix(L.wo);
        pl.gate = plan_matrix(L.gate), pl.up = plan_matrix(L.up), pl.gate_up = plan_matrix(L.gate_up);
        pl.down = plan_matrix(L.down);
        pl.qk_extras = L.bq || L.bk || L.bv || L.q_norm || L.k_norm;
        plan_model_.layers.push_back(pl);
    }
    plan_model_.output = plan_matrix(dm_->output);
    plan_model_.attn = sh_;
    plan_model_.max_rows = std::max(R, act_.logit_rows);
    plan_ =
        make_plan(plan_model_, this_build(gemm_->wants_f16_input()), opts.precision, opts.kv_pool_f32(), opts.tuning);
    if (plan_.prefill_attn == PrefillAttnKernel::Flash)
        qpt_ = attn_flash_tile_queries(sh_);  // one flash block per tile

    geom_.block_tokens = kBlockTokens;
    geom_.max_slots = slots;
    geom_.max_step_tokens = R;
    alloc_activations(R);
    alloc_step_inputs(R);
    upload_rope();
    sampler_ = std::make_unique<SlotSampler>(static_cast<int>(V_), slots, stream_);
    alloc_kv_pool();
}

void GpuBackend::init_shapes() {
    const auto& hp = w_.hp;
    d_ = hp.n_embd;
    nq_ = int64_t{hp.n_head} * hp.head_dim;
    nkv_ = int64_t{hp.n_head_kv} * hp.head_dim;
    ff_ = hp.n_ff;
    V_ = hp.n_vocab;
    act_.ld_d = pad64(d_);
    act_.ld_qkv = pad64(nq_ + 2 * nkv_);
    act_.ld_att = pad64(nq_);
    act_.ld_ff2 = pad64(2 * ff_);
    act_.ld_ff = pad64(ff_);
    act_.ld_v = pad64(V_);
    sh_.n_head = hp.n_head;
    sh_.n_head_kv = hp.n_head_kv;
    sh_.head_dim = hp.head_dim;
    sh_.rope_dim = hp.rope_dim;
    sh_.neox = w_.neox_rope;
    sh_.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    sh_.eps = hp.rms_eps;
    qpt_ = attn_prefill_tile_queries(sh_);
}

void GpuBackend::alloc_activations(int R) {
    const auto& hp = w_.hp;
    const int slots = opts_.max_slots;
    const auto Rz = static_cast<size_t>(R), Rx = static_cast<size_t>(std::max(R, act_.logit_rows));
    act_.x = alloc<float>(Rz * act_.ld_d);
    act_.xn = alloc<float>(Rx * act_.ld_d);
    act_.qkv = alloc<float>(Rz * act_.ld_qkv);
    act_.att = alloc<float>(Rz * act_.ld_att);
    act_.ffy = alloc<float>(Rz * act_.ld_ff2);
    act_.g = alloc<float>(Rz * act_.ld_ff);
    if (plan_.f16_in) {
        act_.xh = alloc<uint16_t>(Rx * act_.ld_d);
        act_.atth = alloc<uint16_t>(Rz * act_.ld_att);
        act_.gh = alloc<uint16_t>(Rz * act_.ld_ff);
    }
    if (plan_.split_parts) {
        act_.ld_xs = std::max({act_.ld_d, act_.ld_att, act_.ld_ff});
        act_.xs_hi = alloc<uint16_t>(Rx * act_.ld_xs);
        act_.xs_lo = alloc<uint16_t>(Rx * act_.ld_xs);
        if (plan_.split_sums) {  // the decode GEMM's exact kernel: block sums (QgLow)
            act_.ld_sum = act_.ld_xs / 16;
            act_.xs_sum = alloc<uint16_t>(Rx * act_.ld_sum);
        }
    }
    // GEMM prefill attention: gathered K/V for a whole context, packed Q and O for a step, and
    // scores for kAttnScratch bytes (scores F32 + softmax F16, and its low part when split), at
    // least 16 queries of every head at the full context.
    const bool attn_split = plan_.prefill_attn == PrefillAttnKernel::GemmSplit;
    if (attn_split || plan_.prefill_attn == PrefillAttnKernel::Gemm16) {
        constexpr int64_t kAttnScratch = int64_t{256} << 20;
        const int64_t ctx8 = (int64_t{info_.n_ctx} + 7) / 8 * 8;
        act_.attn_elems = std::max(kAttnScratch / (attn_split ? 8 : 6), int64_t{hp.n_head} * ctx8 * 16);
        act_.kc = alloc<uint16_t>(static_cast<size_t>(ctx8 * nkv_));
        act_.vc = alloc<uint16_t>(static_cast<size_t>(ctx8 * nkv_));
        act_.qp = alloc<uint16_t>(Rz * static_cast<size_t>(nq_));
        act_.op = alloc<float>(Rz * static_cast<size_t>(nq_));
        act_.ss = alloc<float>(static_cast<size_t>(act_.attn_elems));
        act_.pp = alloc<uint16_t>(static_cast<size_t>(act_.attn_elems));
        if (attn_split) {
            act_.qp_lo = alloc<uint16_t>(Rz * static_cast<size_t>(nq_));
            act_.pp_lo = alloc<uint16_t>(static_cast<size_t>(act_.attn_elems));
        }
    }
    // Dequantization scratch: the largest quantized matrix of a layer, and a slice of the output.
    auto quantized = [](const DevMatrix& m) { return m.type != kF16 && m.type != kF32; };
    size_t ws = 0;
    for (const auto& L : dm_->layers)
        for (const DevMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
            if (quantized(*m)) ws = std::max(ws, static_cast<size_t>(m->rows * m->cols));
    if (quantized(dm_->output)) ws = std::max(ws, static_cast<size_t>(std::min<int64_t>(V_, 16384) * d_));
    act_.wscratch_elems = ws;
    if (ws) act_.wscratch = alloc<uint16_t>(ws);
    if (ws && opts_.precision == Precision::Accurate) act_.wscratch_lo = alloc<uint16_t>(ws);
    // The decode GEMM's split-K partials: the most any matrix needs at any row count it serves.
    if (plan_.frag_gemm_rows > 0) {
        size_t pf = 0;
        const int max_rows = std::min(plan_.frag_gemm_rows, std::max(R, act_.logit_rows));
        auto need = [&](const DevMatrix& m) {
            if (!qgemm_supports(m.type, m.cols)) return;
            for (int M = 1; M <= max_rows; ++M) pf = std::max(pf, qgemm_partial_floats(m, M));
        };
        for (const auto& L : dm_->layers)
            for (const DevMatrix* m :
                 {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down, &L.wqkv, &L.wqk, &L.gate_up})
                if (m->data) need(*m);
        need(dm_->output);
        if (pf) act_.qg_part = alloc<float>(pf);
    }
    act_.logits = alloc<float>(static_cast<size_t>(act_.logit_rows) * act_.ld_v);

    // Split-K partials: every decode row (at most one per slot), or under Precision::Exact
    // groups of part_rows query rows of any kind, with splits for the whole context.
    const int span = attn_decode_span(sh_, 0, 0, true);  // the shortest span: the most splits
    while (int64_t{act_.splits_max} * span < info_.n_ctx) act_.splits_max *= 2;
    act_.part_rows = exact() ? std::min(R, std::max(slots, 64)) : slots;
    act_.part = alloc<float>(static_cast<size_t>(act_.part_rows) * act_.splits_max * hp.n_head * (hp.head_dim + 2));
}

void GpuBackend::alloc_step_inputs(int R) {
    const int slots = opts_.max_slots;
    const auto Rz = static_cast<size_t>(R);
    const int64_t seq_blocks = ceil_div(info_.n_ctx, kBlockTokens);
    stage(in_.rows, Rz);
    stage(in_.tables, static_cast<size_t>(slots) * static_cast<size_t>(seq_blocks));
    stage(in_.tiles, Rz);
    stage(in_.gather, static_cast<size_t>(slots) + Rz);
    stage(in_.sample_rows, static_cast<size_t>(slots));
    stage(in_.score_rows, Rz);
    in_.mask_words = static_cast<size_t>(ceil_div(V_, 32));
    stage(in_.masks, static_cast<size_t>(slots) * in_.mask_words);
    in_.out_dev = alloc<SampleOut>(static_cast<size_t>(slots) + Rz);
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMallocHost(&p, sizeof(SampleOut) * (static_cast<size_t>(slots) + Rz)));
    in_.out_host = static_cast<SampleOut*>(p);
    in_.flat_start.resize(static_cast<size_t>(slots));
    in_.sample_at.resize(static_cast<size_t>(slots));
    in_.score_at.resize(static_cast<size_t>(slots));
}

void GpuBackend::upload_rope() {
    // RoPE cos/sin per position and pair: the CPU backend's values (engine::RopeAngles, with
    // linear, YaRN and rope_freqs scaling).
    const auto& hp = w_.hp;
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
}

void GpuBackend::alloc_kv_pool() {
    // The KV pool, last: --kv-tokens positions, or kv_fraction of what is free now.
    sync("load");
    kv_.f16 = !plan_.kv_f32;
    const size_t elem = kv_.f16 ? 2 : 4;
    const size_t block_bytes = static_cast<size_t>(w_.hp.n_layer) * 2 * kBlockTokens * static_cast<size_t>(nkv_) * elem;
    int64_t n_blocks = 0;
    if (opts_.kv_tokens > 0) {
        n_blocks = ceil_div(opts_.kv_tokens, kBlockTokens);
    } else {
        size_t free_b = 0, total_b = 0;
        LOOM_GPU_CHECK(gpuMemGetInfo(&free_b, &total_b));
        n_blocks =
            static_cast<int64_t>(static_cast<double>(free_b) * opts_.kv_fraction / static_cast<double>(block_bytes));
    }
    if (n_blocks < 1)
        throw std::invalid_argument("no room for a KV block of " + std::to_string(block_bytes) + " bytes");
    kv_bytes_ = static_cast<size_t>(n_blocks) * block_bytes;
    kv_.pool = alloc<uint8_t>(kv_bytes_);
    kv_.layout.n_blocks = n_blocks;
    kv_.layout.block_tokens = kBlockTokens;
    kv_.layout.kv_dim = nkv_;
    kv_.tables = in_.tables.dev;
    geom_.n_blocks = n_blocks;
    std::fprintf(stderr, "%s: KV pool of %lld blocks x %d positions (%.1f MiB, %s; precision %s)\n",
                 opts_.engine_name.c_str(), static_cast<long long>(n_blocks), kBlockTokens,
                 static_cast<double>(kv_bytes_) / (1 << 20), kv_.f16 ? "F16" : "F32", precision_name(plan_.precision));
}

GpuBackend::~GpuBackend() {
    (void)gpuStreamSynchronize(stream_);
    while (!graphs_.captured.empty()) graphs_.drop(graphs_.captured.begin());
    for (auto& e : events_) (void)gpuEventDestroy(e.second);
    sampler_.reset();
    for (void* h : {static_cast<void*>(in_.rows.host), static_cast<void*>(in_.tables.host),
                    static_cast<void*>(in_.tiles.host), static_cast<void*>(in_.gather.host),
                    static_cast<void*>(in_.sample_rows.host), static_cast<void*>(in_.score_rows.host),
                    static_cast<void*>(in_.masks.host), static_cast<void*>(in_.out_host)})
        if (h) (void)gpuFreeHost(h);
    for (void* q : allocs_) (void)gpuFree(q);
    gemm_.reset();
    (void)gpuStreamDestroy(stream_);
}

}  // namespace loom::gpu
