// The GPU backend's step on the host side: validation of the plan, its flat batch of token
// rows, the upload, the results, and the decode graphs; see gpu_backend.hpp. Construction is in
// gpu_setup.cpp, the forward pass in gpu_forward.cpp, sampling in gpu_sample.cpp.
#include "engine/backends/gpu/gpu_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace loom::gpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

template <class T>
void GpuBackend::upload(Staged<T>& s) {
    if (s.n) LOOM_GPU_CHECK(gpuMemcpyAsync(s.dev, s.host, sizeof(T) * s.n, gpuMemcpyHostToDevice, stream_));
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
        if (!r.mask.empty() && r.mask.size() < in_.mask_words) bad(who + "token mask shorter than the vocabulary");
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
    in_.n_dec = 0;
    for (size_t i = 0; i < n_rows; ++i)
        if (plan.rows[i].tokens.size() == 1) order.push_back(i);
    for (size_t i = 0; i < n_rows; ++i)
        if (plan.rows[i].tokens.size() > 1 && short_chunk(plan.rows[i].tokens.size())) order.push_back(i);
    for (size_t i : order) in_.n_dec += static_cast<int>(plan.rows[i].tokens.size());
    for (size_t i = 0; i < n_rows; ++i)
        if (!short_chunk(plan.rows[i].tokens.size())) order.push_back(i);

    in_.rows.n = in_.tables.n = in_.tiles.n = in_.gather.n = in_.sample_rows.n = in_.score_rows.n = 0;
    in_.chunks.clear();
    int32_t max_pos = 0;
    in_.pure_decode = true;
    in_.nblk = 1;
    in_.any_mask = false;
    for (size_t i : order) {
        const engine::StepRow& r = plan.rows[i];
        const auto n = static_cast<int32_t>(r.tokens.size());
        const auto f = static_cast<int32_t>(in_.rows.n);
        const auto table = static_cast<int32_t>(in_.tables.n);
        const int64_t need = ceil_div(r.pos0 + n, kBlockTokens);
        std::copy_n(r.blocks.begin(), need, in_.tables.host + in_.tables.n);
        in_.tables.n += static_cast<size_t>(need);
        for (int32_t t = 0; t < n; ++t)
            in_.rows.host[in_.rows.n++] =
                RowDesc{r.tokens[static_cast<size_t>(t)], static_cast<int32_t>(r.pos0) + t, table, 0};
        in_.flat_start[i] = f;
        const bool dec_attn = n <= kShortChunkRows;
        if (dec_attn || exact()) max_pos = std::max(max_pos, static_cast<int32_t>(r.pos0) + n - 1);
        if (!dec_attn) in_.chunks.push_back(PrefillTile{f, n, static_cast<int32_t>(r.pos0), table});
        if (!dec_attn)
            for (int32_t q0 = 0; q0 < n; q0 += qpt_)
                in_.tiles.host[in_.tiles.n++] =
                    PrefillTile{f + q0, std::min(qpt_, n - q0), static_cast<int32_t>(r.pos0) + q0, table};
        in_.pure_decode = in_.pure_decode && n == 1 && r.sample && r.prompt_k < 0;
    }
    // Sampled rows (their last token), in flat order: in a pure-decode step sampled row k is flat row k.
    for (size_t i : order) {
        const engine::StepRow& r = plan.rows[i];
        in_.sample_at[i] = -1;
        if (!r.sample) continue;
        const auto k = static_cast<int32_t>(in_.sample_rows.n++);
        in_.sample_at[i] = k;
        in_.gather.host[in_.gather.n++] = in_.flat_start[i] + static_cast<int32_t>(r.tokens.size()) - 1;
        // A masked row's words go to entry k of in_.masks (packed by upload_masks, after the forward
        // pass is enqueued); the pointer is known now.
        const uint32_t* mask = r.mask.empty() ? nullptr : in_.masks.dev + static_cast<size_t>(k) * in_.mask_words;
        in_.any_mask = in_.any_mask || mask != nullptr;
        in_.sample_rows.host[k] = SampleRow{r.slot, k, r.u, mask};
        in_.nblk = std::max(in_.nblk, sampler_->blocks(r.slot));
    }
    // Prompt-scored rows: logits row j % act_.logit_rows of their group.
    for (size_t i : order) {
        const engine::StepRow& r = plan.rows[i];
        in_.score_at[i] = -1;
        if (r.prompt_k < 0) continue;
        in_.score_at[i] = static_cast<int>(in_.score_rows.n);
        for (size_t j = 0; j < r.targets.size(); ++j) {
            const auto e = static_cast<int32_t>(in_.score_rows.n++);
            in_.gather.host[in_.gather.n++] = in_.flat_start[i] + static_cast<int32_t>(j);
            in_.score_rows.host[e] = ScoreRow{e % act_.logit_rows, r.targets[j], r.prompt_k, 0};
        }
    }
    in_.span = attn_decode_span(sh_, in_.n_dec, max_pos, exact());
    in_.splits = 1;
    while (int64_t{in_.splits} * in_.span <= max_pos) in_.splits *= 2;
}

void GpuBackend::upload() {
    upload(in_.rows);
    upload(in_.tables);
    upload(in_.tiles);
    if (!in_.pure_decode) upload(in_.gather);  // a pure-decode step's sampled rows are its flat rows
    upload(in_.sample_rows);
    upload(in_.score_rows);
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
    const int T = static_cast<int>(in_.rows.n);
    const int ns = static_cast<int>(in_.sample_rows.n), nsc = static_cast<int>(in_.score_rows.n);
    tick("upload");
    ++steps_;
    if (in_.pure_decode && opts_.tuning.graphs && LOOM_GPU_HAS_GRAPHS && !profiling_) {
        decode_graph(T);
    } else {
        forward(T);
        for (int g0 = 0; g0 < nsc; g0 += act_.logit_rows) {
            const int g = std::min(act_.logit_rows, nsc - g0);
            logits(in_.gather.dev + ns + g0, g);
            score_rows(act_.logits, act_.ld_v, static_cast<int>(V_), in_.score_rows.dev + g0, g, in_.out_dev + ns + g0,
                       stream_);
            tick("prompt_scores");
        }
        if (ns) logits(in_.pure_decode ? nullptr : in_.gather.dev, ns);
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
    const int ns = static_cast<int>(in_.sample_rows.n), nsc = static_cast<int>(in_.score_rows.n);
    // The forward pass was enqueued by begin_step and runs while the caller built the masks;
    // now they are packed and copied, ordered before the sampling launches on the stream. No
    // mask this step: no copy.
    if (in_.any_mask) upload_masks(plan);
    if (ns) {
        sampler_->sample(act_.logits, act_.ld_v, in_.sample_rows.dev, ns, in_.nblk, in_.out_dev);
        tick("sample");
    }
    if (ns + nsc)
        LOOM_GPU_CHECK(gpuMemcpyAsync(in_.out_host, in_.out_dev, sizeof(SampleOut) * static_cast<size_t>(ns + nsc),
                                      gpuMemcpyDeviceToHost, stream_));
    sync("step");
    begun_ = false;  // only now: a throw before the sync leaves work that the next begin_step waits for
    finish(plan, out);
}

void GpuBackend::upload_masks(const engine::StepPlan& plan) {
    in_.masks.n = 0;
    for (size_t i = 0; i < plan.rows.size(); ++i) {
        const engine::StepRow& r = plan.rows[i];
        if (in_.sample_at[i] < 0 || r.mask.empty()) continue;
        const auto k = static_cast<size_t>(in_.sample_at[i]);
        std::copy_n(r.mask.begin(), in_.mask_words, in_.masks.host + k * in_.mask_words);
        in_.masks.n = std::max(in_.masks.n, (k + 1) * in_.mask_words);
    }
    upload(in_.masks);  // one copy: entries 0..last masked row (unmasked entries in between unread)
}

void GpuBackend::finish(const engine::StepPlan& plan, engine::StepOutput& out) {
    const int ns = static_cast<int>(in_.sample_rows.n);
    const std::string nan = "the model produced NaN logits";
    for (size_t i = 0; i < plan.rows.size(); ++i) {
        const engine::StepRow& r = plan.rows[i];
        if (in_.score_at[i] >= 0) {
            auto& scores = out.prompt_scores[i];
            scores.reserve(r.targets.size());
            for (size_t j = 0; j < r.targets.size(); ++j) {
                const SampleOut& o = in_.out_host[static_cast<size_t>(ns + in_.score_at[i]) + j];
                if (o.nan) out.errors[i] = nan;
                engine::SampleResult s;
                s.token = o.token;
                s.logprob = o.logprob;
                for (int t = 0; t < o.n_top; ++t) s.top.emplace_back(o.top_id[t], o.top_lp[t]);
                scores.push_back(std::move(s));
            }
        }
        if (in_.sample_at[i] >= 0) {
            const SampleOut& o = in_.out_host[static_cast<size_t>(in_.sample_at[i])];
            if (o.nan == kMaskEmpty)
                out.errors[i] = "sampling failed: the grammar allows none of the request's candidate tokens";
            else if (o.nan) out.errors[i] = nan;
            else out.sampled[i] = sampler_->result(r.slot, o);
        }
    }
}

void GpuBackend::DecodeGraphs::drop(std::map<Key, Graph>::iterator it) {
#if LOOM_GPU_HAS_GRAPHS
    (void)gpuGraphExecDestroy(it->second.exec);
    (void)gpuGraphDestroy(it->second.graph);
#endif
    captured.erase(it);
}

void GpuBackend::decode_graph(int T) {
    auto eager = [&] {
        forward(T);
        logits(nullptr, T);
    };
#if LOOM_GPU_HAS_GRAPHS
    const auto key = std::make_tuple(T, in_.span, in_.splits);
    auto it = graphs_.captured.find(key);
    if (it == graphs_.captured.end()) {
        // First sight: eager, so that lazily initialised kernels and cuBLAS shapes are set up
        // outside a capture, and a row count seen once costs no capture.
        if (graphs_.seen[key]++ == 0) {
            eager();
            return;
        }
        graphs_.seen.erase(key);
        if (graphs_.captured.size() >= DecodeGraphs::kMax)
            graphs_.drop(std::min_element(graphs_.captured.begin(), graphs_.captured.end(),
                                          [](const auto& a, const auto& b) { return a.second.used < b.second.used; }));
        DecodeGraphs::Graph d;
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
        it = graphs_.captured.emplace(key, d).first;
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

}  // namespace loom::gpu
