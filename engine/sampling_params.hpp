// The one conversion from a GEN line's sampling keys (protocol::Gen) to the reference
// sampler's parameters (engine::SamplingParams), which every backend takes.
//
// Source: docs/protocol.md ("GEN": the keys and their defaults) and engine/sampler.hpp
// (what SamplingParams requires of its fields).
#pragma once

#include "engine/sampler.hpp"
#include "protocol/protocol.hpp"

namespace loom::engine {

/// The sampling parameters of request `g`. Carries temperature, top_k, top_p, min_p,
/// the three penalties, logit_bias (in GEN order) and processed_logprobs as they are;
/// `allowed` is sorted ascending with duplicates removed (SamplingParams requires that);
/// n_logprobs is `g.logprobs`, or -1 when GEN had no `logprobs=` key.
///
/// Not carried, because the scheduler uses them and the sampler does not: id, prompt,
/// max_tokens, seed (the request's generator), prompt_logprobs (prefill) and
/// ignore_eos. Ids are not checked against the vocabulary here; the scheduler refuses
/// out-of-range ids before it converts. Never throws except std::bad_alloc.
SamplingParams sampling_params_from(const protocol::Gen& g);

}  // namespace loom::engine
