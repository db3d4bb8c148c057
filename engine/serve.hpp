// The engine's serve loop: reads protocol lines (docs/protocol.md) from an input stream,
// hands requests to the scheduler (engine/scheduler.hpp), runs one step per iteration
// (Scheduler::run_step: the backend's begin_step, the grammar masks, finish_step) and writes the
// T/LP/PLP/DONE/ERR lines that come out.
#pragma once

#include <cstdio>
#include <string>

#include "engine/backend.hpp"
#include "protocol/protocol.hpp"

namespace loom::engine {

struct ServeOptions {
    std::string engine_name = "loom-engine";
    /// Running sequences at most (--parallel); 0: as many as the backend has slots for (the
    /// KV pool decides). Later requests wait in FIFO order.
    int max_parallel = 0;
    /// Tokens evaluated per step at most, decodes and prefill chunks together
    /// (--max-batch-tokens); 0: the backend's limit.
    int max_batch_tokens = 0;
    /// Capabilities announced in HELLO (protocol.md, "Capabilities"); `grammar` is added
    /// when the backend gives ModelInfo::vocab_bytes.
    std::vector<std::string> caps = {
        protocol::cap::kLogprobs,          protocol::cap::kAllowed,   protocol::cap::kCancel,
        protocol::cap::kPromptLogprobs,    protocol::cap::kPenalties, protocol::cap::kLogitBias,
        protocol::cap::kProcessedLogprobs, protocol::cap::kSeed,      protocol::cap::kPing};
    /// When set, one line of scheduler counters (steps, preemptions, prefix hits, KV blocks)
    /// goes to this stream when the loop ends.
    std::FILE* stats = nullptr;
};

/// Builds the HELLO line for `info` and `opts`.
protocol::Hello make_hello(const ModelInfo& info, const ServeOptions& opts);

/// Writes HELLO, then serves until `in` reaches end of file and every accepted
/// request has ended; each request gets exactly one DONE or ERR. A malformed line gets
/// `ERR <id|-> <message>` and the loop goes on; a failure inside one request (bad ids,
/// a prompt longer than the context, NaN logits) ends only that request with ERR, and a
/// step that throws ends the requests in that step. HELLO's n_ctx is the model's context,
/// or the KV pool's size when that is smaller. Returns the process exit code (0).
/// Throws std::invalid_argument when the backend's KV geometry is unusable.
int serve(Backend& backend, std::FILE* in, std::FILE* out, const ServeOptions& opts);

}  // namespace loom::engine
