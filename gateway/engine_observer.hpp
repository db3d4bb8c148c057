// The interface through which the engine client reports each request's protocol traffic
// (to the metrics of GET /metrics), kept free of networking so that it can be unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/protocol.hpp"

namespace loom::gateway {

/// Sees the engine traffic of every request, for /metrics (gateway/metrics.hpp). Each
/// submitted request gets on_submit, then any on_prompt_logprobs/on_token, then exactly
/// one on_done or on_error. All calls come on the io_context thread.
struct EngineObserver {
    virtual ~EngineObserver() = default;
    /// After each HELLO (the first start and every restart).
    virtual void on_hello(const protocol::Hello& h) = 0;
    /// A GEN was sent for `id` with `prompt_tokens` prompt ids.
    virtual void on_submit(const std::string& id, int64_t prompt_tokens) = 0;
    /// A PLP line of `id` arrived (its prompt is evaluated).
    virtual void on_prompt_logprobs(const std::string& id) = 0;
    /// A generated token of `id` reached its request (T, with its LP when asked for).
    virtual void on_token(const std::string& id) = 0;
    /// The gateway cancelled `id`; stop_matched: because a stop string matched.
    virtual void on_cancel(const std::string& id, bool stop_matched) = 0;
    /// The DONE line of `id` (`line`: its text, for keys the struct does not carry).
    virtual void on_done(const std::string& id, const protocol::Done& done, std::string_view line) = 0;
    /// `id` failed: an ERR line, a protocol error, or the engine's death.
    virtual void on_error(const std::string& id) = 0;
};

}  // namespace loom::gateway
