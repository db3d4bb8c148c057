"""End to end: GET /metrics, read by a real Prometheus parser (Debian's
python3-prometheus-client) before and after traffic, with counters that moved by exactly
what the traffic did: prompt and generation tokens, finished requests by reason, the
latency histograms' counts, prefix-cache queries and hits, engine restarts; and the
running/waiting gauges while a request is in flight.
"""
import http.client
import json
import os
import socket
import tempfile
import threading
import unittest

from prometheus_client.parser import text_string_to_metric_families

import loomtest
from loomtest import Gateway, shared, wait_until

MODEL = shared("models/stories260K.gguf")
HERE = os.path.dirname(os.path.abspath(__file__))
PACED = os.path.join(HERE, "paced_engine.py")
FAKE = os.path.join(HERE, "fake_engine.py")
NAME = "stories260K"
LABEL = {"model_name": NAME}

COUNTERS = ["loom:prompt_tokens", "loom:generation_tokens", "loom:request_success", "loom:prefix_cache_queries",
            "loom:prefix_cache_hits", "loom:engine_restarts"]
GAUGES = ["loom:num_requests_running", "loom:num_requests_waiting", "loom:kv_cache_usage_perc"]
HISTOGRAMS = ["loom:time_to_first_token_seconds", "loom:inter_token_latency_seconds",
              "loom:e2e_request_latency_seconds"]


def scrape(gw):
    """GET /metrics parsed by prometheus_client: {family name: family}; checks the
    content type and that every family loom documents is there with its type."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    body = resp.read().decode("utf-8")
    conn.close()
    assert resp.status == 200, (resp.status, body)
    assert resp.getheader("Content-Type").startswith("text/plain; version=0.0.4"), resp.getheader("Content-Type")
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    for names, kind in ((COUNTERS, "counter"), (GAUGES, "gauge"), (HISTOGRAMS, "histogram")):
        for n in names:
            assert n in fams, "no %s in /metrics:\n%s" % (n, body)
            assert fams[n].type == kind, (n, fams[n].type)
            assert fams[n].documentation, n
    return fams


def value(fams, family, sample=None, **labels):
    """The value of the sample `sample` (default: the family's own name, or name_total for
    counters) whose labels include `labels` and model_name."""
    f = fams[family]
    want = sample or (family + "_total" if f.type == "counter" else family)
    for s in f.samples:
        if s.name == want and all(s.labels.get(k) == v for k, v in dict(LABEL, **labels).items()):
            return s.value
    raise AssertionError("no sample %s%r in %s" % (want, labels, [(s.name, s.labels) for s in f.samples]))


def hist_count(fams, family):
    f = fams[family]
    count = value(fams, family, family + "_count")
    inf = value(fams, family, family + "_bucket", le="+Inf")
    assert count == inf, (family, count, inf)
    # Buckets are cumulative: never decreasing with le.
    buckets = sorted(((float(s.labels["le"]), s.value) for s in f.samples if s.name == family + "_bucket"))
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
    return count


class RealEngine(loomtest.GatewayTestCase):
    gateway_model = MODEL

    def test_counters_move_by_the_traffic(self):
        before = scrape(self.gw)
        for g in GAUGES:
            self.assertEqual(value(before, g), 0, g)

        # Completions, n=2, 6 tokens each, greedy: two engine requests ending at length.
        st, out = self.gw.post("/v1/completions", {"model": NAME, "prompt": "Once upon a time", "n": 2,
                                                   "max_tokens": 6, "temperature": 0})
        self.assertEqual(st, 200, out)
        self.assertEqual(out["usage"], {"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17})
        # Chat stopped by a stop string: the gateway cancels it; its reason is "stop".
        st, out = self.gw.post("/v1/chat/completions", {"model": NAME, "temperature": 0, "max_tokens": 40,
                                                        "messages": [{"role": "user", "content": "Once upon a time"}],
                                                        "stop": [" little"]})
        self.assertEqual(st, 200, out)
        self.assertEqual(out["choices"][0]["finish_reason"], "stop")
        # A streamed request whose client leaves: aborted.
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({
            "model": NAME, "prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True, "stream": True}),
            headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.fp.readline()
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        wait_until(lambda: value(scrape(self.gw), "loom:request_success", finished_reason="abort") ==
                   value(before, "loom:request_success", finished_reason="abort") + 1, what="the abort counted")

        after = scrape(self.gw)
        d = lambda fam, **kw: value(after, fam, **kw) - value(before, fam, **kw)  # noqa: E731
        self.assertEqual(d("loom:request_success", finished_reason="length"), 2)
        self.assertEqual(d("loom:request_success", finished_reason="stop"), 1)
        self.assertEqual(d("loom:request_success", finished_reason="error"), 0)
        self.assertEqual(d("loom:prompt_tokens"), 5 * 4)  # four engine requests of 5 prompt tokens
        gen = d("loom:generation_tokens")
        self.assertGreaterEqual(gen, 12 + 4 + 1)  # 12, the chat's 4 before " little", the aborted one's first
        for g in GAUGES:
            self.assertEqual(value(after, g), 0, g)
        # Every engine request that produced a token has one TTFT and one end-to-end sample;
        # every token after the first one ITL sample.
        self.assertEqual(hist_count(after, "loom:time_to_first_token_seconds") -
                         hist_count(before, "loom:time_to_first_token_seconds"), 4)
        self.assertEqual(hist_count(after, "loom:e2e_request_latency_seconds") -
                         hist_count(before, "loom:e2e_request_latency_seconds"), 4)
        self.assertEqual(hist_count(after, "loom:inter_token_latency_seconds") -
                         hist_count(before, "loom:inter_token_latency_seconds"), gen - 4)
        # Every prompt was looked up in the engine's prefix cache; 5 tokens fill no block.
        self.assertEqual(d("loom:prefix_cache_queries"), 5 * 4)
        self.assertEqual(d("loom:prefix_cache_hits"), 0)
        self.assertEqual(d("loom:engine_restarts"), 0)

    def test_prefix_cache_hits_are_the_cached_tokens(self):
        # A prompt of more than two KV blocks, sent twice: the second finds its full blocks
        # in the engine's prefix cache and says so in usage; /metrics counts the same.
        prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside " * 2
        before = scrape(self.gw)
        body = {"model": NAME, "prompt": prompt, "max_tokens": 2, "temperature": 0}
        st, first = self.gw.post("/v1/completions", body)
        self.assertEqual(st, 200, first)
        st, second = self.gw.post("/v1/completions", body)
        self.assertEqual(st, 200, second)
        n = second["usage"]["prompt_tokens"]
        self.assertGreater(n, 32)
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        self.assertGreaterEqual(cached, 32)
        after = scrape(self.gw)
        d = lambda fam: value(after, fam) - value(before, fam)  # noqa: E731
        self.assertEqual(d("loom:prefix_cache_queries"), 2 * n)
        self.assertEqual(d("loom:prefix_cache_hits"),
                         cached + first["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))


class PacedEngine(unittest.TestCase):
    """paced_engine.py holds each request's first token for 1 s (a queue or a long
    prefill) and reports cached_tokens=3 in DONE."""

    @classmethod
    def setUpClass(cls):
        cls.gw = Gateway(MODEL, "--engine-arg=--first-token-delay", "--engine-arg=1.0", "--engine-arg=--cached-tokens",
                         "--engine-arg=3", engine=PACED)
        cls.gw.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def test_gauges_and_prefix_cache(self):
        before = scrape(self.gw)
        result = {}
        t = threading.Thread(target=lambda: result.update(r=self.gw.post("/v1/completions", {
            "model": NAME, "prompt": "Once upon a time", "max_tokens": 100})))
        t.start()
        waiting = wait_until(lambda: (lambda f: f if value(f, "loom:num_requests_waiting") == 1 else None)(
            scrape(self.gw)), what="a waiting request")
        self.assertEqual(value(waiting, "loom:num_requests_running"), 0)
        self.assertEqual(value(waiting, "loom:kv_cache_usage_perc"), 0)
        running = wait_until(lambda: (lambda f: f if value(f, "loom:num_requests_running") == 1 else None)(
            scrape(self.gw)), what="a running request")
        self.assertEqual(value(running, "loom:num_requests_waiting"), 0)
        # 5 prompt tokens and at least one generated, of a 2048-token context.
        self.assertGreaterEqual(value(running, "loom:kv_cache_usage_perc"), 6 / 2048)
        self.assertLessEqual(value(running, "loom:kv_cache_usage_perc"), 105 / 2048)
        t.join(timeout=60)
        self.assertEqual(result["r"][0], 200, result)
        after = scrape(self.gw)
        self.assertEqual(value(after, "loom:num_requests_running"), 0)
        self.assertEqual(value(after, "loom:prefix_cache_queries") - value(before, "loom:prefix_cache_queries"), 5)
        self.assertEqual(value(after, "loom:prefix_cache_hits") - value(before, "loom:prefix_cache_hits"), 3)
        self.assertEqual(value(after, "loom:generation_tokens") - value(before, "loom:generation_tokens"), 100)
        ttft = after["loom:time_to_first_token_seconds"]
        # The one TTFT sample is about 1 s: in the bucket le=2.5 but not le=0.75.
        b = {s.labels["le"]: s.value for s in ttft.samples if s.name.endswith("_bucket")}
        self.assertEqual(b["2.5"] - b["0.75"], 1, b)


class EngineRestart(unittest.TestCase):
    """fake_engine.py dies on its first GEN; the gateway starts it again."""

    def test_restart_and_error_counted(self):
        fd, state = tempfile.mkstemp(prefix="loom-fake-state-")
        os.close(fd)
        gw = Gateway(MODEL, "--engine-arg=--die-after-gens", "--engine-arg=1", "--engine-arg=--state",
                     "--engine-arg=" + state, engine=FAKE)
        try:
            gw.wait_ready()
            before = scrape(gw)
            self.assertEqual(value(before, "loom:engine_restarts"), 0)
            st, _ = gw.post("/v1/completions", {"model": NAME, "prompt": "Once upon a time", "max_tokens": 3})
            self.assertEqual(st, 503)
            wait_until(lambda: gw.get("/health")[0] == 200 and
                       value(scrape(gw), "loom:engine_restarts") == 1, what="the restart")
            after = scrape(gw)
            self.assertEqual(value(after, "loom:request_success", finished_reason="error"), 1)
            self.assertEqual(value(after, "loom:num_requests_waiting"), 0)
        finally:
            gw.stop()
            os.unlink(state)


if __name__ == "__main__":
    loomtest.main()
