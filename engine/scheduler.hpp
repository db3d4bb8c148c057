// The engine's scheduler: continuous batching over the paged KV cache, with chunked prefill,
// prefix caching and preemption by recompute. Pure logic: it reads no input and writes no
// output; it turns requests into step plans for a Backend and step results into protocol lines.
//
// Each step fills a token budget (max_batch_tokens): first one decode row for every running
// sequence that has its whole context computed, then prefill chunks, first come first served:
// running sequences whose prompt is partly computed, then waiting requests (admitted while
// fewer than max_running run). A waiting request starts from the longest cached prefix of its
// tokens (KvCache::acquire_prefix). When a running sequence needs a KV block and none is free,
// the most recently admitted running sequence not yet in this step is preempted: its blocks are
// released (its full blocks stay cached), its sampling slot closed, and it goes back to the
// front of the waiting queue; when it is admitted again it computes prompt + output so far and
// its slot is reopened with that output. The scheduler owns each request's seeded generator and
// draws `u` only for rows that sample, so a request's tokens and logprobs are those it would
// have had without preemption, and lines already sent (T, LP, PLP) are never sent again.
//
// Sources: iteration-level scheduling (Yu et al., "Orca", OSDI 2022); paged KV blocks and
// recompute preemption of the latest-admitted sequence (Kwon et al., "vLLM", SOSP 2023);
// chunked prefill under a token budget with decodes first (Agrawal et al., "Sarathi-Serve",
// OSDI 2024). Output lines follow docs/protocol.md.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.hpp"
#include "engine/constraint.hpp"
#include "engine/kv_cache.hpp"
#include "protocol/protocol.hpp"

namespace loom::engine {

struct SchedulerOptions {
    /// Running sequences at most (--parallel); 0 or more than the backend's slots: its
    /// kv().max_slots. Never more than the token budget, so that every running sequence
    /// decodes in every step.
    int32_t max_running = 0;
    /// Tokens evaluated per step at most, over all rows (--max-batch-tokens); 0 or more than
    /// the backend allows: kv().max_step_tokens.
    int32_t max_batch_tokens = 0;
};

/// One GEN request, its fields resolved (docs/protocol.md, "GEN").
struct SeqRequest {
    std::string id;
    std::vector<int32_t> prompt;        ///< non-empty
    SamplingParams params;              ///< allowed sorted and unique
    std::optional<int64_t> max_tokens;  ///< absent: until the context is full
    std::optional<uint64_t> seed;       ///< absent: a random seed
    std::optional<int> prompt_logprobs;
    bool ignore_eos = false;
    std::optional<protocol::GrammarSpec> grammar;  ///< absent: unconstrained
};

/// What /metrics will want; token counts are cumulative.
struct SchedulerStats {
    int64_t waiting = 0, running = 0;
    int64_t steps = 0;        ///< backend steps run
    int64_t preemptions = 0;  ///< sequences sent back to the waiting queue
    int64_t prompt_tokens = 0, generated_tokens = 0;
    /// Prefix caching: prompt tokens of admitted requests, and of those the tokens found in
    /// the cache (each request counted at its first admission).
    int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
    KvStats kv;  ///< blocks used, cached, touched; evictions
};

class Scheduler {
public:
    using Lines = std::vector<protocol::EngineLine>;

    /// Schedules onto `backend` (whose info() and kv() it reads once; it calls open_slot and
    /// close_slot, and run_step() drives begin_step/finish_step). Throws std::invalid_argument
    /// when the backend's geometry is unusable (no blocks, slots or step tokens).
    Scheduler(Backend& backend, SchedulerOptions opts);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    /// Queues a request, or appends `ERR <id> <reason>` to `out` when it is invalid: its id is
    /// in use, a prompt, allowed or logit_bias id is out of range, the prompt is longer than
    /// the context (or the whole KV cache), or its grammar does not compile (or the backend
    /// has no vocab_bytes). A grammar is compiled here, on the caller's thread (cached by
    /// ConstraintCompiler); the request then keeps a grammar::Matcher: each sampling row gets
    /// its mask (end ids masked out under ignore_eos; written by build_masks()), the sampled
    /// token advances it in complete(), and the request ends with `stop` once the grammar
    /// allows nothing more (docs/protocol.md, "Grammars").
    void submit(SeqRequest r, Lines& out);
    /// Ends request `id` with `DONE <id> cancelled` and frees its blocks at once; an unknown
    /// id is ignored (its DONE crossed the CANCEL).
    void cancel(const std::string& id, Lines& out);
    /// Whether any request is waiting or running.
    bool has_work() const { return !waiting_.empty() || !running_.empty(); }

    /// Plans the next step (preempting when KV blocks run out). The plan refers to the
    /// scheduler's memory and stays valid until complete() or fail(); its rows are empty
    /// only when there is no work. A request whose slot the backend refuses to open ends with
    /// ERR in `out`. A sampling row under a grammar gets its StepRow::mask span here, but its
    /// words are written only by build_masks().
    const StepPlan& schedule(Lines& out);
    /// Writes the mask words of the last plan's grammar rows (Matcher::fill_mask at the output
    /// so far, end ids cleared under ignore_eos): the host's grammar work, meant to run between
    /// Backend::begin_step() and finish_step() while the device computes the forward pass.
    /// Loops over the grammar rows only: a plan without one costs nothing. Throws what
    /// Matcher::fill_mask throws (grammar::GrammarError on a pathological grammar).
    void build_masks();
    /// One iteration: schedule(), then, when the plan has rows, begin_step(), build_masks(),
    /// finish_step() and complete(); an exception from any of these ends every request of the
    /// plan with `ERR <id> request failed: <what>` (fail()). `result` is scratch reused across
    /// calls. Returns the plan's row count (0: no work).
    size_t run_step(StepOutput& result, Lines& out);
    /// Applies the backend's results for the last plan: writes PLP, T (+ LP) lines, and
    /// DONE or ERR for the requests that ended (freeing their blocks and slots).
    void complete(const StepOutput& result, Lines& out);
    /// The last plan's step threw: ends every request in it with `ERR <id> <message>`.
    void fail(const std::string& message, Lines& out);

    SchedulerStats stats() const;
    /// The backend's ModelInfo with n_ctx lowered to the KV pool's size when that is smaller
    /// (what HELLO announces).
    const ModelInfo& info() const { return info_; }
    const KvCache& kv_cache() const { return kv_; }
    int32_t max_running() const { return max_running_; }
    int32_t max_batch_tokens() const { return budget_; }

private:
    struct Seq;
    bool admit_prefix_allowed(const Seq& s) const;
    int64_t fit_tokens(const Seq& s) const;
    Seq* youngest_unplanned_after(size_t i) const;
    void add_row(Seq& s, int64_t n);
    void preempt(Seq& s);
    void finish(Seq& s, const char* reason, Lines& out);
    void error(Seq& s, const std::string& message, Lines& out);
    void drop(Seq& s);
    void remove_ended();

    Backend& backend_;
    ModelInfo info_;
    KvCache kv_;
    ConstraintCompiler grammars_;
    int32_t max_running_, budget_;
    std::vector<int32_t> free_slots_;
    std::unordered_map<std::string, std::unique_ptr<Seq>> seqs_;  // every request not ended, by id
    std::deque<Seq*> waiting_;
    std::vector<Seq*> running_;  // in admission order
    StepPlan plan_;
    std::vector<Seq*> plan_seqs_;  // plan_.rows[i] belongs to plan_seqs_[i]
    std::vector<Seq*> mask_seqs_;  // the planned sequences whose sampling row has a grammar mask
    std::vector<Seq*> ended_;      // dropped, still to remove from running_ and seqs_
    SchedulerStats stats_;
};

}  // namespace loom::engine
