// The GPU backend's loading, forward pass, prefill and batched decode; see gpu_backend.hpp.
// Sampling is in gpu_sample.cpp.
#include "engine/backends/gpu/gpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "model/gguf/vocab.hpp"

namespace loom::gpu {
namespace {

int64_t pad64(int64_t n) { return (n + 63) / 64 * 64; }

bool all_f32(const engine::LlamaWeights& w) {
    if (w.tok_embd.type != kF32 || w.output.type != kF32) return false;
    for (const auto& L : w.layers)
        for (const engine::Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
            if (m->type != kF32) return false;
    return true;
}

}  // namespace

GpuSequence::GpuSequence(int64_t cap, size_t kv_bytes, int n_vocab) : capacity(cap) {
    if (gpuMalloc(&kv, kv_bytes) != gpuSuccess) {
        (void)gpuGetLastError();
        throw std::bad_alloc();
    }
    void* l = nullptr;
    if (gpuMalloc(&l, sizeof(float) * static_cast<size_t>(n_vocab)) != gpuSuccess) {
        (void)gpuGetLastError();
        (void)gpuFree(kv);
        throw std::bad_alloc();
    }
    logits = static_cast<float*>(l);
}

GpuSequence::~GpuSequence() {
    (void)gpuFree(kv);
    (void)gpuFree(logits);
}

GpuBackend::GpuBackend(const std::string& path, const GpuOptions& opts)
    : file_(model::GgufFile::open(path)), opts_(opts) {
    check_tensor_types(file_, opts.engine_name);
    w_ = engine::LlamaWeights::bind(file_, {opts.engine_name, device_type_supported});
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

    LOOM_GPU_CHECK(gpuStreamCreate(&stream_));
    dm_ = std::make_unique<DeviceModel>(w_);
    gemm_ = std::make_unique<Gemm>(stream_);
    f16_in_ = gemm_->wants_f16_input();
    // Whether every matrix that reads a normalised input (Q, K, V, gate, up, output) passes `ok`.
    auto normed_inputs_all = [&](auto ok) {
        for (const auto& L : dm_->layers)
            for (const DevMatrix* m : {&L.wq, &L.wk, &L.wv, &L.gate, &L.up})
                if (!ok(*m)) return false;
        return ok(dm_->output);
    };
    fuse_norm_ = normed_inputs_all([](const DevMatrix& m) { return m.type == kF16 || m.type == kBF16 || m.type == kF32; });
    fuse_norm_mvp_ = normed_inputs_all([](const DevMatrix& m) {
        return m.type == kF32 || matvec_pipelined_supports(m.type, static_cast<int>(m.cols));
    });
    if (const char* e = std::getenv("LOOM_GPU_FMA_ATTENTION")) no_gemm_attn_ = std::string(e) == "1";
    auto env_is = [](const char* name, const char* v) {
        const char* e = std::getenv(name);
        return e && std::string(e) == v;
    };
    mv1_ = env_is("LOOM_GPU_MV1", "1");
    mvp_ = env_is("LOOM_GPU_MVP", "1");
#if defined(LOOM_GPU_CUDA)
    pdl_ = mv1_ && !env_is("LOOM_GPU_PDL", "0");
#endif
    fuse_rope_ = !env_is("LOOM_GPU_FUSE_ROPE", "0");
    q4_magic_ = env_is("LOOM_GPU_Q4_MAGIC", "1");

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
    sh_.kv_f16 = opts.kv_f16 && !all_f32(w_);
    sh_.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
    sh_.eps = hp.rms_eps;

    rmax_ = std::max(opts.prefill_chunk, opts.max_batch);
    const auto R = static_cast<size_t>(rmax_);
    x_ = static_cast<float*>(alloc(R * ld_d_ * 4));
    xn_ = static_cast<float*>(alloc(R * ld_d_ * 4));
    qkv_ = static_cast<float*>(alloc(R * ld_qkv_ * 4));
    att_ = static_cast<float*>(alloc(R * ld_att_ * 4));
    ffy_ = static_cast<float*>(alloc(R * ld_ff2_ * 4));
    g_ = static_cast<float*>(alloc(R * ld_ff_ * 4));
    if (f16_in_) {
        xh_ = static_cast<uint16_t*>(alloc(R * ld_d_ * 2));
        atth_ = static_cast<uint16_t*>(alloc(R * ld_att_ * 2));
        gh_ = static_cast<uint16_t*>(alloc(R * ld_ff_ * 2));
    }
    // Dequantization scratch: the largest quantized matrix of a layer, and a slice of the output.
    auto quantized = [](const DevMatrix& m) { return m.type != kF16 && m.type != kF32; };
    size_t ws = 0;
    for (const auto& L : dm_->layers)
        for (const DevMatrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
            if (quantized(*m)) ws = std::max(ws, static_cast<size_t>(m->rows * m->cols));
    if (quantized(dm_->output)) ws = std::max(ws, static_cast<size_t>(std::min<int64_t>(V_, 16384) * d_));
    wscratch_elems_ = ws;
    if (ws) wscratch_ = static_cast<uint16_t*>(alloc(ws * 2));
    logits_b_ = static_cast<float*>(alloc(static_cast<size_t>(std::max(opts.max_batch, 64)) * ld_v_ * 4));

    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMallocHost(&p, sizeof(SlotDesc) * R));
    slots_host_ = static_cast<SlotDesc*>(p);
    slots_dev_ = static_cast<SlotDesc*>(alloc(sizeof(SlotDesc) * R));
    LOOM_GPU_CHECK(gpuMallocHost(&p, sizeof(int32_t) * R));
    tokens_host_ = static_cast<int32_t*>(p);
    tokens_dev_ = static_cast<int32_t*>(alloc(sizeof(int32_t) * R));

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
    rope_cs_ = static_cast<float*>(alloc(std::max<size_t>(cs.size(), 1) * 4));
    if (!cs.empty()) LOOM_GPU_CHECK(gpuMemcpy(rope_cs_, cs.data(), cs.size() * 4, gpuMemcpyHostToDevice));

    sampler_ = std::make_unique<DeviceSampler>(static_cast<int>(V_), stream_);
    sout_dev_ = static_cast<SampleOut*>(alloc(sizeof(SampleOut) * 64));
    LOOM_GPU_CHECK(gpuMallocHost(&p, sizeof(SampleOut) * 64));
    sout_host_ = static_cast<SampleOut*>(p);
    ensure_part(1, 1);
    sync("load");
}

GpuBackend::~GpuBackend() {
    (void)gpuStreamSynchronize(stream_);
    for (auto& [k, g] : graphs_) {
        (void)gpuGraphExecDestroy(g.second);
        (void)gpuGraphDestroy(g.first);
    }
    for (auto& e : events_) (void)gpuEventDestroy(e.second);
    for (void* p : allocs_) (void)gpuFree(p);
    if (part_) (void)gpuFree(part_);
    if (attn_s_) (void)gpuFree(attn_s_);
    sampler_.reset();
    (void)gpuFreeHost(slots_host_);
    (void)gpuFreeHost(tokens_host_);
    (void)gpuFreeHost(sout_host_);
    gemm_.reset();
    dm_.reset();
    (void)gpuStreamDestroy(stream_);
}

void* GpuBackend::alloc(size_t bytes) {
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, std::max<size_t>(bytes, 16)));
    allocs_.push_back(p);
    return p;
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

std::unique_ptr<engine::Sequence> GpuBackend::new_sequence(int64_t capacity) {
    if (capacity <= 0 || capacity > info_.n_ctx)
        throw std::invalid_argument("sequence capacity " + std::to_string(capacity) + " outside 1.." +
                                    std::to_string(info_.n_ctx));
    const size_t kv_bytes = static_cast<size_t>(w_.hp.n_layer) * 2 * static_cast<size_t>(capacity) *
                            static_cast<size_t>(nkv_) * (sh_.kv_f16 ? 2 : 4);
    return std::make_unique<GpuSequence>(capacity, kv_bytes, static_cast<int>(V_));
}

bool GpuBackend::rope_fusable(const DevLayer& L) const {
    return fuse_rope_ && !sh_.neox && sh_.rope_dim % 2 == 0 && sh_.head_dim % 2 == 0 && !L.bq && !L.bk && !L.bv &&
           !L.q_norm && !L.k_norm;
}

void GpuBackend::linear(const DevMatrix* const* mats, float* const* ys, int nmat, int rows, const float* x32,
                        int64_t ldx, const uint16_t* x16, int64_t ldx16, int64_t ldy, bool add, const float* norm_w,
                        const int8_t* roles, int layer) {
    if (norm_w && rows > 8) throw std::logic_error("fused RMSNorm needs the matvec path");
    if (roles && rows > 8) throw std::logic_error("fused RoPE needs the matvec path");
    if (rows <= 8) {
        for (int i = 0; i < nmat;) {
            MatvecArgs a;
            a.type = mats[i]->type;
            a.cols = static_cast<int32_t>(mats[i]->cols);
            a.row_bytes = mats[i]->row_bytes;
            a.nseg = 0;
            int j = i;
            while (j < nmat && a.nseg < 3 && mats[j]->type == a.type && mats[j]->cols == a.cols) {
                if (roles) a.seg_role[a.nseg] = roles[j];
                a.seg[a.nseg++] = MvSeg{mats[j]->data, static_cast<int32_t>(mats[j]->rows), ys[j]};
                ++j;
            }
            a.single = rows == 1 && mv1_;
            a.pipelined = rows == 1 && mvp_;
            a.pdl = a.single && pdl_;
            a.q4_magic = q4_magic_;
            if (roles) {
                a.slots = slots_dev_;
                a.rope_cs = rope_cs_;
                a.layer = layer;
                a.head_dim = sh_.head_dim;
                a.rope_dim = sh_.rope_dim;
                a.kv_dim = sh_.kv_dim();
                a.kv_f16 = sh_.kv_f16;
            }
            a.x = x32;
            a.x_stride = ldx;
            a.y_stride = ldy;
            a.nb = rows;
            a.mode = add ? MvMode::Add : MvMode::Store;
            a.norm_w = norm_w;
            a.norm_eps = w_.hp.rms_eps;
            matvec(a, stream_);
            i = j;
        }
        return;
    }
    for (int i = 0; i < nmat; ++i) {
        const DevMatrix& m = *mats[i];
        const int K = static_cast<int>(m.cols);
        if (m.type == kF16 || m.type == kF32) {
            const bool h = m.type == kF16;
            gemm_->run(m.data, h, static_cast<int64_t>(m.row_bytes / (h ? 2 : 4)), x32, ldx, x16, ldx16, rows,
                       static_cast<int>(m.rows), K, ys[i], ldy, add);
            continue;
        }
        const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(wscratch_elems_) / m.cols);
        for (int64_t r0 = 0; r0 < m.rows; r0 += step) {
            const int64_t n = std::min(step, m.rows - r0);
            dequant_f16(m, r0, n, wscratch_, m.cols, stream_);
            gemm_->run(wscratch_, true, m.cols, x32, ldx, x16, ldx16, rows, static_cast<int>(n), K, ys[i] + r0, ldy,
                       add);
        }
    }
}

void GpuBackend::ffn(const DevLayer& L, int rows, bool fuse) {
    const bool mv = rows <= 8;
    if (mv && L.gate.type == L.up.type) {
        MatvecArgs a;
        a.norm_w = fuse ? L.ffn_norm : nullptr;
        a.norm_eps = w_.hp.rms_eps;
        a.type = L.gate.type;
        a.cols = static_cast<int32_t>(L.gate.cols);
        a.row_bytes = L.gate.row_bytes;
        a.seg[0] = MvSeg{L.gate.data, static_cast<int32_t>(L.gate.rows), g_};
        a.seg[1] = MvSeg{L.up.data, static_cast<int32_t>(L.up.rows), nullptr};
        a.nseg = 2;
        a.x = fuse ? x_ : xn_;
        a.x_stride = ld_d_;
        a.y_stride = ld_ff_;
        a.nb = rows;
        a.mode = MvMode::SwiGLU;
        a.single = rows == 1 && mv1_;
        a.pipelined = rows == 1 && mvp_;
        a.pdl = a.single && pdl_;
        a.q4_magic = q4_magic_;
        matvec(a, stream_);
    } else {
        const DevMatrix* m2[2] = {&L.gate, &L.up};
        float* y2[2] = {ffy_, ffy_ + ff_};
        if (fuse) linear(m2, y2, 2, rows, x_, ld_d_, nullptr, 0, ld_ff2_, false, L.ffn_norm);
        else linear(m2, y2, 2, rows, xn_, ld_d_, xh_, ld_d_, ld_ff2_, false);
        swiglu(ffy_, ld_ff2_, static_cast<int>(ff_), rows, g_, ld_ff_, (!mv && f16_in_) ? gh_ : nullptr, ld_ff_,
               stream_);
    }
    tick("ffn_gate_up");
    const DevMatrix* md[1] = {&L.down};
    float* yd[1] = {x_};
    linear(md, yd, 1, rows, g_, ld_ff_, gh_, ld_ff_, ld_d_, true);
    tick("ffn_down");
}

void GpuBackend::output_rows(int rows, float* logits, int64_t ld) {
    const DevMatrix* mo[1] = {&dm_->output};
    float* yo[1] = {logits};
    linear(mo, yo, 1, rows, xn_, ld_d_, xh_, ld_d_, ld, false);
}

void GpuBackend::forward(int rows, bool decode) {
    const auto& hp = w_.hp;
    const bool mv = rows <= 8;
    const bool h16 = !mv && f16_in_;
    // RMSNorm fused into the next matvec: one launch less per norm, but every block of the
    // batched kernel recomputes the scale; it pays for a single row over plain (F16/BF16/F32)
    // weights, and costs more than it saves for several rows or for the quantized kernels. The
    // single-vector kernel (mv1_) stages the activations once per block and always fuses it; the
    // pipelined one (mvp_) computes the scale once per resident block.
    const bool fuse = rows == 1 && (fuse_norm_ || mv1_ || (mvp_ && fuse_norm_mvp_));
    embed(dm_->tok_embd, decode ? nullptr : tokens_dev_, decode ? slots_dev_ : nullptr, rows, x_, ld_d_, stream_);
    tick("embed");
    for (int l = 0; l < hp.n_layer; ++l) {
        const DevLayer& L = dm_->layers[static_cast<size_t>(l)];
        const DevMatrix* m3[3] = {&L.wq, &L.wk, &L.wv};
        float* y3[3] = {qkv_, qkv_ + nq_, qkv_ + nq_ + nkv_};
        // RoPE and the KV-cache store fused into the QKV matvec's epilogue (decode steps).
        const bool rope_fused = decode && mv && rope_fusable(L);
        static const int8_t kRoles[3] = {1, 2, 3};
        const int8_t* roles = rope_fused ? kRoles : nullptr;
        if (fuse) {  // RMSNorm fused into the matvec
            linear(m3, y3, 3, rows, x_, ld_d_, nullptr, 0, ld_qkv_, false, L.attn_norm, roles, l);
        } else {
            rmsnorm(x_, ld_d_, L.attn_norm, static_cast<int>(d_), rows, hp.rms_eps, xn_, ld_d_, h16 ? xh_ : nullptr,
                    ld_d_, stream_);
            tick("rmsnorm");
            linear(m3, y3, 3, rows, xn_, ld_d_, xh_, ld_d_, ld_qkv_, false, nullptr, roles, l);
        }
        tick("qkv");
        if (!rope_fused) {
            rope_store(qkv_, ld_qkv_, rows, sh_, l, slots_dev_, decode, rope_cs_, L.bq, L.bk, L.bv, L.q_norm, L.k_norm,
                       stream_);
            tick("rope_kv_store");
        }
        if (decode)
            attn_decode(qkv_, ld_qkv_, slots_dev_, rows, l, sh_, cur_splits_, part_, att_, ld_att_, stream_,
                        pdl_ && rows == 1);
        else if (gemm_->has_attention() && !sh_.kv_f16 && !no_gemm_attn_)
            prefill_attention(rows, l);
        else
            attn_prefill(qkv_, ld_qkv_, slots_dev_, rows, l, sh_, att_, ld_att_, stream_);
        if (h16) to_f16(att_, ld_att_, static_cast<int>(nq_), rows, atth_, ld_att_, stream_);
        tick("attention");
        const DevMatrix* mo[1] = {&L.wo};
        float* yo[1] = {x_};
        linear(mo, yo, 1, rows, att_, ld_att_, atth_, ld_att_, ld_d_, true);
        tick("attn_out");
        if (!fuse) {
            rmsnorm(x_, ld_d_, L.ffn_norm, static_cast<int>(d_), rows, hp.rms_eps, xn_, ld_d_, h16 ? xh_ : nullptr,
                    ld_d_, stream_);
            tick("rmsnorm");
        }
        ffn(L, rows, fuse);
    }
    if (decode) {
        if (fuse) {
            const DevMatrix* mo[1] = {&dm_->output};
            float* yo[1] = {logits_b_};
            linear(mo, yo, 1, rows, x_, ld_d_, nullptr, 0, ld_v_, false, dm_->output_norm);
        } else {
            rmsnorm(x_, ld_d_, dm_->output_norm, static_cast<int>(d_), rows, hp.rms_eps, xn_, ld_d_,
                    h16 ? xh_ : nullptr, ld_d_, stream_);
            output_rows(rows, logits_b_, ld_v_);
        }
        scatter_logits(logits_b_, ld_v_, static_cast<int>(V_), slots_dev_, rows, stream_);
        tick("output");
    }
}

void GpuBackend::prefill_attention(int rows, int layer) {
    // The sequence being prefilled is slots_host_[0] (its position and cache are set by eval()).
    const SlotDesc& d = slots_host_[0];
    const int n = d.pos + rows;
    const size_t need = static_cast<size_t>(sh_.n_head_kv) * static_cast<size_t>(rows) * static_cast<size_t>(n);
    if (need > attn_s_elems_) {
        sync("attention scratch");
        if (attn_s_) (void)gpuFree(attn_s_);
        attn_s_ = nullptr;
        void* p = nullptr;
        LOOM_GPU_CHECK(gpuMalloc(&p, need * sizeof(float)));
        attn_s_ = static_cast<float*>(p);
        attn_s_elems_ = need;
    }
    const int64_t kvd = sh_.kv_dim();
    const float* kv = static_cast<const float*>(d.kv);
    const float* k = kv + (static_cast<int64_t>(layer) * 2 + 0) * d.cap * kvd;
    const float* v = kv + (static_cast<int64_t>(layer) * 2 + 1) * d.cap * kvd;
    gemm_->attention(qkv_, ld_qkv_, k, v, kvd, rows, d.pos, sh_.n_head, sh_.n_head_kv, sh_.head_dim, sh_.scale,
                     attn_s_, att_, ld_att_);
}

void GpuBackend::upload_slots(int n) {
    LOOM_GPU_CHECK(gpuMemcpyAsync(slots_dev_, slots_host_, sizeof(SlotDesc) * static_cast<size_t>(n),
                                  gpuMemcpyHostToDevice, stream_));
}

void GpuBackend::ensure_part(int splits, int nb) {
    const size_t need = static_cast<size_t>(splits) * static_cast<size_t>(nb) * static_cast<size_t>(sh_.n_head) *
                        static_cast<size_t>(sh_.head_dim + 2);
    if (need <= part_elems_) return;
    sync("attention buffer");
    for (auto& [k, g] : graphs_) {  // they point at the old buffer
        (void)gpuGraphExecDestroy(g.second);
        (void)gpuGraphDestroy(g.first);
    }
    graphs_.clear();
    if (part_) (void)gpuFree(part_);
    part_ = nullptr;
    size_t cap = std::max<size_t>(need, part_elems_ * 2);
    void* p = nullptr;
    LOOM_GPU_CHECK(gpuMalloc(&p, cap * sizeof(float)));
    part_ = static_cast<float*>(p);
    part_elems_ = cap;
}

void GpuBackend::run_decode(int nb, int splits) {
    cur_splits_ = splits;
#if LOOM_GPU_HAS_GRAPHS
    if (opts_.graphs && nb <= 8 && !profiling_) {
        const auto key = std::make_pair(nb, splits);
        auto it = graphs_.find(key);
        if (it == graphs_.end()) {
            auto capture = [&] {
                gpuGraph_t g = nullptr;
                gpuGraphExec_t e = nullptr;
                LOOM_GPU_CHECK(gpuStreamBeginCapture(stream_));
                try {
                    forward(nb, true);
                } catch (...) {
                    (void)gpuStreamEndCapture(stream_, &g);
                    if (g) (void)gpuGraphDestroy(g);
                    throw;
                }
                LOOM_GPU_CHECK(gpuStreamEndCapture(stream_, &g));
                try {
                    LOOM_GPU_CHECK(gpuGraphInstantiate(&e, g));
                } catch (...) {
                    (void)gpuGraphDestroy(g);
                    throw;
                }
                return graphs_.emplace(key, std::make_pair(g, e)).first;
            };
            try {
                it = capture();
            } catch (const GpuError& err) {
                if (!pdl_) throw;
                // Programmatic dependent launches refused in a graph: capture without them.
                std::fprintf(stderr, "loom-gpu: decode graph with dependent launches failed (%s); without them\n",
                             err.what());
                (void)gpuGetLastError();
                pdl_ = false;
                it = capture();
            }
        }
        LOOM_GPU_CHECK(gpuGraphLaunch(it->second.second, stream_));
        return;
    }
#endif
    forward(nb, true);
}

void GpuBackend::decode_batch(std::span<engine::Sequence* const> seqs, std::span<const int32_t> tokens) {
    for (size_t g0 = 0; g0 < seqs.size(); g0 += static_cast<size_t>(opts_.max_batch)) {
        const int nb = static_cast<int>(std::min(seqs.size() - g0, static_cast<size_t>(opts_.max_batch)));
        int max_kv = 1;
        for (int i = 0; i < nb; ++i) {
            auto& s = static_cast<GpuSequence&>(*seqs[g0 + static_cast<size_t>(i)]);
            const int32_t t = tokens[g0 + static_cast<size_t>(i)];
            if (s.n_past() + 1 > s.capacity) throw std::length_error("sequence is full");
            if (t < 0 || t >= V_) throw std::out_of_range("token id " + std::to_string(t) + " out of range");
            SlotDesc& d = slots_host_[i];
            d.token = t;
            d.pos = static_cast<int32_t>(s.n_past());
            d.cap = static_cast<int32_t>(s.capacity);
            d.kv = s.kv;
            d.logits = s.logits;
            max_kv = std::max(max_kv, d.pos + 1);
        }
        int splits = 1;
        const int span = attn_decode_span(sh_);
        while (splits * span < max_kv) splits *= 2;
        ensure_part(splits, nb);
        upload_slots(nb);
        run_decode(nb, splits);
        sync("decode");
        for (int i = 0; i < nb; ++i) {
            auto& s = static_cast<GpuSequence&>(*seqs[g0 + static_cast<size_t>(i)]);
            s.advance(1);
            s.has_logits = true;
        }
    }
}

void GpuBackend::eval(engine::Sequence& sq, std::span<const int32_t> tokens, std::vector<engine::SampleResult>* scores,
                      int prompt_k) {
    auto& s = static_cast<GpuSequence&>(sq);
    if (tokens.empty()) return;
    if (s.n_past() + static_cast<int64_t>(tokens.size()) > s.capacity) throw std::length_error("sequence is full");
    for (int32_t t : tokens)
        if (t < 0 || t >= V_) throw std::out_of_range("token id " + std::to_string(t) + " out of range");
    if (!scores && tokens.size() == 1) {
        engine::Sequence* one[1] = {&sq};
        decode_batch(one, tokens);
        return;
    }
    const auto n = static_cast<int64_t>(tokens.size());
    const auto& hp = w_.hp;
    for (int64_t c0 = 0; c0 < n; c0 += opts_.prefill_chunk) {
        const int m = static_cast<int>(std::min<int64_t>(opts_.prefill_chunk, n - c0));
        std::memcpy(tokens_host_, tokens.data() + c0, sizeof(int32_t) * static_cast<size_t>(m));
        SlotDesc& d = slots_host_[0];
        d.token = tokens[static_cast<size_t>(c0)];
        d.pos = static_cast<int32_t>(s.n_past());
        d.cap = static_cast<int32_t>(s.capacity);
        d.kv = s.kv;
        d.logits = s.logits;
        LOOM_GPU_CHECK(gpuMemcpyAsync(tokens_dev_, tokens_host_, sizeof(int32_t) * static_cast<size_t>(m),
                                      gpuMemcpyHostToDevice, stream_));
        upload_slots(1);
        forward(m, false);
        if (scores) {
            // Rows t < m predict token c0 + t + 1; scored 64 rows at a time.
            for (int r0 = 0; r0 < m; r0 += 64) {
                const int rr = std::min(64, m - r0);
                int nt = 0;
                while (nt < rr && c0 + r0 + nt + 1 < n) ++nt;
                if (nt == 0) break;
                const bool h16 = nt > 8 && f16_in_;
                rmsnorm(x_ + static_cast<int64_t>(r0) * ld_d_, ld_d_, dm_->output_norm, static_cast<int>(d_), nt,
                        hp.rms_eps, xn_, ld_d_, h16 ? xh_ : nullptr, ld_d_, stream_);
                output_rows(nt, logits_b_, ld_v_);
                sync("prompt scoring");  // tokens_host_ is reused below
                for (int t = 0; t < nt; ++t) tokens_host_[t] = tokens[static_cast<size_t>(c0 + r0 + t + 1)];
                LOOM_GPU_CHECK(gpuMemcpyAsync(tokens_dev_, tokens_host_, sizeof(int32_t) * static_cast<size_t>(nt),
                                              gpuMemcpyHostToDevice, stream_));
                score_rows(logits_b_, ld_v_, static_cast<int>(V_), nt, tokens_dev_, prompt_k, sout_dev_, stream_);
                LOOM_GPU_CHECK(gpuMemcpyAsync(sout_host_, sout_dev_, sizeof(SampleOut) * static_cast<size_t>(nt),
                                              gpuMemcpyDeviceToHost, stream_));
                sync("prompt scoring");
                for (int t = 0; t < nt; ++t) {
                    const SampleOut& o = sout_host_[t];
                    if (o.nan) throw std::runtime_error("the model produced NaN logits");
                    engine::SampleResult r;
                    r.token = o.token;
                    r.logprob = o.logprob;
                    for (int j = 0; j < o.n_top; ++j) r.top.emplace_back(o.top_id[j], o.top_lp[j]);
                    scores->push_back(std::move(r));
                }
            }
        }
        if (c0 + m == n) {
            rmsnorm(x_ + static_cast<int64_t>(m - 1) * ld_d_, ld_d_, dm_->output_norm, static_cast<int>(d_), 1,
                    hp.rms_eps, xn_, ld_d_, nullptr, ld_d_, stream_);
            output_rows(1, s.logits, ld_v_);
        }
        sync("prefill");
        s.advance(m);
    }
    s.has_logits = true;
}

OpTimes GpuBackend::profile_decode(std::span<engine::Sequence* const> seqs, std::span<const int32_t> tokens) {
    return profile([&] { decode_batch(seqs, tokens); });
}

OpTimes GpuBackend::profile_prefill(engine::Sequence& seq, std::span<const int32_t> tokens) {
    return profile([&] { eval(seq, tokens); });
}

OpTimes GpuBackend::profile(const std::function<void()>& work) {
    for (auto& e : events_) (void)gpuEventDestroy(e.second);
    events_.clear();
    profiling_ = true;
    try {
        tick("start");
        work();
        tick("end");
    } catch (...) {
        profiling_ = false;
        throw;
    }
    profiling_ = false;
    OpTimes out;
    for (size_t i = 1; i < events_.size(); ++i) {
        float ms = 0;
        LOOM_GPU_CHECK(gpuEventElapsedTime(&ms, events_[i - 1].second, events_[i].second));
        auto it = std::find_if(out.ms.begin(), out.ms.end(), [&](const auto& p) { return p.first == events_[i].first; });
        if (it == out.ms.end()) out.ms.emplace_back(events_[i].first, ms);
        else it->second += ms;
    }
    return out;
}

engine::SampleResult GpuBackend::sample(engine::Sequence& sq, const engine::SamplingParams& params,
                                        const engine::TokenHistory& history, double u) {
    auto& s = static_cast<GpuSequence&>(sq);
    if (!s.has_logits) throw std::logic_error("sample() before eval()");
    return sampler_->sample(s.logits, params, history, u);
}

std::unique_ptr<engine::Backend> make_gpu_backend(const std::string& path, const GpuOptions& opts) {
    return std::make_unique<GpuBackend>(path, opts);
}

}  // namespace loom::gpu
