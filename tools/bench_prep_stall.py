#!/usr/bin/env python3
"""How much long prompts arriving stall the other streams through loom-gateway: streamed
inter-token latency (ITL) while long prompts are parsed and tokenized, for each
--prep-threads value in one run (0: on the io thread, as before issue 11 item 6).

Usage:
  tools/bench_prep_stall.py [--bin build/bin] [--model M.gguf] [--prep 0,4] [--streams 8]
                            [--tokens 400] [--long-chars 150000] [--long-count 8] [--json]

For each value of --prep it starts loom-gateway (--port 0, --prep-threads V) with
tests/e2e/paced_engine.py as its engine (one token a request every 5 ms, set by sleeping,
with a context of 1M tokens), so that only the gateway's own work moves the figures. Then
--streams streamed completions of --tokens tokens run side by side, read by one client
thread (tools/bench_itl.py's Stream), while another thread posts --long-count completions
(max_tokens 1) whose prompt is --long-chars characters of English-like words, one after the
other. The model's tokenizer (default stories260K's SentencePiece vocabulary of 512 pieces,
about 2.3 characters a token) sets how long each takes to tokenize.

Prints, per value: the streams' ITL p50/p99/max in ms, the gaps over 25 ms (5 paced steps),
and the long requests' mean latency (send to answer) in ms. --json prints one JSON object.
"""
import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request

import bench_itl  # tools/bench_itl.py: start_gateway, stream_together, percentile
import loomproc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACED = os.path.join(ROOT, "tests", "e2e", "paced_engine.py")


def long_text(chars, seed=1):
    """About `chars` characters of words and commas (the same text for the same arguments)."""
    rng = random.Random(seed)
    words = ("once upon a time there was a little girl named Lily she loved to play outside in the park with her "
             "friends the quick brown fox jumps over the lazy dog").split()
    out, n = [], 0
    while n < chars:
        w = rng.choice(words) + ("," if rng.random() < 0.1 else "")
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def post(port, path, body, timeout=120):
    """POSTs JSON; returns the HTTP status (errors included)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


def one_run(port, model_id, streams, tokens, text, count):
    """The streams with the long prompts posted meanwhile; returns (ITL ms list, long latencies ms, statuses)."""
    lat, statuses = [], []

    def sender():
        time.sleep(0.2)  # the streams are under way
        for _ in range(count):
            t = time.perf_counter()
            statuses.append(post(port, "/v1/completions", {"model": model_id, "prompt": text, "max_tokens": 1}))
            lat.append((time.perf_counter() - t) * 1000.0)
            time.sleep(0.05)

    body = {"model": model_id, "prompt": "Once upon a time", "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "stream": True}
    th = threading.Thread(target=sender)
    th.start()
    times = bench_itl.stream_together("127.0.0.1", port, "/v1/completions", [body] * streams)
    th.join(timeout=300)
    itl = [(b - a) * 1000.0 for t in times for a, b in zip(t, t[1:])]
    return itl, lat, statuses


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models-default", "stories260K.gguf"))
    ap.add_argument("--bin", default=os.environ.get("LOOM_BIN", os.path.join(ROOT, "build", "bin")))
    ap.add_argument("--prep", default="0,4", help="--prep-threads values, compared in this run")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=400, help="tokens a stream (5 ms each)")
    ap.add_argument("--long-chars", type=int, default=150000)
    ap.add_argument("--long-count", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    model_id = os.path.splitext(os.path.basename(a.model))[0]
    text = long_text(a.long_chars)
    res = {}
    for v in [int(x) for x in a.prep.split(",")]:
        proc, port = bench_itl.start_gateway(a.bin, a.model, ["--engine", PACED, "--engine-arg=--n-ctx", "--engine-arg=1000000",
                                                              f"--prep-threads={v}"])
        try:
            bench_itl.stream_together("127.0.0.1", port, "/v1/completions",
                                      [{"model": model_id, "prompt": "Hi", "max_tokens": 8, "stream": True}])
            itl, lat, statuses = one_run(port, model_id, a.streams, a.tokens, text, a.long_count)
        finally:
            loomproc.stop(proc)
        res[str(v)] = {"n": len(itl), "p50": bench_itl.percentile(itl, 50), "p99": bench_itl.percentile(itl, 99),
                       "max": max(itl), "gaps_over_25ms": sum(x > 25.0 for x in itl),
                       "long_ms": sum(lat) / len(lat) if lat else float("nan"), "long_status": sorted(set(statuses))}
    if a.json:
        print(json.dumps(res))
        return
    print(f"{a.streams} streams x {a.tokens} tokens (5 ms pace), {a.long_count} prompts of {a.long_chars} characters")
    print(f"{'prep-threads':>12} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'gaps>25ms':>9} "
          f"{'long ms':>8} status")
    for v, r in res.items():
        print(f"{v:>12} {r['n']:6d} {r['p50']:8.2f} {r['p99']:8.2f} {r['max']:8.2f} {r['gaps_over_25ms']:9d} "
              f"{r['long_ms']:8.1f} {r['long_status']}")


if __name__ == "__main__":
    sys.exit(main())
