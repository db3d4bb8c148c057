// Drives one sequence through a Backend's step interface (engine/backend.hpp) the way the
// scheduler would with nothing else running: slot 0, blocks 0, 1, 2, ... in order.
#pragma once

#include <numeric>
#include <stdexcept>
#include <vector>

#include "engine/backend.hpp"

namespace loom::test {

class OneSequence {
public:
    /// Opens `slot` with `params` for `prompt` (nothing evaluated yet).
    OneSequence(engine::Backend& b, const engine::SamplingParams& params, std::span<const int32_t> prompt,
                int32_t slot = 0)
        : b_(b), slot_(slot) {
        b.open_slot(slot, params, prompt, {});
        const auto& kv = b.kv();
        blocks_.resize(static_cast<size_t>((b.info().n_ctx + kv.block_tokens - 1) / kv.block_tokens));
        std::iota(blocks_.begin(), blocks_.end(), 0);
    }
    ~OneSequence() { b_.close_slot(slot_); }
    OneSequence(const OneSequence&) = delete;
    OneSequence& operator=(const OneSequence&) = delete;

    /// Evaluates `tokens` at the next positions in one step. With prompt_k >= 0, `scores` gets
    /// logprob(tokens[i] | ..) for i >= 1 (the prompt logprobs). With `sample`, returns the
    /// token sampled from the last position's logits with draw `u`. Throws std::runtime_error
    /// when the backend reports the row failed.
    engine::SampleResult eval(std::span<const int32_t> tokens, bool sample, double u = 0.5, int prompt_k = -1,
                              std::vector<engine::SampleResult>* scores = nullptr) {
        engine::StepPlan plan;
        engine::StepRow r;
        r.slot = slot_;
        r.pos0 = n_past_;
        r.tokens = tokens;
        r.blocks = blocks_;
        r.sample = sample;
        r.u = u;
        if (prompt_k >= 0) {
            r.prompt_k = prompt_k;
            r.targets = tokens.subspan(1);
        }
        plan.rows.push_back(r);
        engine::StepOutput out;
        b_.step(plan, out);
        if (!out.errors.at(0).empty()) throw std::runtime_error(out.errors[0]);
        n_past_ += static_cast<int64_t>(tokens.size());
        if (scores) *scores = out.prompt_scores.at(0);
        return sample ? out.sampled.at(0).value() : engine::SampleResult{};
    }
    int64_t n_past() const { return n_past_; }

private:
    engine::Backend& b_;
    int32_t slot_;
    int64_t n_past_ = 0;
    std::vector<int32_t> blocks_;
};

}  // namespace loom::test
