// Continuous batching with chunked prefill, prefix caching and recompute preemption; see
// scheduler.hpp.
#include "engine/scheduler.hpp"

#include <algorithm>
#include <stdexcept>

#include "grammar/matcher.hpp"

namespace loom::engine {

namespace proto = loom::protocol;

struct Scheduler::Seq {
    SeqRequest req;
    std::mt19937_64 rng;
    std::vector<int32_t> tokens;  // prompt, then the output so far
    int64_t n_prompt = 0;
    int64_t max_out = 0;     // tokens to output at most (max_tokens and the context)
    int64_t n_computed = 0;  // positions whose K/V are in the cache
    BlockTable table;
    int32_t slot = -1;
    int64_t plp_next = 0;        // next PLP index to send
    int64_t cached_tokens = -1;  // prompt tokens reused at the first admission; -1 before it
    bool planned = false;        // has a row in the current plan
    bool ended = false;
    std::unique_ptr<grammar::Matcher> matcher;  // the request's grammar, at its output so far
    std::vector<uint32_t> mask;                 // the matcher's mask for this step's draw

    int64_t output() const { return static_cast<int64_t>(tokens.size()) - n_prompt; }
    int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
};

namespace {

// Uniform double in [0, 1) from 53 random bits (identical on every platform).
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

Scheduler::Scheduler(Backend& backend, SchedulerOptions opts)
    : backend_(backend),
      info_(backend.info()),
      kv_(std::max<int64_t>(backend.kv().n_blocks, 1), std::max<int32_t>(backend.kv().block_tokens, 1)),
      grammars_(backend.info().vocab_bytes) {
    const KvGeometry& g = backend.kv();
    if (g.n_blocks < 1 || g.block_tokens < 1 || g.max_slots < 1 || g.max_step_tokens < 1)
        throw std::invalid_argument("backend KV geometry without blocks, slots or step tokens");
    max_running_ = opts.max_running > 0 ? std::min(opts.max_running, g.max_slots) : g.max_slots;
    budget_ = opts.max_batch_tokens > 0 ? std::min(opts.max_batch_tokens, g.max_step_tokens) : g.max_step_tokens;
    // Every running sequence decodes in every step: no more run than the budget has tokens.
    max_running_ = std::min(max_running_, budget_);
    for (int32_t s = max_running_ - 1; s >= 0; --s) free_slots_.push_back(s);
    // A sequence never needs more positions than the pool has.
    info_.n_ctx = static_cast<int32_t>(std::min<int64_t>(info_.n_ctx, g.n_blocks * g.block_tokens));
}

Scheduler::~Scheduler() = default;

void Scheduler::submit(SeqRequest r, Lines& out) {
    auto bad_id = [&](int32_t t) { return t < 0 || t >= info_.n_vocab; };
    const std::string range = " out of range 0.." + std::to_string(info_.n_vocab - 1);
    std::string err;
    if (seqs_.count(r.id)) err = "request id is already in use";
    else if (r.prompt.empty()) err = "prompt is empty";
    else if (std::any_of(r.prompt.begin(), r.prompt.end(), bad_id)) err = "prompt token id" + range;
    else if (std::any_of(r.params.allowed.begin(), r.params.allowed.end(), bad_id)) err = "allowed token id" + range;
    else if (std::any_of(r.params.logit_bias.begin(), r.params.logit_bias.end(),
                         [&](const auto& b) { return bad_id(b.first); }))
        err = "logit_bias token id out of range";
    else if (static_cast<int64_t>(r.prompt.size()) > info_.n_ctx)
        err = "prompt of " + std::to_string(r.prompt.size()) + " tokens exceeds the context of " +
              std::to_string(info_.n_ctx);
    std::unique_ptr<grammar::Matcher> matcher;
    if (err.empty() && r.grammar) {
        if (!grammars_.available()) {
            err = "this engine does not support grammar=";
        } else {
            try {
                matcher = std::make_unique<grammar::Matcher>(grammars_.compile(*r.grammar));
            } catch (const std::exception& e) { err = std::string("grammar does not compile: ") + e.what(); }
        }
    }
    if (!err.empty()) {
        out.emplace_back(proto::Error{r.id, err});
        return;
    }
    auto s = std::make_unique<Seq>();
    if (matcher) {
        s->mask.assign(matcher->mask_words(), 0);
        s->matcher = std::move(matcher);
    }
    s->n_prompt = static_cast<int64_t>(r.prompt.size());
    s->tokens = r.prompt;
    const int64_t room = info_.n_ctx - s->n_prompt;
    s->max_out = r.max_tokens ? std::min(*r.max_tokens, room) : room;
    s->rng.seed(r.seed ? *r.seed : std::random_device{}());
    s->req = std::move(r);
    stats_.prompt_tokens += s->n_prompt;
    waiting_.push_back(s.get());
    seqs_.emplace(s->req.id, std::move(s));
}

void Scheduler::cancel(const std::string& id, Lines& out) {
    const auto it = seqs_.find(id);
    if (it == seqs_.end()) return;  // already ended: its DONE crossed the CANCEL
    Seq* s = it->second.get();
    finish(*s, "cancelled", out);
    ended_.clear();
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), s), waiting_.end());
    running_.erase(std::remove(running_.begin(), running_.end(), s), running_.end());
    seqs_.erase(it);
}

// A request with prompt logprobs needs the logits of every prompt position, so it computes
// its prompt in full until all its PLP lines are out.
bool Scheduler::admit_prefix_allowed(const Seq& s) const { return !s.req.prompt_logprobs || s.plp_next >= s.n_prompt; }

// Tokens that s can compute now: room left in its table plus the free blocks.
int64_t Scheduler::fit_tokens(const Seq& s) const {
    const int64_t bt = kv_.block_tokens();
    return static_cast<int64_t>(s.table.blocks.size()) * bt - s.n_computed + kv_.free_blocks() * bt;
}

Scheduler::Seq* Scheduler::youngest_unplanned_after(size_t i) const {
    for (size_t j = running_.size(); j-- > i + 1;)
        if (!running_[j]->planned) return running_[j];
    return nullptr;
}

void Scheduler::add_row(Seq& s, int64_t n) {
    StepRow r;
    r.slot = s.slot;
    r.pos0 = s.n_computed;
    r.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(r.pos0), static_cast<size_t>(n));
    r.blocks = s.table.blocks;
    if (r.pos0 + n == static_cast<int64_t>(s.tokens.size()) && s.output() < s.max_out) {
        r.sample = true;
        r.u = uniform(s.rng);
        if (s.matcher) {  // the words are written by build_masks(), after the forward pass is enqueued
            r.mask = s.mask;
            mask_seqs_.push_back(&s);
        }
    }
    if (s.req.prompt_logprobs && s.plp_next < s.n_prompt) {
        // Targets: the prompt tokens at pos0 + 1 .., as far as the prompt and this chunk go.
        const int64_t count = std::clamp<int64_t>(s.n_prompt - 1 - r.pos0, 0, n);
        if (count > 0 && r.pos0 + count >= s.plp_next) {
            r.prompt_k = *s.req.prompt_logprobs;
            r.targets =
                std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(r.pos0 + 1), static_cast<size_t>(count));
        }
    }
    s.planned = true;
    plan_.rows.push_back(r);
    plan_seqs_.push_back(&s);
}

void Scheduler::preempt(Seq& s) {
    backend_.close_slot(s.slot);
    free_slots_.push_back(s.slot);
    s.slot = -1;
    kv_.release(s.table);
    s.n_computed = 0;
    running_.erase(std::remove(running_.begin(), running_.end(), &s), running_.end());
    waiting_.push_front(&s);
    ++stats_.preemptions;
}

const StepPlan& Scheduler::schedule(Lines& out) {
    plan_.rows.clear();
    plan_seqs_.clear();
    mask_seqs_.clear();
    int64_t budget = budget_;

    // 1. One decode row per running sequence whose context is computed but for its last token.
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        Seq& s = *running_[i];
        if (s.remaining() != 1) {
            ++i;
            continue;
        }
        bool self = false;
        while (!kv_.reserve(s.table, s.n_computed + 1)) {
            if (Seq* v = youngest_unplanned_after(i)) {
                preempt(*v);
            } else {
                preempt(s);  // running_[i] is now the next sequence
                self = true;
                break;
            }
        }
        if (self) continue;
        add_row(s, 1);
        --budget;
        ++i;
    }

    // 2. Prefill chunks of running sequences whose context is partly computed.
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        Seq& s = *running_[i];
        if (s.planned) continue;
        int64_t fit = fit_tokens(s);
        while (fit < 1) {
            Seq* v = youngest_unplanned_after(i);
            if (!v) break;
            preempt(*v);
            fit = fit_tokens(s);
        }
        if (fit < 1) continue;
        const int64_t n = std::min({s.remaining(), budget, fit});
        kv_.reserve(s.table, s.n_computed + n);
        add_row(s, n);
        budget -= n;
    }

    // 3. Admit waiting requests, first come first served, from their longest cached prefix.
    while (budget > 0 && !waiting_.empty() && static_cast<int32_t>(running_.size()) < max_running_) {
        Seq& s = *waiting_.front();
        const auto len = static_cast<int64_t>(s.tokens.size());
        const bool lookup = admit_prefix_allowed(s);
        const int64_t hit = lookup ? kv_.acquire_prefix(s.tokens, len - 1, s.table) : 0;
        s.n_computed = hit;
        const int64_t fit = fit_tokens(s);
        if (fit < 1) {  // no room until running sequences end; later requests wait behind it
            kv_.release(s.table);
            s.n_computed = 0;
            break;
        }
        const int64_t n = std::min({len - hit, budget, fit});
        kv_.reserve(s.table, hit + n);
        waiting_.pop_front();
        s.slot = free_slots_.back();
        free_slots_.pop_back();
        try {
            const std::span<const int32_t> all(s.tokens);
            backend_.open_slot(s.slot, s.req.params, all.first(static_cast<size_t>(s.n_prompt)),
                               all.subspan(static_cast<size_t>(s.n_prompt)));
        } catch (const std::exception& e) {
            error(s, std::string("request failed: ") + e.what(), out);
            seqs_.erase(s.req.id);  // in neither queue now
            continue;
        }
        if (s.cached_tokens < 0) {
            s.cached_tokens = std::min(hit, s.n_prompt);
            if (lookup) {
                stats_.prefix_query_tokens += s.n_prompt;
                stats_.prefix_hit_tokens += s.cached_tokens;
            }
        }
        running_.push_back(&s);
        add_row(s, n);
        budget -= n;
    }
    return plan_;
}

void Scheduler::build_masks() {
    for (Seq* s : mask_seqs_) {
        s->matcher->fill_mask(s->mask);
        if (s->req.ignore_eos)
            for (int32_t id : info_.eog) s->mask[static_cast<size_t>(id) >> 5] &= ~(1u << (id & 31));
    }
}

size_t Scheduler::run_step(StepOutput& result, Lines& out) {
    const StepPlan& plan = schedule(out);
    const size_t n = plan.rows.size();
    if (n == 0) return 0;
    try {
        backend_.begin_step(plan);
        build_masks();  // overlaps the device's forward pass where the backend implements begin_step
        backend_.finish_step(plan, result);
        complete(result, out);
    } catch (const std::exception& e) { fail(std::string("request failed: ") + e.what(), out); }
    return n;
}

void Scheduler::drop(Seq& s) {
    if (s.slot >= 0) {
        backend_.close_slot(s.slot);
        free_slots_.push_back(s.slot);
        s.slot = -1;
    }
    kv_.release(s.table);
    s.ended = true;
    ended_.push_back(&s);
}

void Scheduler::finish(Seq& s, const char* reason, Lines& out) {
    out.emplace_back(proto::Done{s.req.id, reason, s.n_prompt, s.output(), std::max<int64_t>(s.cached_tokens, 0)});
    drop(s);
}

void Scheduler::error(Seq& s, const std::string& message, Lines& out) {
    out.emplace_back(proto::Error{s.req.id, message});
    drop(s);
}

void Scheduler::complete(const StepOutput& result, Lines& out) {
    const size_t n = plan_.rows.size();
    if (result.sampled.size() != n || result.prompt_scores.size() != n || result.errors.size() != n) {
        fail("the backend returned results for " + std::to_string(result.sampled.size()) + " of " + std::to_string(n) +
                 " rows",
             out);
        return;
    }
    ++stats_.steps;
    const std::vector<int32_t>& eog = info_.eog;
    for (size_t i = 0; i < n; ++i) {
        Seq& s = *plan_seqs_[i];
        const StepRow& r = plan_.rows[i];
        s.planned = false;
        if (!result.errors[i].empty()) {
            error(s, result.errors[i], out);
            continue;
        }
        s.n_computed += static_cast<int64_t>(r.tokens.size());
        kv_.commit(s.table, s.tokens, s.n_computed);
        if (s.req.prompt_logprobs && s.plp_next == 0) {
            out.emplace_back(proto::PromptLogprobs{s.req.id, 0, std::nullopt, {}});
            s.plp_next = 1;
        }
        if (r.prompt_k >= 0) {
            const auto& scores = result.prompt_scores[i];
            if (scores.size() != r.targets.size()) {
                error(s,
                      "the backend returned " + std::to_string(scores.size()) + " prompt scores for " +
                          std::to_string(r.targets.size()),
                      out);
                continue;
            }
            for (size_t j = 0; j < scores.size(); ++j) {
                const int64_t index = r.pos0 + static_cast<int64_t>(j) + 1;
                if (index != s.plp_next) continue;  // sent before a preemption
                out.emplace_back(proto::PromptLogprobs{s.req.id, index, scores[j].logprob, scores[j].top});
                ++s.plp_next;
            }
        }
        if (!r.sample) {
            if (s.remaining() == 0) finish(s, "length", out);  // prompt only (max_tokens=0, or a full context)
            continue;
        }
        if (!result.sampled[i]) {
            error(s, "the backend returned no token", out);
            continue;
        }
        const SampleResult& t = *result.sampled[i];
        if (!s.req.ignore_eos && std::find(eog.begin(), eog.end(), t.token) != eog.end()) {
            finish(s, "stop", out);
            continue;
        }
        if (s.matcher && !s.matcher->advance(t.token)) {
            error(s, "the backend sampled token " + std::to_string(t.token) + ", which the grammar does not allow",
                  out);
            continue;
        }
        s.tokens.push_back(t.token);
        ++stats_.generated_tokens;
        out.emplace_back(proto::Token{s.req.id, t.token});
        if (s.req.params.n_logprobs >= 0) out.emplace_back(proto::Logprobs{s.req.id, t.logprob, t.top});
        if (s.matcher && s.matcher->is_done()) finish(s, "stop", out);  // the grammar allows nothing more
        else if (s.output() >= s.max_out) finish(s, "length", out);
    }
    remove_ended();
}

void Scheduler::fail(const std::string& message, Lines& out) {
    ++stats_.steps;
    for (Seq* s : plan_seqs_) {
        s->planned = false;
        error(*s, message, out);
    }
    remove_ended();
}

void Scheduler::remove_ended() {
    plan_.rows.clear();
    plan_seqs_.clear();
    mask_seqs_.clear();
    if (ended_.empty()) return;
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](Seq* s) { return s->ended; }), running_.end());
    for (Seq* s : ended_) seqs_.erase(s->req.id);
    ended_.clear();
}

SchedulerStats Scheduler::stats() const {
    SchedulerStats s = stats_;
    s.waiting = static_cast<int64_t>(waiting_.size());
    s.running = static_cast<int64_t>(running_.size());
    s.kv = kv_.stats();
    return s;
}

}  // namespace loom::engine
