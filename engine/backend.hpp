// The step interface between the engine's scheduler and a compute backend (engine core v2).
//
// A backend owns the weights, a paged KV cache (a pool of fixed-size blocks sized once at
// start) and, per running sequence, its sampling state. The scheduler (engine/scheduler.hpp)
// owns every decision: which sequences run, which positions each evaluates this step, which
// KV blocks hold them (engine/kv_cache.hpp). Each iteration runs over a flat batch: decode rows
// and prefill chunks of several sequences mixed in one forward pass, then one batched sampling
// pass over every row that samples, then one device-to-host copy. Logits never leave the
// backend: only sampled ids and their (token, logprob) pairs do.
//
// An iteration is either one call, Backend::step(), or two: begin_step() enqueues the forward
// pass and returns while the device runs it; the caller then writes the grammar masks of the
// plan's rows (engine/scheduler.hpp, Scheduler::build_masks); finish_step() applies them,
// samples and reads back. A backend that computes on the calling thread keeps the defaults
// (begin_step does nothing, finish_step runs step()), which are correct, only not overlapped.
//
// Semantics of sampling and logprobs are those of engine/sampler.hpp, which the CPU backend
// runs and every other backend must match. The KV layout of a block is engine/kv_layout.hpp's,
// shared by every backend.
//
// Sources: continuous batching (Yu et al., "Orca", OSDI 2022); paged attention and block tables
// (Kwon et al., "vLLM", SOSP 2023); chunked prefill (Agrawal et al., "Sarathi-Serve", OSDI 2024).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.hpp"
#include "grammar/vocab.hpp"

namespace loom::engine {

/// What the scheduler and the HELLO line need to know about the loaded model.
struct ModelInfo {
    std::string name;     ///< model name for HELLO
    std::string backend;  ///< "cpu", "cuda", "hip"
    int32_t n_vocab = 0;  ///< logits per position
    int32_t n_ctx = 0;    ///< longest sequence served (prompt + completion), tokens
    int32_t bos = -1, eos = -1;
    std::vector<int32_t> eog;  ///< end-of-generation ids
    /// Each token's bytes and the end ids, for grammars (docs/protocol.md, "Grammars"); null
    /// when the backend cannot apply a token mask (then the engine does not announce `grammar`).
    std::shared_ptr<const grammar::VocabBytes> vocab_bytes;
};

/// The paged KV cache's geometry, fixed when the backend is made.
struct KvGeometry {
    int32_t block_tokens = 16;    ///< positions per block
    int64_t n_blocks = 0;         ///< blocks in the pool (ids 0..n_blocks-1)
    int32_t max_slots = 0;        ///< sequence slots (running sequences at once), ids 0..max_slots-1
    int32_t max_step_tokens = 0;  ///< most tokens one step() may evaluate, summed over its rows
};

/// One sequence's part of a step: a run of consecutive positions pos0..pos0+n-1.
///
/// Positions < pos0 are already in the KV cache, in the blocks of `blocks`; this step writes
/// K/V for its positions into the same table. blocks[i] holds positions
/// i*block_tokens..(i+1)*block_tokens-1, and the table covers at least pos0 + tokens.size()
/// positions. Several rows may read the same (shared, full) prefix block; no two rows of a step
/// write the same block.
struct StepRow {
    int32_t slot = -1;                ///< sampling-state slot, opened with open_slot()
    int64_t pos0 = 0;                 ///< position of tokens[0]
    std::span<const int32_t> tokens;  ///< ids evaluated at pos0.. (1 for a decode row), each < n_vocab
    std::span<const int32_t> blocks;  ///< the sequence's block table (block ids < n_blocks)
    /// Sample the next token from the logits of the last position (the row's sampling state
    /// then counts it as an output token), drawing with `u`, uniform in [0, 1) (sampler.hpp).
    bool sample = false;
    double u = 0;
    /// With `sample`: the grammar's token mask for this draw (sampler.hpp sample_logits: bit
    /// id % 32 of word id / 32 set = allowed), ceil(n_vocab / 32) words; empty: no grammar.
    /// Only given to a backend whose ModelInfo::vocab_bytes is set. Whether a row has a mask
    /// (and where its words are) is fixed when the plan is made; the words themselves may be
    /// written between begin_step() and finish_step(), so a backend reads them only in
    /// finish_step() (or step()).
    std::span<const uint32_t> mask;
    /// Prompt logprobs (the PLP lines): when prompt_k >= 0, for each j < targets.size(),
    /// score targets[j] (the prompt token at pos0 + j + 1) from the raw logits at pos0 + j,
    /// with the top prompt_k alternatives (sampler.hpp score_token). targets.size() is
    /// tokens.size(), or tokens.size() - 1 at the prompt's end.
    int prompt_k = -1;
    std::span<const int32_t> targets;
};

/// One iteration's batch. Rows of one slot appear at most once.
struct StepPlan {
    std::vector<StepRow> rows;
};

/// What a step returns, row by row (same order as StepPlan::rows).
struct StepOutput {
    std::vector<std::optional<SampleResult>> sampled;      ///< set where the row sampled
    std::vector<std::vector<SampleResult>> prompt_scores;  ///< targets.size() entries where prompt_k >= 0
    /// Non-empty where that row's request failed on its own (NaN logits): the scheduler ends
    /// it with ERR; the other rows' results stand.
    std::vector<std::string> errors;
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual const ModelInfo& info() const = 0;
    virtual const KvGeometry& kv() const = 0;

    /// Opens sampling slot `slot` (< kv().max_slots, not open) for a sequence with `params`
    /// (allowed sorted and unique, ids < n_vocab), its prompt and the tokens it already output
    /// (non-empty when a preempted request resumes: the penalty counts continue from them).
    /// Throws std::invalid_argument on a bad slot or id.
    virtual void open_slot(int32_t slot, const SamplingParams& params, std::span<const int32_t> prompt,
                           std::span<const int32_t> output) = 0;
    /// Closes `slot`, dropping its sampling state (no-op when it is not open).
    virtual void close_slot(int32_t slot) = 0;

    /// Runs one iteration: the forward pass over every row's tokens (K/V written into the rows'
    /// blocks), prompt scoring, then one batched sampling pass over the rows with `sample`.
    /// `out` is resized to plan.rows.size(). NaN logits fail only their row (out.errors).
    /// Throws std::invalid_argument on a malformed plan (over max_step_tokens, a block id out of
    /// range, a table too short, a slot not open) and std::runtime_error on a device failure;
    /// the scheduler then ends every row's request with ERR and frees their blocks.
    virtual void step(const StepPlan& plan, StepOutput& out) = 0;

    /// The first half of a step split in two: validates `plan` and enqueues its forward pass
    /// (and prompt scoring) without reading any row's mask words, then returns while the device
    /// works. The caller writes the masks' words, then calls finish_step() with the same plan
    /// (same rows and spans; only the words behind StepRow::mask may have changed). Calling
    /// begin_step() again without finish_step() abandons the step begun (its sampled results
    /// are lost; its K/V writes may have happened). Throws as step(). Default: nothing (the
    /// whole step runs in finish_step()).
    virtual void begin_step(const StepPlan& plan) { (void)plan; }
    /// The second half: samples every row with `sample` under its mask, copies the results
    /// back and fills `out` as step() does. Throws as step(). Default: step(plan, out).
    virtual void finish_step(const StepPlan& plan, StepOutput& out) { step(plan, out); }
};

}  // namespace loom::engine
