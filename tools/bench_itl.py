#!/usr/bin/env python3
"""Streaming inter-token latency (ITL) through loom-gateway, with and without logprobs.

Usage:
  tools/bench_itl.py [--model M.gguf] [--bin build/bin] [--requests 8] [--tokens 200]
                     [--top-logprobs 5] [--endpoint chat|completions] [--json]
  tools/bench_itl.py --engine tests/e2e/paced_engine.py ...            (an engine at a fixed 5 ms pace)
  tools/bench_itl.py --url http://127.0.0.1:8080 --model-id ID ...   (a running gateway)

Starts loom-gateway (--port 0) on the model (default: models-default/stories260K.gguf)
unless --url is given, then runs --requests rounds of two streamed requests side by
side, each of --tokens tokens (ignore_eos, temperature 0): one without logprobs, one
with logprobs and top_logprobs=--top-logprobs. One client thread reads both sockets,
so a stall anywhere (client, gateway, engine, a busy machine) delays both alike and
the two distributions differ only by what logprobs cost. Like most SSE clients it
sends nothing while it reads a stream, so its kernel delays its ACKs: the case where
Nagle's algorithm on the server's socket holds back each small write until the
previous one is acknowledged (up to the 40 ms delayed-ACK timer).

ITL is the time between the arrivals of successive events that carry a token (the
role-only chat chunk, usage and [DONE] are left out), measured at the client with
time.perf_counter(). Prints p50/p90/p99/max in ms for both runs and the
p99 difference; --json prints one JSON object instead.

The e2e test tests/e2e/test_streaming_latency.py runs a short version and asserts that
the p99 with logprobs is within 2 ms of the p99 without.
"""
import argparse
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import loomproc  # tools/loomproc.py: port from the log, /health, stop

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def percentile(xs, p):
    """The p-th percentile (0..100) of xs by linear interpolation between order statistics."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def start_gateway(binary_dir, model, extra=()):
    """Starts loom-gateway on a free loopback port; returns (process, port) once its
    engine is ready (GET /health answers 200). Raises RuntimeError when it does not start."""
    proc = subprocess.Popen([os.path.join(binary_dir, "loom-gateway"), "--model", model, "--port", "0", *extra],
                            stderr=subprocess.PIPE, text=True)
    log = []
    deadline = time.time() + 60
    port = loomproc.read_port(proc.stderr, r"listening on http://127\.0\.0\.1:(\d+)", deadline, log)
    if port is None:
        proc.kill()
        raise RuntimeError("loom-gateway did not start:\n" + "".join(log))
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    while time.time() < deadline:
        if loomproc.healthy(port):
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the engine did not become ready")


class Stream:
    """One streamed request over a raw loopback socket (HTTP/1.1, chunked SSE), read
    incrementally so that several streams can be read by one thread."""

    def __init__(self, host, port, path, body, reuse=True):
        payload = json.dumps(body).encode()
        self.sock = socket.create_connection((host, port), timeout=120)
        if reuse:
            # A pooled connection, as SDK clients keep: an earlier request and its
            # answer went over it. (A peer that has just answered is "interactive" to
            # Linux's TCP, which then delays its ACKs.)
            self.sock.sendall(f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            got = b""
            while b"\r\n\r\n" not in got:
                got += self.sock.recv(65536)
            head, _, rest = got.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            while len(rest) < length:
                rest += self.sock.recv(65536)
        self.sock.sendall((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                           f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode() + payload)
        self.buf = b""
        self.headers_done = False
        self.done = False
        self.times = []  # arrival of each event that carries a token

    def on_readable(self, now):
        """Reads what arrived; timestamps each complete event with `now`."""
        data = self.sock.recv(1 << 16)
        if not data:
            self.done = True
            return
        self.buf += data
        if not self.headers_done:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                return
            status = head.split(b"\r\n", 1)[0]
            if b" 200 " not in status:
                raise RuntimeError(f"{status!r}: {rest[:300]!r}")
            self.headers_done, self.buf = True, rest
        while True:  # chunked transfer coding: <hex size>\r\n<data>\r\n
            line, sep, rest = self.buf.partition(b"\r\n")
            if not sep:
                return
            size = int(line.split(b";")[0], 16)
            if len(rest) < size + 2:
                return
            chunk, self.buf = rest[:size], rest[size + 2:]
            if size == 0:
                self.done = True
                return
            self.on_event(chunk, now)

    def on_event(self, chunk, now):
        for event in chunk.split(b"\n\n"):
            if not event.startswith(b"data: ") or event[6:] == b"[DONE]":
                continue
            for ch in json.loads(event[6:]).get("choices", []):
                carries = ch.get("text") if "text" in ch else (ch.get("delta") or {}).get("content")
                if carries:
                    self.times.append(now)


def stream_together(host, port, path, bodies, reuse=True):
    """Runs the streamed requests `bodies` at the same time, read by this one thread
    (so that a stall of the client, the gateway or the engine delays all of them
    alike); returns each one's token event arrival times (perf_counter seconds)."""
    streams = [Stream(host, port, path, b, reuse) for b in bodies]
    sel = selectors.DefaultSelector()
    for st in streams:
        sel.register(st.sock, selectors.EVENT_READ, st)
    deadline = time.time() + 300
    try:
        while any(not st.done for st in streams):
            if time.time() > deadline:
                raise RuntimeError("a stream did not end within 300 s")
            for key, _ in sel.select(timeout=5):
                st = key.data
                st.on_readable(time.perf_counter())
                if st.done:
                    sel.unregister(st.sock)
    finally:
        for st in streams:
            st.sock.close()
    return [st.times for st in streams]


def run(host, port, model_id, endpoint, requests, tokens, top_logprobs, reuse=True):
    """The workload: `requests` rounds of one stream without logprobs and one with,
    side by side; returns {"plain": [itl ms...], "logprobs": [itl ms...]}."""
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    base = {"model": model_id, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    if endpoint == "chat":
        base["messages"] = [{"role": "user", "content": "Once upon a time"}]
        with_lp = {"logprobs": True, "top_logprobs": top_logprobs}
    else:
        base["prompt"] = "Once upon a time"
        with_lp = {"logprobs": top_logprobs}
    out = {"plain": [], "logprobs": []}
    stream_together(host, port, path, [base])  # warm-up: page in the weights
    for _ in range(requests):
        plain, lp = stream_together(host, port, path, [base, {**base, **with_lp}], reuse)
        for kind, t in (("plain", plain), ("logprobs", lp)):
            out[kind] += [(b - a) * 1000.0 for a, b in zip(t, t[1:])]
    return out


def summary(itl):
    """p50/p90/p99/max (ms) and the sample count of one run."""
    return {"n": len(itl), "p50": percentile(itl, 50), "p90": percentile(itl, 90), "p99": percentile(itl, 99),
            "max": max(itl) if itl else float("nan")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models-default", "stories260K.gguf"))
    ap.add_argument("--bin", default=os.environ.get("LOOM_BIN", os.path.join(ROOT, "build", "bin")))
    ap.add_argument("--url", help="a running gateway (then --model-id names its model)")
    ap.add_argument("--model-id", help="model id (default: the model file's name without .gguf)")
    ap.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    ap.add_argument("--requests", type=int, default=8, help="requests of each kind")
    ap.add_argument("--tokens", type=int, default=200, help="tokens per request")
    ap.add_argument("--top-logprobs", type=int, default=5)
    ap.add_argument("--engine", help="engine executable for the gateway, e.g. tests/e2e/paced_engine.py")
    ap.add_argument("--gateway-arg", action="append", default=[], help="extra loom-gateway argument")
    ap.add_argument("--fresh-connections", action="store_true",
                    help="a new connection per stream (default: one that served a GET /v1/models first)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    proc = None
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port or 80
    else:
        proc, port = start_gateway(a.bin, a.model, (["--engine", a.engine] if a.engine else []) + a.gateway_arg)
        host = "127.0.0.1"
    model_id = a.model_id or os.path.splitext(os.path.basename(a.model))[0]
    try:
        itl = run(host, port, model_id, a.endpoint, a.requests, a.tokens, a.top_logprobs, not a.fresh_connections)
    finally:
        if proc:
            loomproc.stop(proc)
    res = {k: summary(v) for k, v in itl.items()}
    res["p99_difference_ms"] = res["logprobs"]["p99"] - res["plain"]["p99"]
    if a.json:
        print(json.dumps(res))
        return
    print(f"{a.endpoint}, {a.requests} x {a.tokens} tokens per kind, top_logprobs={a.top_logprobs}")
    print(f"{'':10} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for k in ("plain", "logprobs"):
        r = res[k]
        print(f"{k:10} {r['n']:6d} {r['p50']:8.2f} {r['p90']:8.2f} {r['p99']:8.2f} {r['max']:8.2f}")
    print(f"p99 with logprobs - without: {res['p99_difference_ms']:+.2f} ms")


if __name__ == "__main__":
    sys.exit(main())
