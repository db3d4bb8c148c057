// A fake Backend for the scheduler's tests: no model, but a KV pool that records which token
// was written at which position of which block, and "logits" that are a hash of the whole
// context read back through the row's block table, the row's draw u and its slot's output so
// far. So a request's tokens change if the scheduler shares a wrong block, loses a position,
// reuses a stale one, draws u out of turn or reopens a slot without its output; and step()
// checks every rule of the StepPlan contract (engine/backend.hpp) and throws on a breach.
#pragma once

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend.hpp"

namespace loom::test {

class FakeBackend final : public engine::Backend {
public:
    FakeBackend(int64_t n_blocks, int32_t block_tokens, int32_t n_ctx, int32_t max_slots = 64,
                int32_t max_step_tokens = 4096) {
        info_.name = "fake";
        info_.backend = "fake";
        info_.n_vocab = 64;
        info_.n_ctx = n_ctx;
        info_.bos = 1;
        info_.eos = 2;
        info_.eog = {2};
        kv_ = {block_tokens, n_blocks, max_slots, max_step_tokens};
        tok_.assign(static_cast<size_t>(n_blocks * block_tokens), -1);
        pos_.assign(static_cast<size_t>(n_blocks * block_tokens), -1);
        slots_.resize(static_cast<size_t>(max_slots));
    }

    const engine::ModelInfo& info() const override { return info_; }
    const engine::KvGeometry& kv() const override { return kv_; }

    void open_slot(int32_t slot, const engine::SamplingParams& params, std::span<const int32_t> prompt,
                   std::span<const int32_t> output) override {
        if (slot < 0 || slot >= kv_.max_slots || slots_[static_cast<size_t>(slot)].open)
            throw std::invalid_argument("bad slot " + std::to_string(slot));
        (void)prompt;
        Slot& s = slots_[static_cast<size_t>(slot)];
        s = Slot{true, params.n_logprobs, 0, 0};
        for (int32_t t : output) s.add(t);
        ++open_;
    }
    void close_slot(int32_t slot) override {
        if (slot < 0 || slot >= kv_.max_slots || !slots_[static_cast<size_t>(slot)].open) return;
        slots_[static_cast<size_t>(slot)].open = false;
        --open_;
    }

    void step(const engine::StepPlan& plan, engine::StepOutput& out) override {
        ++steps;
        if (throw_next) {
            throw_next = false;
            throw std::runtime_error("device lost");
        }
        const int64_t bt = kv_.block_tokens;
        int64_t total = 0;
        std::set<int32_t> slots;
        for (const auto& r : plan.rows) {
            total += static_cast<int64_t>(r.tokens.size());
            if (r.slot < 0 || r.slot >= kv_.max_slots || !slots_[static_cast<size_t>(r.slot)].open)
                throw std::invalid_argument("row on a slot not open");
            if (!slots.insert(r.slot).second) throw std::invalid_argument("two rows of one slot");
            if (r.tokens.empty()) throw std::invalid_argument("empty row");
            const int64_t end = r.pos0 + static_cast<int64_t>(r.tokens.size());
            if (static_cast<int64_t>(r.blocks.size()) * bt < end) throw std::invalid_argument("table too short");
            for (int32_t b : r.blocks)
                if (b < 0 || b >= kv_.n_blocks) throw std::invalid_argument("block id out of range");
            if (r.prompt_k >= 0 && r.targets.size() > r.tokens.size())
                throw std::invalid_argument("targets longer than the row");
        }
        if (total > kv_.max_step_tokens) throw std::invalid_argument("over max_step_tokens");
        // No block written by one row may appear in another row's table.
        for (size_t i = 0; i < plan.rows.size(); ++i) {
            const auto& r = plan.rows[i];
            std::set<int32_t> mine;
            for (int64_t p = r.pos0; p < r.pos0 + static_cast<int64_t>(r.tokens.size()); ++p)
                mine.insert(r.blocks[static_cast<size_t>(p / bt)]);
            for (size_t j = 0; j < plan.rows.size(); ++j) {
                if (j == i) continue;
                const auto& o = plan.rows[j];
                const int64_t read = (o.pos0 + static_cast<int64_t>(o.tokens.size()) + bt - 1) / bt;
                for (int64_t k = 0; k < read; ++k)
                    if (mine.count(o.blocks[static_cast<size_t>(k)]))
                        throw std::invalid_argument("a block written by one row is read by another");
            }
        }
        // Writes, then reads.
        for (const auto& r : plan.rows)
            for (size_t j = 0; j < r.tokens.size(); ++j) {
                const int64_t p = r.pos0 + static_cast<int64_t>(j);
                const size_t cell = static_cast<size_t>(r.blocks[static_cast<size_t>(p / bt)] * bt + p % bt);
                tok_[cell] = r.tokens[j];
                pos_[cell] = p;
            }
        out.sampled.assign(plan.rows.size(), std::nullopt);
        out.prompt_scores.assign(plan.rows.size(), {});
        out.errors.assign(plan.rows.size(), {});
        for (size_t i = 0; i < plan.rows.size(); ++i) {
            const auto& r = plan.rows[i];
            const int64_t end = r.pos0 + static_cast<int64_t>(r.tokens.size());
            // h[p]: hash of the context 0..p as read through the table.
            std::vector<uint64_t> h(static_cast<size_t>(end));
            uint64_t acc = 1469598103934665603ull;
            for (int64_t p = 0; p < end; ++p) {
                const size_t cell = static_cast<size_t>(r.blocks[static_cast<size_t>(p / bt)] * bt + p % bt);
                if (pos_[cell] != p)
                    throw std::invalid_argument("position " + std::to_string(p) + " was never written");
                acc = (acc ^ static_cast<uint64_t>(tok_[cell] + 1)) * 1099511628211ull;
                h[static_cast<size_t>(p)] = acc;
            }
            bool nan = false;
            for (int32_t t : r.tokens) nan |= t == nan_token;
            if (nan) {
                out.errors[i] = "sampling failed: the model produced NaN logits";
                continue;
            }
            if (r.prompt_k >= 0)
                for (size_t j = 0; j < r.targets.size(); ++j) {
                    const uint64_t x = h[static_cast<size_t>(r.pos0) + j];
                    engine::SampleResult s{r.targets[j], -static_cast<float>(x % 1000) / 100.0f, {}};
                    for (int k = 0; k < r.prompt_k; ++k)
                        s.top.emplace_back(static_cast<int32_t>((x >> (8 * k)) % 64), -static_cast<float>(k));
                    out.prompt_scores[i].push_back(s);
                }
            if (r.sample) {
                Slot& s = slots_[static_cast<size_t>(r.slot)];
                const uint64_t x =
                    h.back() ^ (static_cast<uint64_t>(r.u * 1e9) * 0x9e3779b97f4a7c15ull) ^ (s.count * 31 + s.sum);
                const uint64_t m = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
                const auto tok = static_cast<int32_t>((m >> 32) % static_cast<uint64_t>(info_.n_vocab));
                engine::SampleResult res{tok, -static_cast<float>((m >> 8) % 1000) / 1000.0f, {}};
                for (int k = 0; k < s.n_logprobs; ++k)
                    res.top.emplace_back(static_cast<int32_t>((m >> (4 * k)) % 64), -static_cast<float>(k) * 0.5f);
                s.add(tok);
                out.sampled[i] = res;
            }
        }
    }

    int open_slots() const { return open_; }

    int64_t steps = 0;
    bool throw_next = false;
    int32_t nan_token = -1;  ///< a row holding this id fails with NaN logits

private:
    struct Slot {
        bool open = false;
        int n_logprobs = -1;
        uint64_t count = 0, sum = 0;
        void add(int32_t t) {
            ++count;
            sum = sum * 131 + static_cast<uint64_t>(t);
        }
    };
    engine::ModelInfo info_;
    engine::KvGeometry kv_;
    std::vector<int32_t> tok_;
    std::vector<int64_t> pos_;
    std::vector<Slot> slots_;
    int open_ = 0;
};

}  // namespace loom::test
