// The gateway's Prometheus metrics; see metrics.hpp and docs/metrics.md.
#include "gateway/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace loom::gateway {
namespace {

// Upper bounds in seconds. vLLM's buckets start at 1 ms (TTFT) and 10 ms (ITL); a CPU
// engine on a small model decodes a token in under a millisecond, so these start lower.
std::vector<double> ttft_buckets() {
    return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,
            0.75,  1.0,    2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
}
std::vector<double> itl_buckets() {
    return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1,
            0.15,   0.2,     0.3,    0.4,   0.5,    0.75,  1.0,    2.5,  5.0,   7.5,  10.0};
}
std::vector<double> e2e_buckets() {
    return {0.01, 0.025, 0.05, 0.1,  0.3,  0.5,  0.8,   1.0,   1.5,   2.0,   2.5,    5.0,   10.0,
            15.0, 20.0,  30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// A sample value in the text format: the shortest decimal that reads back to `v`,
// without an exponent between 1e-6 and 1e15 (so a bucket bound reads le="0.0001").
std::string num(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (std::isnan(v)) return "NaN";
    char buf[64];
    const double m = std::fabs(v);
    const auto r = m >= 1e-6 && m < 1e15 ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                                         : std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

// A label value with the text format's escapes (backslash, double quote, newline).
std::string escape_label(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
}

void sample(std::string& out, std::string_view name, std::string_view labels, double v) {
    out += name;
    if (!labels.empty()) {
        out += '{';
        out += labels;
        out += '}';
    }
    out += ' ';
    out += num(v);
    out += '\n';
}

// A family of one sample: its HELP and TYPE lines, then `name{labels} v`.
void metric(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            std::string_view labels, double v) {
    family(out, name, type, help);
    sample(out, name, labels, v);
}

double seconds(Metrics::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
    const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
    ++counts_[i];
    sum_ += v;
    ++count_;
}

void Histogram::render(std::string& out, std::string_view name, std::string_view labels) const {
    const std::string prefix = labels.empty() ? std::string() : std::string(labels) + ",";
    const std::string bucket = std::string(name) + "_bucket";
    uint64_t cum = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
        cum += counts_[i];
        const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
        sample(out, bucket, prefix + "le=\"" + le + "\"", static_cast<double>(cum));
    }
    sample(out, std::string(name) + "_sum", labels, sum_);
    sample(out, std::string(name) + "_count", labels, static_cast<double>(count_));
}

Metrics::Metrics(std::string model_name)
    : model_name_(std::move(model_name)), ttft_(ttft_buckets()), itl_(itl_buckets()), e2e_(e2e_buckets()) {
    for (const char* r : {"stop", "length", "abort", "error"}) finished_[r] = 0;
}

void Metrics::on_hello(const protocol::Hello& h) {
    ++hellos_;
    n_ctx_ = h.n_ctx;
}

void Metrics::on_submit(const std::string& id, int64_t prompt_tokens) {
    Request r;
    r.submitted = r.last_token = Clock::now();
    r.prompt_tokens = prompt_tokens;
    live_[id] = r;
}

void Metrics::on_prompt_logprobs(const std::string& id) {
    if (auto it = live_.find(id); it != live_.end()) it->second.started = true;
}

void Metrics::on_token(const std::string& id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    Request& r = it->second;
    const auto now = Clock::now();
    if (r.generated == 0) ttft_.observe(seconds(now - r.submitted));
    else itl_.observe(seconds(now - r.last_token));
    r.last_token = now;
    r.started = true;
    ++r.generated;
    ++generation_tokens_;
}

void Metrics::on_cancel(const std::string& id, bool stop_matched) {
    if (auto it = live_.find(id); it != live_.end() && stop_matched) it->second.stop_matched = true;
}

void Metrics::finish(std::map<std::string, Request>::iterator it, const std::string& reason) {
    e2e_.observe(seconds(Clock::now() - it->second.submitted));
    ++finished_[reason];
    live_.erase(it);
}

void Metrics::on_done(const std::string& id, const protocol::Done& done, std::string_view line) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    const Request& r = it->second;
    prompt_tokens_ += static_cast<uint64_t>(r.prompt_tokens);
    // Every finished request's prompt was looked up in the engine's prefix cache; DONE
    // writes cached_tokens= only when it is not 0 (docs/protocol.md), so absent is 0 hits.
    prefix_queries_ += static_cast<uint64_t>(r.prompt_tokens);
    if (auto cached = line_key(line, "cached_tokens"))
        prefix_hits_ += static_cast<uint64_t>(std::min(*cached, r.prompt_tokens));
    std::string reason = done.finish;
    if (r.stop_matched) reason = "stop";
    else if (reason == "cancelled") reason = "abort";
    else if (reason != "stop" && reason != "length") reason = "abort";
    finish(it, reason);
}

void Metrics::on_error(const std::string& id) {
    if (auto it = live_.find(id); it != live_.end()) finish(it, "error");
}

std::optional<int64_t> Metrics::line_key(std::string_view line, std::string_view key) {
    size_t pos = 0;
    while ((pos = line.find(key, pos)) != std::string_view::npos) {
        const bool at_field = pos > 0 && (line[pos - 1] == ' ' || line[pos - 1] == '\t');
        const size_t eq = pos + key.size();
        if (at_field && eq < line.size() && line[eq] == '=') {
            int64_t v = 0;
            const char* b = line.data() + eq + 1;
            const char* e = line.data() + line.size();
            const auto r = std::from_chars(b, e, v);
            const bool ends = r.ptr == e || *r.ptr == ' ' || *r.ptr == '\t' || *r.ptr == '\r' || *r.ptr == '\n';
            if (r.ec == std::errc() && r.ptr != b && ends && v >= 0) return v;
            return std::nullopt;
        }
        pos = eq;
    }
    return std::nullopt;
}

std::string Metrics::render() const {
    const std::string labels = "model_name=\"" + escape_label(model_name_) + "\"";
    int64_t running = 0, waiting = 0, held = 0;
    for (const auto& [id, r] : live_) {
        (r.started ? running : waiting) += 1;
        if (r.started) held += r.prompt_tokens + r.generated;
    }
    std::string out;
    metric(out, "loom:num_requests_running", "gauge",
           "Engine requests in flight whose prompt is evaluated (a token or prompt logprobs came).", labels,
           static_cast<double>(running));
    metric(out, "loom:num_requests_waiting", "gauge",
           "Engine requests sent that have produced nothing yet (queued in the engine, or in prefill).", labels,
           static_cast<double>(waiting));
    metric(out, "loom:kv_cache_usage_perc", "gauge",
           "KV cache usage, 1 = 100%: tokens held by running requests over the engine's context length (gateway "
           "estimate, capped at 1).",
           labels, n_ctx_ > 0 ? std::min(1.0, static_cast<double>(held) / static_cast<double>(n_ctx_)) : 0.0);
    metric(out, "loom:prompt_tokens_total", "counter", "Prompt tokens of finished engine requests.", labels,
           static_cast<double>(prompt_tokens_));
    metric(out, "loom:generation_tokens_total", "counter", "Tokens generated by the engine.", labels,
           static_cast<double>(generation_tokens_));
    family(out, "loom:request_success_total", "counter", "Finished engine requests, by finish reason.");
    for (const auto& [reason, n] : finished_)
        sample(out, "loom:request_success_total", labels + ",finished_reason=\"" + reason + "\"",
               static_cast<double>(n));
    metric(out, "loom:prefix_cache_queries_total", "counter",
           "Prompt tokens of finished requests, looked up in the engine's prefix cache.", labels,
           static_cast<double>(prefix_queries_));
    metric(out, "loom:prefix_cache_hits_total", "counter",
           "Of those, tokens the engine's prefix cache held (DONE's cached_tokens).", labels,
           static_cast<double>(prefix_hits_));
    metric(out, "loom:engine_restarts_total", "counter", "Times the engine was started again (HELLOs after the first).",
           labels, hellos_ > 0 ? static_cast<double>(hellos_ - 1) : 0.0);
    family(out, "loom:time_to_first_token_seconds", "histogram",
           "Time from sending GEN to receiving the first token, per engine request.");
    ttft_.render(out, "loom:time_to_first_token_seconds", labels);
    family(out, "loom:inter_token_latency_seconds", "histogram",
           "Time between successive tokens of an engine request, as the gateway receives them.");
    itl_.render(out, "loom:inter_token_latency_seconds", labels);
    family(out, "loom:e2e_request_latency_seconds", "histogram",
           "Time from sending GEN to the request's DONE or failure, per engine request.");
    e2e_.render(out, "loom:e2e_request_latency_seconds", labels);
    return out;
}

}  // namespace loom::gateway
