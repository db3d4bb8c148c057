// The engine's serve loop: reads protocol lines (docs/protocol.md) from an input
// stream, schedules requests onto a backend and writes T/LP/PLP/DONE/ERR lines.
#pragma once

#include <cstdio>
#include <string>

#include "engine/backend.hpp"
#include "protocol/protocol.hpp"

namespace loom::engine {

struct ServeOptions {
    std::string engine_name = "loom-engine";
    int max_parallel = 4;  ///< requests decoded together; later ones wait in FIFO order
    /// Capabilities announced in HELLO (protocol.md, "Capabilities").
    std::vector<std::string> caps = {protocol::cap::kLogprobs,  protocol::cap::kAllowed,
                                     protocol::cap::kCancel,    protocol::cap::kPromptLogprobs,
                                     protocol::cap::kPenalties, protocol::cap::kLogitBias,
                                     protocol::cap::kProcessedLogprobs, protocol::cap::kSeed,
                                     protocol::cap::kPing};
};

/// Builds the HELLO line for `info` and `opts`.
protocol::Hello make_hello(const ModelInfo& info, const ServeOptions& opts);

/// Writes HELLO, then serves until `in` reaches end of file and every accepted
/// request has ended; each request gets exactly one DONE or ERR. A malformed line gets
/// `ERR <id|-> <message>` and the loop goes on; a failure inside one request (bad ids,
/// a prompt longer than the context, out of memory) ends only that request with ERR.
/// Returns the process exit code (0).
int serve(Backend& backend, std::FILE* in, std::FILE* out, const ServeOptions& opts);

}  // namespace loom::engine
