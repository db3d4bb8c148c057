#!/usr/bin/env python3
"""Serving benchmark: an engine over its own protocol (docs/protocol.md) and, with --gateway,
the same engine behind loom-gateway over HTTP (streamed /v1/completions).

Usage:
  tools/bench_serving.py --engine build/bin/loom-engine-cpu --model M.gguf \\
      [--gateway build/bin/loom-gateway] [--quick] [--engine-arg=--threads=2] [--json out.json]

Scenarios (--scenarios, comma-separated; default all):
  concurrency  bursts of 1, 16, 64 and 256 requests (--concurrency), without and with top-20
               logprobs: aggregate tokens/s, TTFT and ITL p50/p99
  mixed        --mixed-decoders requests decoding while --mixed-long prompts of --long tokens
               arrive one by one: the decoders' ITL p50, p99 and p99/p50
  prefix       TTFT of a --long-token prompt cold, then again with all but its last tokens in
               the prefix cache (and the cached_tokens reported)
  context      TTFT and decode tokens/s of one request at each of --contexts (default 8K and
               30K) tokens of context (skipped, with a note, when the model's context is shorter)
  grammar      the decode cost of a grammar: bursts of --grammar-concurrency (default 1,16)
               requests without and with GEN's grammar= (--grammar KIND:SOURCE, default
               `regex:[ -~]+`, printable ASCII, which never completes, so every request still
               decodes --gen tokens under a real mask): tok/s and ITL p50 of both and their ratio.
               Through the gateway only regex and choice kinds (guided_regex, guided_choice).
               Not in the default list: --scenarios grammar

Each concurrency row also gives the CPU time the measured process spent per token (the
engine's, or loom-gateway's through HTTP, from /proc/PID/stat) and that time's share of the
burst's wall time: a share near 1.0 would mean that one thread of it limits the burst.

Each concurrency row also gives the hardware ratio of its decode steps: the weight bytes
(--weights-bytes, default the model file's size) read once per step over the ITL p50, as a share
of --hbm-tbs (default 4.8 TB/s, the H200's HBM3e), and the tok/s that reading the weights once
per step at that bandwidth would allow (KV reads left out).

Prompts are random token ids (fixed seed), so no two requests share a prefix unless meant to;
every request has temperature 0 and ignore_eos, so it generates exactly --gen tokens. TTFT is
request sent -> first token received; ITL the gaps between one request's tokens (through the
gateway: between stream chunks that carry text). Prints one JSON object per measurement and a
table; --json writes them all to a file. --quick shrinks every size for a smoke run on a CPU
with a small model.
"""
import argparse
import base64
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time


def pct(xs, q):
    """The q-th percentile (nearest rank) of xs, or None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100.0 * len(s) + 0.5)) - 1))]


def hello_fields(line):
    return dict(f.split("=", 1) for f in line.split()[2:] if "=" in f)


class EngineTarget:
    """Requests over the engine protocol: one process, a reader thread timestamping lines."""
    name = "engine"

    def __init__(self, engine, model, args):
        self.p = subprocess.Popen([engine, "--model", model, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        hello = self.p.stdout.readline()
        if not hello.startswith("HELLO "):
            sys.exit("engine did not start: " + hello.strip())
        self.hello = hello_fields(hello)
        self.lock = threading.Lock()
        self.reqs = {}
        self.wlock = threading.Lock()
        self.n = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            now = time.perf_counter()
            parts = line.split()
            if len(parts) < 2:
                continue
            with self.lock:
                r = self.reqs.get(parts[1])
                if r is None:
                    continue
                if parts[0] == "T":
                    r["times"].append(now)
                elif parts[0] in ("DONE", "ERR"):
                    r["end"] = line.strip()
                    m = re.search(r"cached_tokens=(\d+)", line)
                    r["cached"] = int(m.group(1)) if m else 0
                    r["event"].set()

    def submit(self, prompt, gen, logprobs=None, grammar=None):
        """Sends one GEN; grammar: (kind, source text) for grammar= (docs/protocol.md, "Grammars")."""
        self.n += 1
        rid = "b%d" % self.n
        r = {"times": [], "event": threading.Event(), "end": None, "cached": 0}
        with self.lock:
            self.reqs[rid] = r
        extra = " logprobs=%d" % logprobs if logprobs is not None else ""
        if grammar is not None:
            extra += " grammar=%s:%s" % (grammar[0], base64.b64encode(grammar[1].encode()).decode())
        line = "GEN %s prompt=%s max_tokens=%d temperature=0 ignore_eos=1%s\n" % (
            rid, ",".join(map(str, prompt)), gen, extra)
        r["sent"] = time.perf_counter()
        with self.wlock:
            self.p.stdin.write(line)
            self.p.stdin.flush()
        return r

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=120)

    def abort(self):
        """Ends the engine at once (after a failed request: what it still runs is not waited for)."""
        self.p.kill()
        self.p.wait(timeout=60)


class GatewayTarget:
    """Requests over HTTP: loom-gateway on a free port, one thread per streamed request."""
    name = "gateway"

    def __init__(self, gateway, engine, model, args, hello):
        cmd = [gateway, "--model", model, "--port", "0", "--engine", engine] + ["--engine-arg=" + a for a in args]
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            line = self.p.stderr.readline()
            if not line:
                break
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.abort()
            sys.exit("loom-gateway did not start")
        threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()
        while time.time() < deadline:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            finally:
                c.close()
            time.sleep(0.1)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/v1/models")
        self.model_id = json.loads(c.getresponse().read())["data"][0]["id"]
        c.close()
        self.hello = hello

    def submit(self, prompt, gen, logprobs=None, grammar=None):
        """Streams one completion; grammar: (kind, source) as guided_regex or guided_choice."""
        r = {"times": [], "event": threading.Event(), "end": None, "cached": 0}
        body = {"model": self.model_id, "prompt": prompt, "max_tokens": gen, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        if logprobs is not None:
            body["logprobs"] = logprobs
        if grammar is not None:
            if grammar[0] == "regex":
                body["guided_regex"] = grammar[1]
            elif grammar[0] == "choice":
                body["guided_choice"] = json.loads(grammar[1])
            else:
                raise ValueError("grammar kind %s cannot go through the gateway" % grammar[0])

        def run():
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
                r["sent"] = time.perf_counter()
                c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
                resp = c.getresponse()
                buf = b""
                while True:
                    chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
                    if not chunk:
                        break
                    now = time.perf_counter()
                    buf += chunk
                    while b"\n\n" in buf:
                        event, buf = buf.split(b"\n\n", 1)
                        data = event[len(b"data: "):]
                        if data == b"[DONE]":
                            continue
                        # Only the usage and error events are parsed: JSON parsing of every
                        # top-20 chunk in this one Python process limited the figures at
                        # ~10,000 tokens/s. A chunk carries text unless its text is "" (inside
                        # a JSON string that pattern would be escaped).
                        if b'"usage":{' in data or b'"error":' in data:
                            obj = json.loads(data)
                            if obj.get("usage"):
                                r["cached"] = (obj["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                            if "error" in obj:
                                r["end"] = "ERR " + json.dumps(obj["error"])
                            if not obj.get("choices") or not obj["choices"][0].get("text"):
                                continue
                        if b'"choices":[{' in data and b'"text":""' not in data:
                            r["times"].append(now)
                c.close()
                r["end"] = r["end"] or "DONE"
            except Exception as e:  # reported, not raised: the benchmark goes on
                r["end"] = "ERR %r" % e
            r["event"].set()

        r["sent"] = time.perf_counter()
        threading.Thread(target=run, daemon=True).start()
        return r

    def close(self):
        self.p.terminate()
        self.p.wait(timeout=60)

    abort = close  # the gateway's engine dies with it (engine/lifeline.hpp)


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far (/proc/PID/stat fields 14 and 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_all(reqs, timeout=7200):
    for r in reqs:
        if not r["event"].wait(timeout):
            sys.exit("a request did not finish")
        if r["end"].startswith("ERR"):
            sys.exit("a request failed: " + r["end"])


def summarize(reqs):
    ttft = [r["times"][0] - r["sent"] for r in reqs if r["times"]]
    itl = [b - a for r in reqs for a, b in zip(r["times"], r["times"][1:])]
    tokens = sum(len(r["times"]) for r in reqs)
    t0 = min(r["sent"] for r in reqs)
    t1 = max(r["times"][-1] for r in reqs if r["times"])
    ms = lambda v: None if v is None else round(v * 1000, 3)
    return {"requests": len(reqs), "tokens": tokens, "tok_s": round(tokens / (t1 - t0), 1),
            "ttft_p50_ms": ms(pct(ttft, 50)), "ttft_p99_ms": ms(pct(ttft, 99)),
            "itl_p50_ms": ms(pct(itl, 50)), "itl_p99_ms": ms(pct(itl, 99))}


class Bench:
    def __init__(self, a, target, rng):
        self.a, self.t, self.rng = a, target, rng
        self.n_vocab = int(target.hello["n_vocab"])
        self.n_ctx = int(target.hello["n_ctx"])
        self.results = []

    def prompt(self, n):
        return [1] + [self.rng.randrange(3, self.n_vocab) for _ in range(n - 1)]

    def report(self, scenario, **fields):
        row = {"target": self.t.name, "scenario": scenario, **fields}
        self.results.append(row)
        print(json.dumps(row), flush=True)

    def concurrency(self):
        for lp in (None, 20):
            for c in self.a.concurrency:
                cpu0, wall0 = cpu_seconds(self.t.p.pid), time.perf_counter()
                reqs = [self.t.submit(self.prompt(self.a.prompt), self.a.gen, lp) for _ in range(c)]
                wait_all(reqs)
                cpu = cpu_seconds(self.t.p.pid) - cpu0
                sm = summarize(reqs)
                sm["cpu_us_per_token"] = round(cpu / max(sm["tokens"], 1) * 1e6, 2)
                sm["cpu_share"] = round(cpu / (time.perf_counter() - wall0), 3)
                hw = {}
                if sm["itl_p50_ms"]:
                    tbs = self.a.weights_bytes / (sm["itl_p50_ms"] / 1000) / 1e12
                    hw = {"weights_tbs": round(tbs, 3), "hbm_share": round(tbs / self.a.hbm_tbs, 3),
                          "limit_tok_s": round(c * self.a.hbm_tbs * 1e12 / self.a.weights_bytes, 1)}
                self.report("concurrency", concurrency=c, logprobs=lp or 0, prompt=self.a.prompt, gen=self.a.gen,
                            **sm, **hw)

    def mixed(self):
        long = min(self.a.long, self.n_ctx - self.a.gen - 1)
        dec = [self.t.submit(self.prompt(16), self.a.mixed_gen) for _ in range(self.a.mixed_decoders)]
        while any(len(r["times"]) < 2 for r in dec):  # all decoding
            time.sleep(0.005)
        start = time.perf_counter()
        longs = []
        for _ in range(self.a.mixed_long):
            longs.append(self.t.submit(self.prompt(long), 4))
            longs[-1]["event"].wait(3600)
        stop = time.perf_counter()
        wait_all(dec + longs)
        itl = [b - a for r in dec for a, b in zip(r["times"], r["times"][1:]) if start <= b <= stop]
        p50, p99 = pct(itl, 50), pct(itl, 99)
        self.report("mixed", decoders=self.a.mixed_decoders, long_prompts=self.a.mixed_long, long_tokens=long,
                    itl_p50_ms=round(p50 * 1000, 3), itl_p99_ms=round(p99 * 1000, 3),
                    itl_p99_over_p50=round(p99 / p50, 2), long_ttft_ms=round(statistics.median(
                        r["times"][0] - r["sent"] for r in longs) * 1000, 3))

    def prefix(self):
        n = min(self.a.long, self.n_ctx - self.a.gen - 1)
        base = self.prompt(n)
        cold = self.t.submit(base, 2)
        wait_all([cold])
        warm = self.t.submit(base[:-3] + [self.rng.randrange(3, self.n_vocab) for _ in range(3)], 2)
        wait_all([warm])
        self.report("prefix", prompt=n, ttft_cold_ms=round((cold["times"][0] - cold["sent"]) * 1000, 3),
                    ttft_cached_ms=round((warm["times"][0] - warm["sent"]) * 1000, 3), cached_tokens=warm["cached"])

    def context(self):
        for ctx in self.a.contexts:
            if self.n_ctx < ctx + 32:
                self.report("context", context=ctx, skipped="the engine's context is %d tokens" % self.n_ctx)
                continue
            r = self.t.submit(self.prompt(ctx), 32)
            wait_all([r])
            dec = (len(r["times"]) - 1) / (r["times"][-1] - r["times"][0])
            self.report("context", context=ctx, ttft_ms=round((r["times"][0] - r["sent"]) * 1000, 3),
                        decode_tok_s=round(dec, 1))


    def grammar(self):
        kind, _, source = self.a.grammar.partition(":")
        if self.t.name == "gateway" and kind not in ("regex", "choice"):
            self.report("grammar", skipped="kind %s is not sent through the gateway" % kind)
            return
        for c in self.a.grammar_concurrency:
            sm = {}
            for with_grammar in (False, True):
                g = (kind, source) if with_grammar else None
                reqs = [self.t.submit(self.prompt(self.a.prompt), self.a.gen, grammar=g) for _ in range(c)]
                wait_all(reqs)
                sm[with_grammar] = summarize(reqs)
            plain, gram = sm[False], sm[True]
            self.report("grammar", concurrency=c, grammar=self.a.grammar, prompt=self.a.prompt, gen=self.a.gen,
                        tok_s=plain["tok_s"], grammar_tok_s=gram["tok_s"], grammar_tokens=gram["tokens"],
                        itl_p50_ms=plain["itl_p50_ms"], grammar_itl_p50_ms=gram["itl_p50_ms"],
                        tok_s_ratio=round(gram["tok_s"] / plain["tok_s"], 3) if plain["tok_s"] else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--gateway", help="loom-gateway executable: also measure through HTTP")
    ap.add_argument("--engine-arg", action="append", default=[])
    ap.add_argument("--scenarios", default="concurrency,mixed,prefix,context")
    ap.add_argument("--concurrency", default="1,16,64,256")
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens per request (concurrency)")
    ap.add_argument("--gen", type=int, default=128, help="tokens generated per request")
    ap.add_argument("--long", type=int, default=4096, help="long prompt tokens (mixed, prefix)")
    ap.add_argument("--mixed-decoders", type=int, default=32)
    ap.add_argument("--mixed-long", type=int, default=4)
    ap.add_argument("--mixed-gen", type=int, default=1024)
    ap.add_argument("--contexts", default="8192,30000", help="context sizes of the context scenario")
    ap.add_argument("--grammar", default="regex:[ -~]+", help="KIND:SOURCE of the grammar scenario (source as text)")
    ap.add_argument("--grammar-concurrency", default="1,16", help="burst sizes of the grammar scenario")
    ap.add_argument("--weights-bytes", type=float, help="bytes read per decode step (default: the model file's size)")
    ap.add_argument("--hbm-tbs", type=float, default=4.8, help="memory bandwidth the ratios are against, TB/s")
    ap.add_argument("--quick", action="store_true", help="small sizes: a CPU smoke run")
    ap.add_argument("--json", help="write every result to this file")
    a = ap.parse_args()
    if a.quick:
        a.prompt, a.gen, a.long, a.mixed_decoders, a.mixed_long, a.mixed_gen = 32, 16, 512, 8, 2, 200
    a.concurrency = [int(c) for c in a.concurrency.split(",")]
    a.contexts = [int(c) for c in a.contexts.split(",")]
    a.grammar_concurrency = [int(c) for c in a.grammar_concurrency.split(",")]
    if a.weights_bytes is None:
        a.weights_bytes = float(os.path.getsize(a.model))
    scenarios = a.scenarios.split(",")
    results = []
    targets = ["engine"] + (["gateway"] if a.gateway else [])
    hello = None
    for name in targets:
        t = EngineTarget(a.engine, a.model, a.engine_arg) if name == "engine" else \
            GatewayTarget(a.gateway, a.engine, a.model, a.engine_arg, hello)
        hello = t.hello
        b = Bench(a, t, random.Random(1234))
        done = False
        try:  # a failed request exits (wait_all): the engine or gateway must not outlive us
            wait_all([t.submit(b.prompt(8), 4)])  # warm-up
            for s in scenarios:
                getattr(b, s)()
            done = True
        finally:
            t.close() if done else t.abort()
        results += b.results
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"engine": os.path.basename(a.engine), "model": os.path.basename(a.model),
                       "engine_args": a.engine_arg, "results": results}, f, indent=1)
    print("\n%-8s %-12s %-22s %9s %11s %11s %10s %10s %6s %9s %8s %5s" % (
        "target", "scenario", "case", "tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "HBM", "limit", "cpu us/t",
        "cpu"))
    for r in results:
        if r["scenario"] == "concurrency":
            case = "c=%d lp=%d" % (r["concurrency"], r["logprobs"])
            print("%-8s %-12s %-22s %9.1f %9.2fms %9.2fms %8.2fms %8.2fms %6.3f %9.1f %8.2f %5.2f" % (
                r["target"], r["scenario"], case, r["tok_s"], r["ttft_p50_ms"], r["ttft_p99_ms"], r["itl_p50_ms"] or 0,
                r["itl_p99_ms"] or 0, r.get("hbm_share", 0), r.get("limit_tok_s", 0), r["cpu_us_per_token"],
                r["cpu_share"]))
        else:
            rest = {k: v for k, v in r.items() if k not in ("target", "scenario")}
            print("%-8s %-12s %s" % (r["target"], r["scenario"], json.dumps(rest)))


if __name__ == "__main__":
    main()
