// The narrow interface between the engine's serve loop and a compute backend
// (CPU now; CUDA/HIP behind the same interface).
//
// A backend owns the weights and, per sequence, a KV cache. The serve loop feeds it
// token ids and asks it to sample; logits never leave the backend, only the sampled id
// and its (token, logprob) pairs do. Semantics of sampling and logprobs are those of
// engine/sampler.hpp, which the CPU backend runs and every other backend must match.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.hpp"

namespace loom::engine {

/// What the serve loop and the HELLO line need to know about the loaded model.
struct ModelInfo {
    std::string name;      ///< model name for HELLO
    std::string backend;   ///< "cpu", "cuda", "hip"
    int32_t n_vocab = 0;   ///< logits per position
    int32_t n_ctx = 0;     ///< longest sequence served (prompt + completion)
    int32_t bos = -1, eos = -1;
    std::vector<int32_t> eog;  ///< end-of-generation ids
};

/// One sequence's state on the backend (its KV cache and last logits).
class Sequence {
public:
    virtual ~Sequence() = default;
    /// Tokens already evaluated (positions 0..n_past-1 are in the KV cache).
    int64_t n_past() const { return n_past_; }

protected:
    int64_t n_past_ = 0;
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual const ModelInfo& info() const = 0;

    /// A new, empty sequence that can hold up to `capacity` tokens (<= n_ctx).
    /// Throws std::bad_alloc (or a backend error) when memory runs out.
    virtual std::unique_ptr<Sequence> new_sequence(int64_t capacity) = 0;

    /// Runs the model over `tokens` at positions n_past.. of `seq` (prefill when
    /// several, decode when one), appending them to the KV cache and keeping the
    /// logits of the last position for sample().
    /// When `prompt_scores` is non-null, also fills it with one entry per token after
    /// the first: entry i-1 holds logprob(tokens[i] | tokens[..i]) from the raw
    /// logits and the top `prompt_k` alternatives (the PLP lines of the protocol).
    /// Requires n_past + tokens.size() <= capacity; ids must be < n_vocab.
    virtual void eval(Sequence& seq, std::span<const int32_t> tokens, std::vector<SampleResult>* prompt_scores = nullptr,
                      int prompt_k = 0) = 0;

    /// One decode step for several sequences at once: seqs[i] gets tokens[i].
    /// The default runs eval() on each; batched backends override it.
    virtual void decode_batch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens) {
        for (size_t i = 0; i < seqs.size(); ++i) eval(*seqs[i], tokens.subspan(i, 1));
    }

    /// Samples the next token from the last logits of `seq` (see sampler.hpp for the
    /// exact semantics of params, history and the uniform draw `u` in [0, 1)).
    virtual SampleResult sample(Sequence& seq, const SamplingParams& params, const TokenHistory& history,
                                double u) = 0;
};

}  // namespace loom::engine
