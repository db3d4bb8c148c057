// The GPU backend's forward pass over a step's flat batch of token rows: embedding, per layer
// RMSNorm, the Q/K/V projection, RoPE and the paged K/V store, attention, the output
// projection and the SwiGLU feed-forward, then the logits of chosen rows; see gpu_backend.hpp.
// The arithmetic mirrors engine/backends/cpu/cpu_backend.cpp.
#include <algorithm>
#include <stdexcept>

#include "engine/backends/gpu/gpu_backend.hpp"

namespace loom::gpu {
namespace {

constexpr int kMvGroup = 8;  // activation vectors per matvec launch

// Runs the matvec `a` over `rows` activation vectors, kMvGroup at a time: group g reads x rows
// g*8.., writes y rows g*8.. of every segment and uses row descriptors g*8.. for its epilogue.
void matvec_rows(MatvecArgs a, int rows, gpuStream_t s) {
    const MatvecArgs base = a;
    for (int g0 = 0; g0 < rows; g0 += kMvGroup) {
        a.nb = std::min(kMvGroup, rows - g0);
        a.x = base.x + static_cast<int64_t>(g0) * base.x_stride;
        for (int i = 0; i < base.nseg; ++i)
            if (base.seg[i].y) a.seg[i].y = base.seg[i].y + static_cast<int64_t>(g0) * base.y_stride;
        if (base.rows) a.rows = base.rows + g0;
        matvec(a, s);
    }
}

}  // namespace

bool GpuBackend::rope_fusable(const DevLayer& L) const {
    return opts_.fuse_rope && !opts_.batch_invariant && !sh_.neox && sh_.rope_dim % 2 == 0 && sh_.head_dim % 2 == 0 &&
           !L.bq && !L.bk && !L.bv && !L.q_norm && !L.k_norm;
}

void GpuBackend::linear(const DevMatrix* const* mats, float* const* ys, int nmat, int rows, const float* x32,
                        int64_t ldx, const uint16_t* x16, int64_t ldx16, int64_t ldy, bool add, const float* norm_w,
                        const int8_t* roles, int layer) {
    if (rows <= 0) return;
    if ((norm_w || roles) && !mv(rows)) throw std::logic_error("fused RMSNorm or RoPE needs the matvec path");
    if (mv(rows)) {
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
            if (roles) {
                a.rows = rows_.dev;
                a.kv = kv_;
                a.rope_cs = rope_cs_;
                a.layer = layer;
                a.head_dim = sh_.head_dim;
                a.rope_dim = sh_.rope_dim;
            }
            a.x = x32;
            a.x_stride = ldx;
            a.y_stride = ldy;
            a.mode = add ? MvMode::Add : MvMode::Store;
            a.norm_w = norm_w;
            a.norm_eps = w_.hp.rms_eps;
            a.fixed_tiling = opts_.batch_invariant;
            a.single = opts_.matvec_single;
            matvec_rows(a, rows, stream_);
            i = j;
        }
        return;
    }
    const bool split = opts_.split_products;
    // The decode GEMM takes Q4_K and Q6_K matrices (its fragment kernels) up to decode_gemm_rows
    // rows, the others (its tile kernel) and the exact kernel up to tile_gemm_rows_.
    const bool tc_tile = rows <= tile_gemm_rows_;
    auto tc = [&](const DevMatrix& m) {
        const bool frag = !split && qgemm_frag_takes(m.type, m.cols, x16 != nullptr, !opts_.decode_gemm_tiled,
                                                     !opts_.decode_gemm_tiled);
        return frag ? rows <= opts_.decode_gemm_rows : tc_tile;
    };
    // Split products: the input's F16 high and low parts (and for the decode GEMM their block
    // sums), once for every matrix of the call (they share x32 and its width), unless every
    // matrix is F32 (cuBLAS reads x32 then).
    const int K0 = static_cast<int>(mats[0]->cols);
    const bool sums = split && tc_tile && xs_sum_ && K0 % 256 == 0;
    bool parts = false;
    for (int i = 0; i < nmat; ++i) parts = parts || mats[i]->type != kF32;
    if (split && xs_hi_ && parts)
        to_f16(x32, ldx, K0, rows, xs_hi_, ld_xs_, stream_, xs_lo_, sums ? xs_sum_ : nullptr, ld_sum_);
    for (int i = 0; i < nmat; ++i) {
        const DevMatrix& m = *mats[i];
        const int K = static_cast<int>(m.cols);
        if (sums && qgemm_exact_supports(m.type, m.cols)) {  // split: the decode GEMM's exact kernel
            const QgLow low{xs_lo_, xs_sum_, ld_sum_};
            qgemm(m, nullptr, xs_hi_, ld_xs_, rows, ys[i], ldy, add, qg_part_, stream_, true, 0, true, &low);
            continue;
        }
        if (tc(m) && !split && qgemm_supports(m.type, m.cols) && (m.type != kF16 || opts_.decode_gemm_f16)) {
            qgemm(m, x32, x16, x16 ? ldx16 : ldx, rows, ys[i], ldy, add, qg_part_, stream_, !opts_.decode_gemm_tiled, 0,
                  !opts_.decode_gemm_tiled);
            continue;
        }
        if (m.type == kF32 || (m.type == kF16 && !split)) {
            const bool h = m.type == kF16;
            gemm_->run(m.data, h, static_cast<int64_t>(m.row_bytes / (h ? 2 : 4)), x32, ldx, x16, ldx16, rows,
                       static_cast<int>(m.rows), K, ys[i], ldy, add);
            continue;
        }
        if (m.type == kF16) {  // split: F16 weights are exact, only the input has two parts
            gemm_->run_split(reinterpret_cast<const uint16_t*>(m.data), nullptr, static_cast<int64_t>(m.row_bytes / 2),
                             x32, ldx, xs_hi_, xs_lo_, ld_xs_, rows, static_cast<int>(m.rows), K, ys[i], ldy, add);
            continue;
        }
        const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(wscratch_elems_) / m.cols);
        for (int64_t r0 = 0; r0 < m.rows; r0 += step) {
            const int64_t n = std::min(step, m.rows - r0);
            dequant_f16(m, r0, n, wscratch_, m.cols, stream_, wscratch_lo_);
            if (split)
                gemm_->run_split(wscratch_, wscratch_lo_, m.cols, x32, ldx, xs_hi_, xs_lo_, ld_xs_, rows,
                                 static_cast<int>(n), K, ys[i] + r0, ldy, add);
            else
                gemm_->run(wscratch_, true, m.cols, x32, ldx, x16, ldx16, rows, static_cast<int>(n), K, ys[i] + r0, ldy,
                           add);
        }
    }
}

void GpuBackend::ffn(const DevLayer& L, int rows, bool fuse) {
    if (mv(rows) && L.gate.type == L.up.type) {
        MatvecArgs a;  // gate and up in one launch, SwiGLU in its epilogue
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
        a.mode = MvMode::SwiGLU;
        a.fixed_tiling = opts_.batch_invariant;
        a.single = opts_.matvec_single;
        matvec_rows(a, rows, stream_);
    } else {
        // One product over gate | up where they are one matrix (DevLayer::gate_up; GEMM path).
        const bool one = !mv(rows) && L.gate_up.data;
        const DevMatrix* m2[2] = {one ? &L.gate_up : &L.gate, &L.up};
        float* y2[2] = {ffy_, ffy_ + ff_};
        if (fuse) linear(m2, y2, 2, rows, x_, ld_d_, nullptr, 0, ld_ff2_, false, L.ffn_norm);
        else linear(m2, y2, one ? 1 : 2, rows, xn_, ld_d_, xh_, ld_d_, ld_ff2_, false);
        swiglu(ffy_, ld_ff2_, static_cast<int>(ff_), rows, g_, ld_ff_, (!mv(rows) && f16_in_) ? gh_ : nullptr, ld_ff_,
               stream_);
    }
    tick("ffn_gate_up");
    const DevMatrix* md[1] = {&L.down};
    float* yd[1] = {x_};
    linear(md, yd, 1, rows, g_, ld_ff_, gh_, ld_ff_, ld_d_, true);
    tick("ffn_down");
}

void GpuBackend::attention(int T, int layer) {
    if (opts_.batch_invariant) {
        // Every query, prefill chunks included, through split-K attention with the fixed span.
        for (int g0 = 0; g0 < T; g0 += part_rows_) {
            const int n = std::min(part_rows_, T - g0);
            attn_decode(qkv_ + static_cast<int64_t>(g0) * ld_qkv_, ld_qkv_, rows_.dev + g0, n, layer, sh_, kv_, span_,
                        splits_, part_, att_ + static_cast<int64_t>(g0) * ld_att_, ld_att_, stream_);
        }
        return;
    }
    // The 1-token rows and the short chunks' rows (build_rows), part_rows_ at a time.
    for (int g0 = 0; g0 < n_dec_; g0 += part_rows_) {
        const int n = std::min(part_rows_, n_dec_ - g0);
        attn_decode(qkv_ + static_cast<int64_t>(g0) * ld_qkv_, ld_qkv_, rows_.dev + g0, n, layer, sh_, kv_, span_,
                    splits_, part_, att_ + static_cast<int64_t>(g0) * ld_att_, ld_att_, stream_);
    }
    if (attn_flash_) {  // tiles_ holds attn_flash_tile_queries queries a tile (build_rows)
        attn_prefill_flash(qkv_, ld_qkv_, tiles_.dev, static_cast<int>(tiles_.n), layer, sh_, kv_, att_, ld_att_,
                           stream_);
        return;
    }
    if (attn_gemm_) {
        for (const PrefillTile& c : chunks_) prefill_attention_gemm(c, layer);
        return;
    }
    attn_prefill(qkv_, ld_qkv_, tiles_.dev, static_cast<int>(tiles_.n), layer, sh_, kv_, att_, ld_att_, stream_);
}

void GpuBackend::prefill_attention_gemm(const PrefillTile& c, int layer) {
    // Column-major views (cuBLAS): K and V of KV head g are head_dim x n_keys matrices at kc_/vc_ +
    // g * head_dim with leading dimension nkv; the chunk's queries of head g are head_dim x (n *
    // group) at qp_ + g * n * group * head_dim (q_pack_f16); scores of a sub-block of m queries
    // are n_keys x (m * group) per KV head, ld = n_keys rounded up to 8. Split (attn_split_): the
    // low parts of Q and P add a second product each, accumulated into the first's output.
    const int hd = sh_.head_dim, group = sh_.n_head / sh_.n_head_kv, nkvh = sh_.n_head_kv;
    const int n = c.n, n_ctx = c.pos0 + c.n;
    const int64_t head_q = int64_t{n} * group * hd;  // packed elements per KV head
    kv_gather_f16(kv_, layer, c.table, n_ctx, kc_, vc_, stream_);
    q_pack_f16(qkv_ + int64_t{c.row0} * ld_qkv_, ld_qkv_, n, sh_, qp_, attn_split_ ? qp_lo_ : nullptr, stream_);
    const int64_t ld_max = (int64_t{n_ctx} + 7) / 8 * 8;
    const int rq = static_cast<int>(std::min<int64_t>(n, attn_elems_ / (int64_t{sh_.n_head} * ld_max)));
    for (int r0 = 0; r0 < n; r0 += rq) {
        const int m = std::min(rq, n - r0), cols = m * group;
        const int n_keys = c.pos0 + r0 + m;
        const int64_t ld = (int64_t{n_keys} + 7) / 8 * 8;
        const int64_t q_off = int64_t{r0} * group * hd;
        for (int part = 0; part < (attn_split_ ? 2 : 1); ++part)
            gemm_->batched_f16(true, n_keys, cols, hd, sh_.scale, kc_, nkv_, hd, (part ? qp_lo_ : qp_) + q_off, hd,
                               head_q, ss_, ld, cols * ld, nkvh, part == 1);
        attn_softmax_causal(ss_, pp_, attn_split_ ? pp_lo_ : nullptr, ld, nkvh * cols, cols, group, c.pos0 + r0, n_keys,
                            stream_);
        for (int part = 0; part < (attn_split_ ? 2 : 1); ++part)
            gemm_->batched_f16(false, hd, cols, n_keys, 1.0f, vc_, nkv_, hd, part ? pp_lo_ : pp_, ld, cols * ld,
                               op_ + q_off, hd, head_q, nkvh, part == 1);
    }
    o_unpack(op_, n, sh_, att_ + int64_t{c.row0} * ld_att_, ld_att_, stream_);
}

void GpuBackend::forward(int T) {
    const auto& hp = w_.hp;
    const bool h16 = !mv(T) && f16_in_;
    // RMSNorm fused into the next matvec for a single row over plain weights, or one or two rows
    // of the single-vector kernel (fuse_norm).
    const bool fuse = fuse_norm(T);
    embed(dm_->tok_embd, rows_.dev, T, x_, ld_d_, stream_);
    tick("embed");
    for (int l = 0; l < hp.n_layer; ++l) {
        const DevLayer& L = dm_->layers[static_cast<size_t>(l)];
        const DevMatrix* m3[3] = {&L.wq, &L.wk, &L.wv};
        float* y3[3] = {qkv_, qkv_ + nq_, qkv_ + nq_ + nkv_};
        // One product over q | k | v where they are one matrix (DevLayer::wqkv; GEMM path), or
        // one over q | k and one over v (DevLayer::wqk).
        int n3 = 3;
        if (!mv(T) && L.wqkv.data) {
            m3[0] = &L.wqkv;
            n3 = 1;
        } else if (!mv(T) && L.wqk.data) {
            m3[0] = &L.wqk, m3[1] = &L.wv;
            y3[1] = y3[2];
            n3 = 2;
        }
        // RoPE and the paged K/V store fused into the QKV matvec's epilogue.
        const bool rope_fused = mv(T) && rope_fusable(L);
        static const int8_t kRoles[3] = {1, 2, 3};
        const int8_t* roles = rope_fused ? kRoles : nullptr;
        if (fuse) {
            linear(m3, y3, 3, T, x_, ld_d_, nullptr, 0, ld_qkv_, false, L.attn_norm, roles, l);
        } else {
            rmsnorm(x_, ld_d_, nullptr, L.attn_norm, static_cast<int>(d_), T, hp.rms_eps, xn_, ld_d_,
                    h16 ? xh_ : nullptr, ld_d_, stream_);
            tick("rmsnorm");
            linear(m3, y3, n3, T, xn_, ld_d_, xh_, ld_d_, ld_qkv_, false, nullptr, roles, l);
        }
        tick("qkv");
        if (!rope_fused) {
            rope_store(qkv_, ld_qkv_, T, sh_, l, rows_.dev, kv_, rope_cs_, L.bq, L.bk, L.bv, L.q_norm, L.k_norm,
                       stream_);
            tick("rope_kv_store");
        }
        attention(T, l);
        if (h16) to_f16(att_, ld_att_, static_cast<int>(nq_), T, atth_, ld_att_, stream_);
        tick("attention");
        const DevMatrix* mo[1] = {&L.wo};
        float* yo[1] = {x_};
        linear(mo, yo, 1, T, att_, ld_att_, atth_, ld_att_, ld_d_, true);
        tick("attn_out");
        if (!fuse) {
            rmsnorm(x_, ld_d_, nullptr, L.ffn_norm, static_cast<int>(d_), T, hp.rms_eps, xn_, ld_d_,
                    h16 ? xh_ : nullptr, ld_d_, stream_);
            tick("rmsnorm");
        }
        ffn(L, T, fuse);
    }
}

void GpuBackend::logits(const int32_t* idx, int rows) {
    const DevMatrix* mo[1] = {&dm_->output};
    float* yo[1] = {logits_};
    if (fuse_norm(rows) && !idx) {
        linear(mo, yo, 1, rows, x_, ld_d_, nullptr, 0, ld_v_, false, dm_->output_norm);
    } else {
        const bool h16 = !mv(rows) && f16_in_;
        rmsnorm(x_, ld_d_, idx, dm_->output_norm, static_cast<int>(d_), rows, w_.hp.rms_eps, xn_, ld_d_,
                h16 ? xh_ : nullptr, ld_d_, stream_);
        linear(mo, yo, 1, rows, xn_, ld_d_, xh_, ld_d_, ld_v_, false);
    }
    tick("output");
}

}  // namespace loom::gpu
