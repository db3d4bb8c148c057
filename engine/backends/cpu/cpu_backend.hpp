// The CPU backend: the llama-family forward pass in F32 over mmapped GGUF weights.
//
// Source: the Llama architecture (Touvron et al. 2023): pre-norm RMSNorm (Zhang &
// Sennrich 2019), rotary position embeddings (Su et al. 2021), grouped-query attention
// (Ainslie et al. 2023) with a KV cache, and a SwiGLU feed-forward (Shazeer 2020);
// qwen2 adds q/k/v biases, qwen3 a per-head RMSNorm on q and k. Structured like
// llama2.c's run.c: the forward pass reads top to bottom like the math.
#pragma once

#include <memory>
#include <string>

#include "engine/backend.hpp"

namespace loom::cpu {

struct CpuOptions {
    int threads = 0;      ///< worker threads; 0: one per CPU this process may use (affinity mask)
    int32_t n_ctx = 0;    ///< 0: the model's training context
};

/// Loads the GGUF at `path` (mmapped; weights are not copied) and returns the CPU
/// backend for it. Throws model::GgufError for a malformed file and
/// model::ModelError for a model it cannot run (the message names the reason).
std::unique_ptr<engine::Backend> make_cpu_backend(const std::string& path, const CpuOptions& opts);

}  // namespace loom::cpu
