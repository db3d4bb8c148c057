// The interface between the CPU backend (batching, the paged KV pool, logits, sampling:
// cpu_backend.cpp) and one architecture's forward pass (engine/backends/cpu/arch/<name>.cpp:
// its weights, the hyperparameters beyond model::HParams, its layers over the batch).
//
// Adding an architecture is adding a file under arch/ with a make_<name> function and one line
// in arch/registry.cpp; the shared building blocks (RMSNorm, RoPE, paged attention with a
// window and soft-cap, the gated FFNs, the batched matmul) are in blocks.hpp, ops.hpp and
// compute.hpp. A layer's feed-forward is its own step (a function from the normalised rows to
// the FFN output), so a mixture-of-experts architecture replaces that step only.
//
// Source: the layout of llama.cpp's src/models/ (one file per architecture, read, not copied).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backends/cpu/compute.hpp"
#include "engine/kv_layout.hpp"
#include "model/gguf/gguf.hpp"
#include "model/gguf/hparams.hpp"

namespace loom::cpu {

/// The step's tokens as an architecture's forward pass reads them: token t of the flat batch
/// is tokens[t] at position pos[t] of the sequence whose block table is tables[t].
struct Batch {
    std::span<const int32_t> tokens;                   ///< [T] token ids
    std::span<const int64_t> pos;                      ///< [T] positions
    std::span<const std::span<const int32_t>> tables;  ///< [T] block tables (kv_layout.hpp)
    int64_t ctx = 0;                                   ///< sum of pos[t] + 1 (attention work)
    int64_t max_ctx = 0;                               ///< max of pos[t] + 1
    float* kv = nullptr;                               ///< the F32 KV pool
    engine::KvLayout layout;                           ///< its layout (kv_dim = n_head_kv * head_dim)
    int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

/// One architecture's model on the CPU, bound to a mapped GGUF that must outlive it.
class CpuArchitecture {
public:
    virtual ~CpuArchitecture() = default;

    /// The common hyperparameters (model::HParams): the backend sizes the KV pool from
    /// n_layer, n_head_kv and head_dim and the logits from n_vocab.
    virtual const model::HParams& hparams() const = 0;

    /// Told once, before any forward, the context the backend serves (tokens per sequence);
    /// an architecture whose math depends on it (Phi-3's LongRoPE factors) chooses here.
    virtual void set_context(int32_t n_ctx) { (void)n_ctx; }

    /// Runs the batch through every layer: writes each token's K and V at its position in
    /// the pool, and leaves x [T x n_embd] (F32, resized) holding the residual stream after
    /// the last layer, before the final norm. Deterministic: each token's result does not
    /// depend on the rest of the batch (batch invariance, cpu_backend.hpp).
    virtual void forward(const Batch& batch, std::vector<float>& x) = 0;

    /// out [n x n_vocab] = the logits of the n residual rows x [n x n_embd] (final norm,
    /// output projection, and the architecture's final soft-cap if any).
    virtual void logits(const float* x, int64_t n, float* out) = 0;
};

/// Binds the GGUF `f` to the architecture its general.architecture names, multiplying on
/// `compute` (which must outlive it). Throws model::ModelError naming the architecture when
/// loom has none of that name (listing those it has), and as the architecture's binding does
/// for a missing/misshapen tensor or a bad hyperparameter (naming the tensor or key).
std::unique_ptr<CpuArchitecture> load_architecture(const model::GgufFile& f, Compute& compute);

/// The architectures load_architecture knows, e.g. "llama, mistral, ...".
std::string cpu_architectures();

// One function per file under arch/ (each documents its source and hyperparameters).
std::unique_ptr<CpuArchitecture> make_llama(const model::GgufFile& f, Compute& compute);
std::unique_ptr<CpuArchitecture> make_gemma(const model::GgufFile& f, Compute& compute);
std::unique_ptr<CpuArchitecture> make_phi3(const model::GgufFile& f, Compute& compute);
std::unique_ptr<CpuArchitecture> make_gpt_oss(const model::GgufFile& f, Compute& compute);

}  // namespace loom::cpu
