// The CPU backend: a model's forward pass in F32 over mmapped GGUF weights and a paged F32 KV
// cache, implementing the engine's step interface (engine/backend.hpp).
//
// This file's backend batches the step's rows into one flat batch, owns the KV pool and the
// sampling slots, and computes logits and samples; the model is an architecture
// (architecture.hpp: one file per architecture under arch/, e.g. arch/llama.cpp for llama,
// mistral, qwen2 and qwen3, arch/gemma.cpp, arch/phi3.cpp), written in shared blocks
// (blocks.hpp). Structured like llama2.c's run.c: a forward pass reads top to bottom like the
// math. One step runs every row of the batch through each matmul together (weights decoded
// once per tile of 32 rows); attention runs per (token, head) over that sequence's block
// table (kv_layout.hpp). The step is synchronous: begin_step/finish_step keep Backend's
// defaults (the whole step runs in finish_step, on the calling thread and the worker pool),
// so the scheduler's grammar masks are built before the forward pass, not during it.
//
// Batch invariance: every output element is computed by the same expression in the same
// order whatever else is in the step, how a prompt was chunked and which blocks hold the
// prefix (dot_row_multi is bit-identical to dot_row for any number of vectors; attention
// walks positions in increasing order; norms and sampling are per row). So a request's tokens
// and logprobs are bitwise the same alone, batched, chunked, from the prefix cache or after a
// preemption, at no cost: loom-engine-cpu's --precision exact, its only tier.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.hpp"

namespace loom::cpu {

struct CpuOptions {
    int threads = 0;    ///< worker threads; 0: one per CPU this process may use (affinity mask)
    int32_t n_ctx = 0;  ///< 0: the model's training context
    /// KV cache size in tokens over all sequences (rounded up to 16-token blocks). 0: n_ctx x 16
    /// sequences, at most a quarter of physical memory. The pool is reserved, not touched: its
    /// memory is used as blocks are first written. When smaller than n_ctx, n_ctx shrinks to it.
    int64_t kv_tokens = 0;
    int32_t max_step_tokens = 0;  ///< tokens one step may evaluate; 0: 2048
    int32_t max_slots = 0;        ///< running sequences at most; 0: 1024 (and never more than blocks)
};

/// Loads the GGUF at `path` (mmapped; weights are not copied) and returns the CPU
/// backend for it. Throws model::GgufError for a malformed file and
/// model::ModelError for a model it cannot run (the message names the reason: an
/// architecture it lacks, a missing tensor, a bad hyperparameter key) or a KV pool that cannot
/// be reserved.
std::unique_ptr<engine::Backend> make_cpu_backend(const std::string& path, const CpuOptions& opts);

}  // namespace loom::cpu
