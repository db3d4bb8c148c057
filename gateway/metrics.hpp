// GET /metrics: the gateway's Prometheus metrics, with vLLM's metric names under a `loom:`
// prefix, computed from the engine traffic the gateway sees (docs/metrics.md lists each
// metric and where its value comes from).
//
// Source: the Prometheus text exposition format 0.0.4 ("Exposition formats": HELP/TYPE
// lines, counters with the _total suffix, histograms as cumulative _bucket{le} series
// with _sum and _count); vLLM's metric names (docs "Production Metrics", v1:
// num_requests_running/waiting, kv_cache_usage_perc, prompt/generation_tokens,
// time_to_first_token_seconds, inter_token_latency_seconds, e2e_request_latency_seconds,
// request_success{finished_reason}, prefix_cache_queries/hits).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/engine_observer.hpp"

namespace loom::gateway {

/// A Prometheus histogram: cumulative counts of observations <= each upper bound.
class Histogram {
public:
    /// `bounds`: increasing upper bounds (the +Inf bucket is implicit).
    explicit Histogram(std::vector<double> bounds);
    /// Adds one observation (seconds for the latency histograms).
    void observe(double v);
    /// Appends the _bucket/_sum/_count samples of `name` with `labels` (`key="value"`, or
    /// empty) in the text format.
    void render(std::string& out, std::string_view name, std::string_view labels) const;
    uint64_t count() const { return count_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
    double sum_ = 0;
    uint64_t count_ = 0;
};

/// The gateway's metrics. It observes every engine request through EngineObserver (one
/// engine request per choice of an OpenAI request) and renders them for GET /metrics.
/// Single-threaded, like the rest of the gateway (the io_context thread).
class Metrics : public EngineObserver {
public:
    using Clock = std::chrono::steady_clock;

    /// `model_name`: the served model id, the `model_name` label of every series.
    explicit Metrics(std::string model_name);

    void on_hello(const protocol::Hello& h) override;
    void on_submit(const std::string& id, int64_t prompt_tokens) override;
    void on_prompt_logprobs(const std::string& id) override;
    void on_token(const std::string& id) override;
    void on_cancel(const std::string& id, bool stop_matched) override;
    void on_done(const std::string& id, const protocol::Done& done, std::string_view line) override;
    void on_error(const std::string& id) override;

    /// The exposition text (Content-Type: text/plain; version=0.0.4).
    std::string render() const;

    /// `key=<n>` in a protocol line (the first field named so), e.g. cached_tokens in a
    /// DONE line that carries it; nullopt when absent or not a non-negative integer.
    static std::optional<int64_t> line_key(std::string_view line, std::string_view key);

private:
    struct Request {
        Clock::time_point submitted, last_token;
        int64_t prompt_tokens = 0;
        int64_t generated = 0;
        bool started = false;       // first T or PLP line seen (prefill done)
        bool stop_matched = false;  // the gateway cancelled it at a stop string
    };
    void finish(std::map<std::string, Request>::iterator it, const std::string& reason);

    std::string model_name_;
    std::map<std::string, Request> live_;
    int64_t n_ctx_ = 0;
    uint64_t hellos_ = 0;
    uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
    uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
    std::map<std::string, uint64_t> finished_;  // by finished_reason
    Histogram ttft_, itl_, e2e_;
};

}  // namespace loom::gateway
