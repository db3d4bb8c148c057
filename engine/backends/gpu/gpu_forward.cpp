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

void GpuBackend::linear(const DevMatrix* const* mats, const Route* const* routes, float* const* ys, int nmat, int rows,
                        const float* x32, int64_t ldx, const uint16_t* x16, int64_t ldx16, int64_t ldy, bool add,
                        const float* norm_w, const int8_t* roles, int layer) {
    if (rows <= 0) return;
    Kernel k[3];
    if (nmat > 3) throw std::logic_error("linear: more than 3 matrices");
    bool parts = false, sums = false, mv = false;
    for (int i = 0; i < nmat; ++i) {
        k[i] = routes[i]->at(rows);
        parts = parts || reads_split_parts(k[i]);
        sums = sums || k[i] == Kernel::QgemmExact;
        mv = mv || is_matvec(k[i]);
    }
    if ((norm_w || roles) && !mv) throw std::logic_error("fused RMSNorm or RoPE needs the matvec path");
    if (mv) {
        // Consecutive matrices of one type and width: one launch of up to 3 segments.
        for (int i = 0; i < nmat;) {
            if (!is_matvec(k[i])) throw std::logic_error("linear: matvec and GEMM kernels in one call");
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
                a.rows = in_.rows.dev;
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
            a.fixed_tiling = k[i] == Kernel::MatvecFixed;
            a.single = opts_.tuning.matvec_single;  // matvec() takes the single-vector kernel per group of one
            matvec_rows(a, rows, stream_);
            i = j;
        }
        return;
    }
    // Split products: the input's F16 high and low parts (and for the decode GEMM's exact kernel
    // their block sums), once for every matrix of the call (they share x32 and its width).
    const int K0 = static_cast<int>(mats[0]->cols);
    if (parts && act_.xs_hi)
        to_f16(x32, ldx, K0, rows, act_.xs_hi, act_.ld_xs, stream_, act_.xs_lo, sums ? act_.xs_sum : nullptr,
               act_.ld_sum);
    for (int i = 0; i < nmat; ++i) {
        const DevMatrix& m = *mats[i];
        const int K = static_cast<int>(m.cols);
        switch (k[i]) {
            case Kernel::QgemmExact: {
                const QgLow low{act_.xs_lo, act_.xs_sum, act_.ld_sum};
                qgemm(m, nullptr, act_.xs_hi, act_.ld_xs, rows, ys[i], ldy, add, act_.qg_part, stream_, true, 0, true,
                      &low);
                break;
            }
            case Kernel::QgemmFrag:
            case Kernel::QgemmTile: {
                // qgemm takes its fragment kernel for Q4_K and Q6_K with F16 activations unless told not to.
                const bool frag = k[i] == Kernel::QgemmFrag;
                qgemm(m, x32, x16, x16 ? ldx16 : ldx, rows, ys[i], ldy, add, act_.qg_part, stream_, frag, 0, frag);
                break;
            }
            case Kernel::Gemm: {
                const bool h = m.type == kF16;
                gemm_->run(m.data, h, static_cast<int64_t>(m.row_bytes / (h ? 2 : 4)), x32, ldx, x16, ldx16, rows,
                           static_cast<int>(m.rows), K, ys[i], ldy, add);
                break;
            }
            case Kernel::GemmSplit:  // F16 weights are exact, only the input has two parts
                gemm_->run_split(reinterpret_cast<const uint16_t*>(m.data), nullptr,
                                 static_cast<int64_t>(m.row_bytes / 2), x32, ldx, act_.xs_hi, act_.xs_lo, act_.ld_xs,
                                 rows, static_cast<int>(m.rows), K, ys[i], ldy, add);
                break;
            case Kernel::DequantGemm:
            case Kernel::DequantGemmSplit: {
                const bool split = k[i] == Kernel::DequantGemmSplit;
                const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(act_.wscratch_elems) / m.cols);
                for (int64_t r0 = 0; r0 < m.rows; r0 += step) {
                    const int64_t n = std::min(step, m.rows - r0);
                    dequant_f16(m, r0, n, act_.wscratch, m.cols, stream_, act_.wscratch_lo);
                    if (split)
                        gemm_->run_split(act_.wscratch, act_.wscratch_lo, m.cols, x32, ldx, act_.xs_hi, act_.xs_lo,
                                         act_.ld_xs, rows, static_cast<int>(n), K, ys[i] + r0, ldy, add);
                    else
                        gemm_->run(act_.wscratch, true, m.cols, x32, ldx, x16, ldx16, rows, static_cast<int>(n), K,
                                   ys[i] + r0, ldy, add);
                }
                break;
            }
            default: throw std::logic_error("linear: a matvec kernel on the GEMM path");
        }
    }
}

void GpuBackend::ffn(const DevLayer& L, const LayerPlan& P, int rows, bool fuse) {
    const Kernel kg = P.gate.at(rows);
    const bool mv = is_matvec(kg);
    if (mv && L.gate.type == L.up.type) {
        MatvecArgs a;  // gate and up in one launch, SwiGLU in its epilogue
        a.norm_w = fuse ? L.ffn_norm : nullptr;
        a.norm_eps = w_.hp.rms_eps;
        a.type = L.gate.type;
        a.cols = static_cast<int32_t>(L.gate.cols);
        a.row_bytes = L.gate.row_bytes;
        a.seg[0] = MvSeg{L.gate.data, static_cast<int32_t>(L.gate.rows), act_.g};
        a.seg[1] = MvSeg{L.up.data, static_cast<int32_t>(L.up.rows), nullptr};
        a.nseg = 2;
        a.x = fuse ? act_.x : act_.xn;
        a.x_stride = act_.ld_d;
        a.y_stride = act_.ld_ff;
        a.mode = MvMode::SwiGLU;
        a.fixed_tiling = kg == Kernel::MatvecFixed;
        a.single = opts_.tuning.matvec_single;
        matvec_rows(a, rows, stream_);
    } else {
        // One product over gate | up where they are one matrix (DevLayer::gate_up; GEMM path).
        const bool one = !mv && L.gate_up.data;
        const DevMatrix* m2[2] = {one ? &L.gate_up : &L.gate, &L.up};
        const Route* r2[2] = {one ? &P.gate_up : &P.gate, &P.up};
        float* y2[2] = {act_.ffy, act_.ffy + ff_};
        if (fuse) linear(m2, r2, y2, 2, rows, act_.x, act_.ld_d, nullptr, 0, act_.ld_ff2, false, L.ffn_norm);
        else linear(m2, r2, y2, one ? 1 : 2, rows, act_.xn, act_.ld_d, act_.xh, act_.ld_d, act_.ld_ff2, false);
        swiglu(act_.ffy, act_.ld_ff2, static_cast<int>(ff_), rows, act_.g, act_.ld_ff,
               (!mv && plan_.f16_in) ? act_.gh : nullptr, act_.ld_ff, stream_);
    }
    tick("ffn_gate_up");
    const DevMatrix* md[1] = {&L.down};
    const Route* rd[1] = {&P.down};
    float* yd[1] = {act_.x};
    linear(md, rd, yd, 1, rows, act_.g, act_.ld_ff, act_.gh, act_.ld_ff, act_.ld_d, true);
    tick("ffn_down");
}

void GpuBackend::attention(int T, int layer) {
    if (plan_.prefill_attn == PrefillAttnKernel::DecodeAll) {
        // Every query, prefill chunks included, through split-K attention with the fixed span.
        for (int g0 = 0; g0 < T; g0 += act_.part_rows) {
            const int n = std::min(act_.part_rows, T - g0);
            attn_decode(act_.qkv + static_cast<int64_t>(g0) * act_.ld_qkv, act_.ld_qkv, in_.rows.dev + g0, n, layer,
                        sh_, kv_, in_.span, in_.splits, act_.part, act_.att + static_cast<int64_t>(g0) * act_.ld_att,
                        act_.ld_att, stream_);
        }
        return;
    }
    // The 1-token rows and the short chunks' rows (build_rows), act_.part_rows at a time.
    for (int g0 = 0; g0 < in_.n_dec; g0 += act_.part_rows) {
        const int n = std::min(act_.part_rows, in_.n_dec - g0);
        attn_decode(act_.qkv + static_cast<int64_t>(g0) * act_.ld_qkv, act_.ld_qkv, in_.rows.dev + g0, n, layer, sh_,
                    kv_, in_.span, in_.splits, act_.part, act_.att + static_cast<int64_t>(g0) * act_.ld_att,
                    act_.ld_att, stream_);
    }
    if (plan_.prefill_attn ==
        PrefillAttnKernel::Flash) {  // in_.tiles holds attn_flash_tile_queries queries a tile (build_rows)
        attn_prefill_flash(act_.qkv, act_.ld_qkv, in_.tiles.dev, static_cast<int>(in_.tiles.n), layer, sh_, kv_,
                           act_.att, act_.ld_att, stream_);
        return;
    }
    if (plan_.prefill_attn == PrefillAttnKernel::GemmSplit || plan_.prefill_attn == PrefillAttnKernel::Gemm16) {
        for (const PrefillTile& c : in_.chunks) prefill_attention_gemm(c, layer);
        return;
    }
    attn_prefill(act_.qkv, act_.ld_qkv, in_.tiles.dev, static_cast<int>(in_.tiles.n), layer, sh_, kv_, act_.att,
                 act_.ld_att, stream_);
}

void GpuBackend::prefill_attention_gemm(const PrefillTile& c, int layer) {
    // Column-major views (cuBLAS): K and V of KV head g are head_dim x n_keys matrices at act_.kc/act_.vc +
    // g * head_dim with leading dimension nkv; the chunk's queries of head g are head_dim x (n *
    // group) at act_.qp + g * n * group * head_dim (q_pack_f16); scores of a sub-block of m queries
    // are n_keys x (m * group) per KV head, ld = n_keys rounded up to 8. Split (PrefillAttnKernel::GemmSplit): the
    // low parts of Q and P add a second product each, accumulated into the first's output.
    const bool attn_split = plan_.prefill_attn == PrefillAttnKernel::GemmSplit;
    const int hd = sh_.head_dim, group = sh_.n_head / sh_.n_head_kv, nkvh = sh_.n_head_kv;
    const int n = c.n, n_ctx = c.pos0 + c.n;
    const int64_t head_q = int64_t{n} * group * hd;  // packed elements per KV head
    kv_gather_f16(kv_, layer, c.table, n_ctx, act_.kc, act_.vc, stream_);
    q_pack_f16(act_.qkv + int64_t{c.row0} * act_.ld_qkv, act_.ld_qkv, n, sh_, act_.qp,
               attn_split ? act_.qp_lo : nullptr, stream_);
    const int64_t ld_max = (int64_t{n_ctx} + 7) / 8 * 8;
    const int rq = static_cast<int>(std::min<int64_t>(n, act_.attn_elems / (int64_t{sh_.n_head} * ld_max)));
    for (int r0 = 0; r0 < n; r0 += rq) {
        const int m = std::min(rq, n - r0), cols = m * group;
        const int n_keys = c.pos0 + r0 + m;
        const int64_t ld = (int64_t{n_keys} + 7) / 8 * 8;
        const int64_t q_off = int64_t{r0} * group * hd;
        for (int part = 0; part < (attn_split ? 2 : 1); ++part)
            gemm_->batched_f16(true, n_keys, cols, hd, sh_.scale, act_.kc, nkv_, hd,
                               (part ? act_.qp_lo : act_.qp) + q_off, hd, head_q, act_.ss, ld, cols * ld, nkvh,
                               part == 1);
        attn_softmax_causal(act_.ss, act_.pp, attn_split ? act_.pp_lo : nullptr, ld, nkvh * cols, cols, group,
                            c.pos0 + r0, n_keys, stream_);
        for (int part = 0; part < (attn_split ? 2 : 1); ++part)
            gemm_->batched_f16(false, hd, cols, n_keys, 1.0f, act_.vc, nkv_, hd, part ? act_.pp_lo : act_.pp, ld,
                               cols * ld, act_.op + q_off, hd, head_q, nkvh, part == 1);
    }
    o_unpack(act_.op, n, sh_, act_.att + int64_t{c.row0} * act_.ld_att, act_.ld_att, stream_);
}

void GpuBackend::forward(int T) {
    const auto& hp = w_.hp;
    const bool mv = plan_.matvec(T);
    const bool h16 = !mv && plan_.f16_in;
    // RMSNorm fused into the next matvec for a single row over plain weights, or one row of the
    // single-vector kernel (ForwardPlan::fuse_norm).
    const bool fuse = plan_.fuse_norm(T);
    embed(dm_->tok_embd, in_.rows.dev, T, act_.x, act_.ld_d, stream_);
    tick("embed");
    for (int l = 0; l < hp.n_layer; ++l) {
        const DevLayer& L = dm_->layers[static_cast<size_t>(l)];
        const LayerPlan& P = plan_.layers[static_cast<size_t>(l)];
        const DevMatrix* m3[3] = {&L.wq, &L.wk, &L.wv};
        const Route* r3[3] = {&P.q, &P.k, &P.v};
        float* y3[3] = {act_.qkv, act_.qkv + nq_, act_.qkv + nq_ + nkv_};
        // One product over q | k | v where they are one matrix (DevLayer::wqkv; GEMM path), or
        // one over q | k and one over v (DevLayer::wqk).
        int n3 = 3;
        if (!mv && L.wqkv.data) {
            m3[0] = &L.wqkv, r3[0] = &P.qkv;
            n3 = 1;
        } else if (!mv && L.wqk.data) {
            m3[0] = &L.wqk, m3[1] = &L.wv;
            r3[0] = &P.qk, r3[1] = &P.v;
            y3[1] = y3[2];
            n3 = 2;
        }
        // RoPE and the paged K/V store fused into the QKV matvec's epilogue.
        const bool rope_fused = mv && P.rope_fused;
        static const int8_t kRoles[3] = {1, 2, 3};
        const int8_t* roles = rope_fused ? kRoles : nullptr;
        if (fuse) {
            linear(m3, r3, y3, 3, T, act_.x, act_.ld_d, nullptr, 0, act_.ld_qkv, false, L.attn_norm, roles, l);
        } else {
            rmsnorm(act_.x, act_.ld_d, nullptr, L.attn_norm, static_cast<int>(d_), T, hp.rms_eps, act_.xn, act_.ld_d,
                    h16 ? act_.xh : nullptr, act_.ld_d, stream_);
            tick("rmsnorm");
            linear(m3, r3, y3, n3, T, act_.xn, act_.ld_d, act_.xh, act_.ld_d, act_.ld_qkv, false, nullptr, roles, l);
        }
        tick("qkv");
        if (!rope_fused) {
            rope_store(act_.qkv, act_.ld_qkv, T, sh_, l, in_.rows.dev, kv_, rope_cs_, L.bq, L.bk, L.bv, L.q_norm,
                       L.k_norm, stream_);
            tick("rope_kv_store");
        }
        attention(T, l);
        if (h16) to_f16(act_.att, act_.ld_att, static_cast<int>(nq_), T, act_.atth, act_.ld_att, stream_);
        tick("attention");
        const DevMatrix* mo[1] = {&L.wo};
        const Route* ro[1] = {&P.o};
        float* yo[1] = {act_.x};
        linear(mo, ro, yo, 1, T, act_.att, act_.ld_att, act_.atth, act_.ld_att, act_.ld_d, true);
        tick("attn_out");
        if (!fuse) {
            rmsnorm(act_.x, act_.ld_d, nullptr, L.ffn_norm, static_cast<int>(d_), T, hp.rms_eps, act_.xn, act_.ld_d,
                    h16 ? act_.xh : nullptr, act_.ld_d, stream_);
            tick("rmsnorm");
        }
        ffn(L, P, T, fuse);
    }
}

void GpuBackend::logits(const int32_t* idx, int rows) {
    const DevMatrix* mo[1] = {&dm_->output};
    const Route* ro[1] = {&plan_.output};
    float* yo[1] = {act_.logits};
    if (plan_.fuse_norm(rows) && !idx) {
        linear(mo, ro, yo, 1, rows, act_.x, act_.ld_d, nullptr, 0, act_.ld_v, false, dm_->output_norm);
    } else {
        const bool h16 = !plan_.matvec(rows) && plan_.f16_in;
        rmsnorm(act_.x, act_.ld_d, idx, dm_->output_norm, static_cast<int>(d_), rows, w_.hp.rms_eps, act_.xn, act_.ld_d,
                h16 ? act_.xh : nullptr, act_.ld_d, stream_);
        linear(mo, ro, yo, 1, rows, act_.xn, act_.ld_d, act_.xh, act_.ld_d, act_.ld_v, false);
    }
    tick("output");
}

}  // namespace loom::gpu
