// The CPU backend: batching, the paged KV pool, logits and sampling around an architecture's
// forward pass (architecture.hpp); see cpu_backend.hpp.
#include "engine/backends/cpu/cpu_backend.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "engine/backends/cpu/architecture.hpp"
#include "engine/backends/cpu/compute.hpp"
#include "engine/kv_layout.hpp"
#include "engine/vocab_bytes.hpp"
#include "model/gguf/vocab.hpp"
#include "model/quant/quant.hpp"

namespace loom::cpu {
namespace {

// Positions whose logits are computed at once (bounds the logits buffer to kLogitRows x n_vocab).
constexpr int64_t kLogitRows = 64;
constexpr int32_t kBlockTokens = 16;
constexpr int32_t kDefaultStepTokens = 2048;
constexpr int32_t kMaxSlots = 1024;
constexpr int64_t kDefaultSequences = 16;  // default pool: n_ctx tokens for this many sequences

// Threads by default: the CPUs this process may run on (its affinity mask, which
// containers and taskset narrow), else the machine's hardware threads.
int default_threads() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The KV pool: anonymous memory reserved once, backed by pages only where blocks are written.
class KvPool {
public:
    explicit KvPool(int64_t elems) : bytes_(static_cast<size_t>(elems) * sizeof(float)) {
        void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            throw model::ModelError("cannot reserve " + std::to_string(bytes_ >> 20) + " MiB for the KV cache");
        data_ = static_cast<float*>(p);
    }
    ~KvPool() { ::munmap(data_, bytes_); }
    KvPool(const KvPool&) = delete;
    KvPool& operator=(const KvPool&) = delete;
    float* data() const { return data_; }

private:
    size_t bytes_;
    float* data_ = nullptr;
};

// A sampling slot: the request's parameters and its penalty counts, kept incrementally.
struct Slot {
    bool open = false;
    engine::SamplingParams params;
    engine::PenaltyState penalties;
};

class CpuBackend final : public engine::Backend {
public:
    CpuBackend(model::GgufFile file, const CpuOptions& opts, const std::string& path)
        : file_(std::move(file)),
          compute_(opts.threads > 0 ? opts.threads : default_threads()),
          arch_(load_architecture(file_, compute_)) {
        const auto& hp = arch_->hparams();
        const model::Vocab vocab = model::Vocab::from_gguf(file_);
        if (vocab.size() > hp.n_vocab)
            throw model::ModelError("the vocabulary has " + std::to_string(vocab.size()) +
                                    " tokens but the model only " + std::to_string(hp.n_vocab) + " logits");
        info_.name = hp.name.empty() ? std::filesystem::path(path).filename().string() : hp.name;
        info_.backend = "cpu";
        info_.n_vocab = hp.n_vocab;
        info_.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : hp.n_ctx_train;
        info_.bos = vocab.bos;
        info_.eos = vocab.eos;
        info_.eog = vocab.eog;
        info_.vocab_bytes = engine::make_vocab_bytes(vocab, hp.n_vocab);
        kv_dim_ = int64_t{hp.n_head_kv} * hp.head_dim;

        const int64_t kv_tokens = opts.kv_tokens > 0 ? opts.kv_tokens : default_kv_tokens();
        geo_.block_tokens = kBlockTokens;
        geo_.n_blocks = std::max<int64_t>(1, (kv_tokens + kBlockTokens - 1) / kBlockTokens);
        geo_.max_slots =
            static_cast<int32_t>(std::min<int64_t>(opts.max_slots > 0 ? opts.max_slots : kMaxSlots, geo_.n_blocks));
        geo_.max_step_tokens = opts.max_step_tokens > 0 ? opts.max_step_tokens : kDefaultStepTokens;
        info_.n_ctx = static_cast<int32_t>(std::min<int64_t>(info_.n_ctx, geo_.n_blocks * kBlockTokens));
        layout_ = {geo_.n_blocks, kBlockTokens, kv_dim_};
        kv_ = std::make_unique<KvPool>(layout_.pool_elems(hp.n_layer));
        arch_->set_context(info_.n_ctx);
        slots_.resize(static_cast<size_t>(geo_.max_slots));
    }

    const engine::ModelInfo& info() const override { return info_; }
    const engine::KvGeometry& kv() const override { return geo_; }

    void open_slot(int32_t slot, const engine::SamplingParams& params, std::span<const int32_t> prompt,
                   std::span<const int32_t> output) override {
        if (slot < 0 || slot >= geo_.max_slots)
            throw std::invalid_argument("slot " + std::to_string(slot) + " out of range");
        Slot& s = slots_[static_cast<size_t>(slot)];
        if (s.open) throw std::invalid_argument("slot " + std::to_string(slot) + " is already open");
        auto bad = [&](int32_t t) { return t < 0 || t >= info_.n_vocab; };
        if (std::any_of(prompt.begin(), prompt.end(), bad) || std::any_of(output.begin(), output.end(), bad) ||
            std::any_of(params.allowed.begin(), params.allowed.end(), bad))
            throw std::invalid_argument("token id out of range");
        s.params = params;
        s.penalties.reset(info_.n_vocab, params.repetition_penalty != 1.0f, prompt, output);
        s.open = true;
    }

    void close_slot(int32_t slot) override {
        if (slot >= 0 && slot < geo_.max_slots) slots_[static_cast<size_t>(slot)].open = false;
    }

    void step(const engine::StepPlan& plan, engine::StepOutput& out) override {
        const size_t n_rows = plan.rows.size();
        check(plan);
        out.sampled.assign(n_rows, std::nullopt);
        out.prompt_scores.assign(n_rows, {});
        out.errors.assign(n_rows, {});
        if (n_rows == 0) return;

        // The flat batch: token t of the step is row row_of_[t]'s token at position pos_[t].
        tok_.clear();
        pos_.clear();
        row_of_.clear();
        row_start_.assign(n_rows + 1, 0);
        for (size_t i = 0; i < n_rows; ++i) {
            const auto& r = plan.rows[i];
            row_start_[i] = static_cast<int64_t>(tok_.size());
            for (size_t j = 0; j < r.tokens.size(); ++j) {
                tok_.push_back(r.tokens[j]);
                pos_.push_back(r.pos0 + static_cast<int64_t>(j));
                row_of_.push_back(static_cast<int32_t>(i));
            }
        }
        row_start_[n_rows] = static_cast<int64_t>(tok_.size());
        forward(plan);

        // Positions whose logits are needed: each scored target's, and each sampling row's last.
        std::vector<Want> wants;
        for (size_t i = 0; i < n_rows; ++i) {
            const auto& r = plan.rows[i];
            if (r.prompt_k >= 0) {
                out.prompt_scores[i].resize(r.targets.size());
                for (size_t j = 0; j < r.targets.size(); ++j)
                    wants.push_back(
                        {row_start_[i] + static_cast<int64_t>(j), static_cast<int32_t>(i), static_cast<int32_t>(j)});
            }
            if (r.sample) wants.push_back({row_start_[i + 1] - 1, static_cast<int32_t>(i), -1});
        }
        for (size_t w0 = 0; w0 < wants.size(); w0 += kLogitRows) {
            const size_t w1 = std::min(wants.size(), w0 + static_cast<size_t>(kLogitRows));
            logits_for(std::span<const Want>(wants).subspan(w0, w1 - w0));
            consume(plan, std::span<const Want>(wants).subspan(w0, w1 - w0), out);
        }
        // The sampled tokens join their slots' penalty counts (after the whole pass).
        for (size_t i = 0; i < n_rows; ++i)
            if (out.sampled[i])
                slots_[static_cast<size_t>(plan.rows[i].slot)].penalties.add_output(out.sampled[i]->token);
    }

private:
    struct Want {
        int64_t t;  // token index in the step
        int32_t row;
        int32_t target;  // index into row's targets, or -1: sample
    };

    int64_t default_kv_tokens() const {
        const auto& hp = arch_->hparams();
        const int64_t bytes_per_token = int64_t{hp.n_layer} * 2 * kv_dim_ * static_cast<int64_t>(sizeof(float));
        const int64_t want = int64_t{info_.n_ctx} * kDefaultSequences;
        // At most a quarter of the machine's memory (the pool is touched only as it fills).
        const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
        if (pages <= 0 || page <= 0) return want;
        const int64_t cap = static_cast<int64_t>(pages) * page / 4 / std::max<int64_t>(1, bytes_per_token);
        return std::max<int64_t>(kBlockTokens, std::min(want, cap));
    }

    void check(const engine::StepPlan& plan) const {
        int64_t total = 0;
        std::vector<char> used(static_cast<size_t>(geo_.max_slots), 0);
        for (const auto& r : plan.rows) {
            if (r.slot < 0 || r.slot >= geo_.max_slots || !slots_[static_cast<size_t>(r.slot)].open)
                throw std::invalid_argument("step row on slot " + std::to_string(r.slot) + ", which is not open");
            if (used[static_cast<size_t>(r.slot)]++) throw std::invalid_argument("two step rows on one slot");
            if (r.tokens.empty() || r.pos0 < 0) throw std::invalid_argument("step row without tokens");
            for (int32_t t : r.tokens)
                if (t < 0 || t >= info_.n_vocab)
                    throw std::invalid_argument("token id " + std::to_string(t) + " out of range");
            const int64_t end = r.pos0 + static_cast<int64_t>(r.tokens.size());
            if (end > info_.n_ctx) throw std::invalid_argument("step row past the context");
            if (static_cast<int64_t>(r.blocks.size()) * kBlockTokens < end)
                throw std::invalid_argument("block table shorter than the row");
            for (int64_t b = 0; b * kBlockTokens < end; ++b) {
                const int32_t id = r.blocks[static_cast<size_t>(b)];
                if (id < 0 || id >= geo_.n_blocks)
                    throw std::invalid_argument("block id " + std::to_string(id) + " out of range");
            }
            if (!r.mask.empty() && r.mask.size() * 32 < static_cast<size_t>(info_.n_vocab))
                throw std::invalid_argument("token mask shorter than the vocabulary");
            if (r.prompt_k >= 0) {
                if (r.targets.size() > r.tokens.size() || r.prompt_k > 20)
                    throw std::invalid_argument("prompt scoring of a step row is malformed");
                for (int32_t t : r.targets)
                    if (t < 0 || t >= info_.n_vocab) throw std::invalid_argument("target id out of range");
            }
            total += static_cast<int64_t>(r.tokens.size());
        }
        if (total > geo_.max_step_tokens)
            throw std::invalid_argument("step of " + std::to_string(total) + " tokens exceeds " +
                                        std::to_string(geo_.max_step_tokens));
    }

    // Runs the flat batch through the architecture's layers (residual stream into x_).
    void forward(const engine::StepPlan& plan) {
        tables_.clear();
        int64_t ctx = 0, max_ctx = 0;
        for (size_t t = 0; t < tok_.size(); ++t) {
            tables_.push_back(plan.rows[static_cast<size_t>(row_of_[t])].blocks);
            ctx += pos_[t] + 1;
            max_ctx = std::max(max_ctx, pos_[t] + 1);
        }
        Batch batch;
        batch.tokens = tok_;
        batch.pos = pos_;
        batch.tables = tables_;
        batch.ctx = ctx;
        batch.max_ctx = max_ctx;
        batch.kv = kv_->data();
        batch.layout = layout_;
        arch_->forward(batch, x_);
    }

    // logits_[k * n_vocab ..] = the logits at step token wants[k].t.
    void logits_for(std::span<const Want> wants) {
        const int64_t d = arch_->hparams().n_embd, n = static_cast<int64_t>(wants.size());
        xn_.resize(static_cast<size_t>(n * d));
        for (int64_t k = 0; k < n; ++k) std::copy_n(&x_[wants[static_cast<size_t>(k)].t * d], d, &xn_[k * d]);
        logits_.resize(static_cast<size_t>(n * info_.n_vocab));
        arch_->logits(xn_.data(), n, logits_.data());
    }

    // Scores prompt targets and samples, one want per parallel task; a NaN fails only its row.
    void consume(const engine::StepPlan& plan, std::span<const Want> wants, engine::StepOutput& out) {
        const auto n = static_cast<int64_t>(wants.size());
        const int64_t grain = std::max<int64_t>(1, kParallelMacs / (4 * std::max<int64_t>(1, info_.n_vocab)));
        compute_.pool().parallel_for(n, grain, [&](int64_t k0, int64_t k1) {
            thread_local engine::SamplerScratch scratch;
            for (int64_t k = k0; k < k1; ++k) {
                const Want& w = wants[static_cast<size_t>(k)];
                const auto& r = plan.rows[static_cast<size_t>(w.row)];
                const std::span<const float> logits(logits_.data() + k * info_.n_vocab,
                                                    static_cast<size_t>(info_.n_vocab));
                try {
                    if (w.target >= 0) {
                        out.prompt_scores[static_cast<size_t>(w.row)][static_cast<size_t>(w.target)] =
                            engine::score_token(logits, r.targets[static_cast<size_t>(w.target)], r.prompt_k);
                    } else {
                        const Slot& s = slots_[static_cast<size_t>(r.slot)];
                        out.sampled[static_cast<size_t>(w.row)] =
                            engine::sample_logits(logits, s.params, s.penalties, r.u, scratch, r.mask);
                    }
                } catch (const std::exception& e) {
                    // Rows fail independently; several wants of one row may fail at once.
                    std::lock_guard<std::mutex> lock(err_mu_);
                    auto& err = out.errors[static_cast<size_t>(w.row)];
                    if (err.empty())
                        err = std::string(w.target >= 0 ? "request failed: " : "sampling failed: ") + e.what();
                }
            }
        });
        for (size_t i = 0; i < out.errors.size(); ++i)
            if (!out.errors[i].empty()) out.sampled[i].reset();
    }

    model::GgufFile file_;
    Compute compute_;
    std::unique_ptr<CpuArchitecture> arch_;
    engine::ModelInfo info_;
    engine::KvGeometry geo_;
    engine::KvLayout layout_;
    int64_t kv_dim_ = 0;
    std::unique_ptr<KvPool> kv_;
    std::vector<Slot> slots_;
    std::mutex err_mu_;
    std::vector<int32_t> tok_, row_of_;
    std::vector<int64_t> pos_, row_start_;
    std::vector<std::span<const int32_t>> tables_;
    std::vector<float> x_, xn_, logits_;
};

}  // namespace

std::unique_ptr<engine::Backend> make_cpu_backend(const std::string& path, const CpuOptions& opts) {
    return std::make_unique<CpuBackend>(model::GgufFile::open(path), opts, path);
}

}  // namespace loom::cpu
