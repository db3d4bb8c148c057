// Unit tests of the gateway's metrics (gateway/metrics.hpp): the exact text of the
// Prometheus exposition after a scripted sequence of engine events, histogram buckets,
// and reading keys the protocol structs do not carry out of a DONE line.
#include <catch2/catch.hpp>

#include "gateway/metrics.hpp"

using loom::gateway::Histogram;
using loom::gateway::Metrics;

namespace {

// The line of `text` that starts with `prefix` (empty when none).
std::string line_of(const std::string& text, const std::string& prefix) {
    size_t p = text.find("\n" + prefix);
    if (p == std::string::npos) return text.rfind(prefix, 0) == 0 ? text.substr(0, text.find('\n')) : "";
    ++p;
    return text.substr(p, text.find('\n', p) - p);
}

loom::protocol::Done done(const std::string& id, const std::string& finish) {
    loom::protocol::Done d;
    d.id = id;
    d.finish = finish;
    return d;
}

}  // namespace

TEST_CASE("histogram buckets are cumulative, with +Inf, _sum and _count") {
    Histogram h({0.1, 1.0});
    h.observe(0.05);
    h.observe(0.1);  // upper bounds are inclusive (le)
    h.observe(0.5);
    h.observe(7.0);
    std::string out;
    h.render(out, "x", "a=\"b\"");
    CHECK(out ==
          "x_bucket{a=\"b\",le=\"0.1\"} 2\n"
          "x_bucket{a=\"b\",le=\"1\"} 3\n"
          "x_bucket{a=\"b\",le=\"+Inf\"} 4\n"
          "x_sum{a=\"b\"} 7.65\n"
          "x_count{a=\"b\"} 4\n");
}

TEST_CASE("counters and gauges follow the engine events") {
    Metrics m("my \"model\"");
    loom::protocol::Hello h;
    h.n_ctx = 100;
    m.on_hello(h);
    m.on_submit("r1", 10);
    m.on_submit("r2", 4);
    std::string t = m.render();
    CHECK(line_of(t, "loom:num_requests_waiting{") == "loom:num_requests_waiting{model_name=\"my \\\"model\\\"\"} 2");
    CHECK(line_of(t, "loom:num_requests_running{") == "loom:num_requests_running{model_name=\"my \\\"model\\\"\"} 0");
    m.on_token("r1");
    m.on_token("r1");
    m.on_prompt_logprobs("r2");
    t = m.render();
    CHECK(line_of(t, "loom:num_requests_running{").ends_with("} 2"));
    CHECK(line_of(t, "loom:num_requests_waiting{").ends_with("} 0"));
    // r1 holds 10 + 2 tokens, r2 its 4 prompt tokens: 16 of 100.
    CHECK(line_of(t, "loom:kv_cache_usage_perc{").ends_with("} 0.16"));
    m.on_cancel("r1", true);
    m.on_done("r1", done("r1", "cancelled"), "DONE r1 cancelled prompt_tokens=10 completion_tokens=2 cached_tokens=8");
    m.on_error("r2");
    m.on_submit("r3", 3);
    m.on_done("r3", done("r3", "cancelled"), "DONE r3 cancelled prompt_tokens=3 completion_tokens=0");
    m.on_hello(h);  // a restart
    t = m.render();
    CHECK(line_of(t, "loom:prompt_tokens_total{").ends_with("} 13"));  // r1 and r3 finished with DONE
    CHECK(line_of(t, "loom:generation_tokens_total{").ends_with("} 2"));
    CHECK(line_of(t, "loom:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"stop\"}") != "");
    CHECK(line_of(t, "loom:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"stop\"}")
              .ends_with(" 1"));
    CHECK(line_of(t, "loom:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"abort\"}")
              .ends_with(" 1"));
    CHECK(line_of(t, "loom:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"error\"}")
              .ends_with(" 1"));
    CHECK(line_of(t, "loom:prefix_cache_queries_total{").ends_with("} 13"));  // r3's DONE has no hits
    CHECK(line_of(t, "loom:prefix_cache_hits_total{").ends_with("} 8"));
    CHECK(line_of(t, "loom:engine_restarts_total{").ends_with("} 1"));
    CHECK(line_of(t, "loom:time_to_first_token_seconds_count{").ends_with("} 1"));
    CHECK(line_of(t, "loom:inter_token_latency_seconds_count{").ends_with("} 1"));
    CHECK(line_of(t, "loom:e2e_request_latency_seconds_count{").ends_with("} 3"));
    CHECK(line_of(t, "loom:num_requests_running{").ends_with("} 0"));
    // Events for ids the metrics never saw change nothing.
    m.on_token("zz");
    m.on_done("zz", done("zz", "stop"), "DONE zz stop prompt_tokens=1 completion_tokens=1");
    CHECK(m.render() == t);
}

TEST_CASE("line_key reads key=<n> fields only") {
    CHECK(Metrics::line_key("DONE r1 stop prompt_tokens=5 cached_tokens=3", "cached_tokens") == 3);
    CHECK(Metrics::line_key("DONE r1 stop cached_tokens=3 prompt_tokens=5\n", "cached_tokens") == 3);
    CHECK(Metrics::line_key("DONE r1 stop xcached_tokens=3", "cached_tokens") == std::nullopt);
    CHECK(Metrics::line_key("DONE r1 stop cached_tokens=-1", "cached_tokens") == std::nullopt);
    CHECK(Metrics::line_key("DONE r1 stop cached_tokens=3x", "cached_tokens") == std::nullopt);
    CHECK(Metrics::line_key("DONE r1 stop cached_tokens=", "cached_tokens") == std::nullopt);
    CHECK(Metrics::line_key("DONE r1 stop", "cached_tokens") == std::nullopt);
}
