#!/usr/bin/env python3
"""GPU benchmark of loom-engine-cuda on large models, in one command.

For each model: loom-gpu-bench (the backend alone: copy-bandwidth roofline, batch-1 decode, top-20
logprobs cost, per-operation time of one decode step, prefill 512/2048, batched decode), then the
engine over its stdin/stdout protocol (TTFT, prefill, decode tok/s with and without logprobs), then
loom-gateway in front of it (OpenAI /v1/completions, streaming, read with http.client). Prints a
table with each figure against its baseline from the same run, and writes --json.

Usage: bench_gpu.py --bin DIR --models A.gguf [B.gguf ...] [--json out.json]
                    [--variant NAME:ARG[,ARG...] ...]

Each --variant runs loom-gpu-bench again (decode only) with those GPU options added, after the
default run, and the summary compares its decode rate with the default's from the same run (e.g.
kvf32:--kv-f32 for the F32 KV pool, exact:--precision=exact, nographs:--no-graphs,
mv16:--matvec-rows,16).
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time

import loomproc  # tools/loomproc.py: the engine child process, /health, stop


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Engine(loomproc.Engine):
    def gen(self, fields):
        """Sends a GEN; returns (send time, [arrival time of each T], DONE line's fields)."""
        t0 = time.perf_counter()
        times = []
        for t, parts in self.lines(fields):
            if parts[0] == "T":
                times.append(t)
            elif parts[0] == "ERR":
                raise RuntimeError(" ".join(parts))
            elif parts[0] == "DONE":
                return t0, times, parts

    def close(self):
        super().close(60)


def ids(n, vocab, seed):
    r = random.Random(seed)
    return [r.randrange(1000, vocab - 1000) for _ in range(n)]


def engine_figures(binp, model, vocab):
    e = Engine([os.path.join(binp, "loom-engine-cuda"), "--model", model, "--ctx", "4096"])
    out = {"load_s": e.load_s}
    e.gen(f"prompt={','.join(map(str, ids(16, vocab, 0)))} max_tokens=4 temperature=0")
    for n in (512, 2048):
        ttft = []
        for r in range(3):
            t0, times, _ = e.gen(f"prompt={','.join(map(str, ids(n, vocab, 10 + r)))} max_tokens=1 temperature=0")
            ttft.append(times[0] - t0)
        out[f"ttft{n}_ms"] = statistics.median(ttft) * 1e3
        out[f"prefill{n}_tps"] = n / statistics.median(ttft)
    for lp in (None, 20):
        rates, totals = [], []
        for r in range(2):
            f = f"prompt={','.join(map(str, ids(512, vocab, 20 + r)))} max_tokens=128 temperature=0 ignore_eos=1"
            if lp is not None:
                f += f" logprobs={lp}"
            t0, times, _ = e.gen(f)
            rates.append((len(times) - 1) / (times[-1] - times[0]))
            totals.append(times[-1] - t0)
        key = "decode" if lp is None else "decode_lp20"
        out[f"{key}_tps"] = max(rates)
        out[f"{key}_request_s"] = min(totals)
    e.close()
    return out


def gateway_figures(binp, model, vocab):
    port = free_port()
    gw = subprocess.Popen([os.path.join(binp, "loom-gateway"), "--engine", os.path.join(binp, "loom-engine-cuda"),
                           "--model", model, "--port", str(port), "--ctx", "4096"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.time()
        while True:
            if gw.poll() is not None:
                raise RuntimeError("gateway exited: " + gw.stderr.read()[-2000:])
            if loomproc.healthy(port):
                break
            if time.time() - t0 > 180:
                raise RuntimeError("gateway did not become healthy")
            time.sleep(0.5)
        model_id = os.path.splitext(os.path.basename(model))[0]

        def stream(prompt, max_tokens, logprobs=None):
            body = {"model": model_id, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                    "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
            if logprobs is not None:
                body["logprobs"] = logprobs
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            t0 = time.perf_counter()
            c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {r.read()[:500]}")
            times, usage = [], None
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                ev = json.loads(data)
                if ev.get("usage"):
                    usage = ev["usage"]
                if ev.get("choices"):
                    times.append(time.perf_counter())
            t1 = time.perf_counter()
            c.close()
            return t0, times, t1, usage

        stream(ids(16, vocab, 0), 4)
        out = {}
        tt = []
        for r in range(3):
            t0, times, _, _ = stream(ids(512, vocab, 10 + r), 1)
            tt.append(times[0] - t0)
        out["ttft512_ms"] = statistics.median(tt) * 1e3
        for lp in (None, 5):
            totals, rates = [], []
            for r in range(2):
                t0, times, t1, usage = stream(ids(512, vocab, 20 + r), 128, lp)
                totals.append(t1 - t0)
                n = usage["completion_tokens"] if usage else len(times)
                rates.append((n - 1) / (times[-1] - times[0]) if len(times) > 1 else 0)
            key = "decode" if lp is None else "decode_lp5"
            out[f"{key}_request_s"] = min(totals)
            out[f"{key}_stream_tps"] = max(rates)
        return out
    finally:
        loomproc.stop(gw, 30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--json")
    ap.add_argument("--skip-direct", action="store_true")
    ap.add_argument("--skip-gateway", action="store_true")
    ap.add_argument("--variant", action="append", default=[])
    args = ap.parse_args()
    results = {}
    for m in args.models:
        name = os.path.basename(m)
        res = {}
        if not args.skip_direct:
            p = subprocess.run([os.path.join(args.bin, "loom-gpu-bench"), "--model", m], capture_output=True, text=True)
            print(p.stdout, p.stderr, sep="")
            for line in p.stdout.splitlines():
                if line.startswith("BENCH "):
                    res["direct"] = json.loads(line[6:])
            res["variants"] = {}
            for v in args.variant:
                vname, _, spec = v.partition(":")
                extra = [a for a in spec.split(",") if a]
                p = subprocess.run([os.path.join(args.bin, "loom-gpu-bench"), "--model", m, "--decode-only"] + extra,
                                   capture_output=True, text=True)
                print(f"-- variant {vname} ({spec})")
                print(p.stdout, p.stderr, sep="")
                for line in p.stdout.splitlines():
                    if line.startswith("BENCH "):
                        res["variants"][vname] = json.loads(line[6:])
        vocab = 128256
        try:
            res["engine"] = engine_figures(args.bin, m, vocab)
            print(name, "engine", res["engine"])
        except Exception as e:
            print(name, "engine benchmark failed:", e)
        if not args.skip_gateway:
            try:
                res["gateway"] = gateway_figures(args.bin, m, vocab)
                print(name, "gateway", res["gateway"])
            except Exception as e:
                print(name, "gateway benchmark failed:", e)
        results[name] = res
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)

    print("\n== summary (tok/s unless noted; ratio = figure / baseline measured in this run)")
    print(f"{'model':24} {'figure':34} {'value':>10} {'baseline':>26} {'ratio':>7}")

    def row(model, fig, val, base_name=None, base=None):
        if val is None:
            return
        r = f"{val / base:7.3f}" if base else ""
        b = f"{base_name} {base:.1f}" if base_name and base else ""
        print(f"{model:24} {fig:34} {val:10.1f} {b:>26} {r}")

    for name, r in results.items():
        d, e, g = r.get("direct", {}), r.get("engine", {}), r.get("gateway", {})
        roof = d.get("roofline_tps")
        row(name, "decode b1 (backend)", d.get("decode_tps"), "roofline", roof)
        row(name, "decode b1 (engine protocol)", e.get("decode_tps"), "roofline", roof)
        row(name, "decode b1 + top-20 logprobs (engine)", e.get("decode_lp20_tps"), "no logprobs", e.get("decode_tps"))
        row(name, "decode b1 + top-20 logprobs (backend)", d.get("decode_lp20_tps"), "no logprobs", d.get("decode_tps"))
        row(name, "prefill 512 (backend)", d.get("prefill512_tps"))
        row(name, "prefill 2048 (backend)", d.get("prefill2048_tps"))
        row(name, "prefill 512 (engine, via TTFT)", e.get("prefill512_tps"))
        row(name, "TTFT 512 engine (ms)", e.get("ttft512_ms"))
        row(name, "TTFT 2048 engine (ms)", e.get("ttft2048_ms"))
        row(name, "TTFT 512 gateway (ms)", g.get("ttft512_ms"), "engine", e.get("ttft512_ms"))
        row(name, "128-token request, gateway (s)", g.get("decode_request_s"), "engine",
            e.get("decode_request_s"))
        row(name, "decode stream rate, gateway", g.get("decode_stream_tps"), "engine", e.get("decode_tps"))
        row(name, "decode + logprobs 5, gateway", g.get("decode_lp5_stream_tps"), "gateway no lp",
            g.get("decode_stream_tps"))
        row(name, "batched decode 8 seqs (backend)", d.get("batch8_tps"), "batch 1", d.get("decode_tps"))
        for vname, vd in r.get("variants", {}).items():
            row(name, f"decode b1 (backend), {vname}", vd.get("decode_tps"), "default", d.get("decode_tps"))
    for name, r in results.items():
        d = r.get("direct", {})
        runs = [("default", d)] + list(r.get("variants", {}).items())
        names = []
        for _, vd in runs:
            for op in vd.get("ops", {}):
                if op not in names:
                    names.append(op)
        print(f"\n== {name}: one decode step, eager, ms per operation (all layers), per variant")
        print(f"{'op':16}" + "".join(f"{v[:14]:>15}" for v, _ in runs))
        for op in names:
            print(f"{op:16}" + "".join(f"{vd.get('ops', {}).get(op, float('nan')):15.3f}" for _, vd in runs))
        print(f"{'graph step ms':16}" + "".join(f"{vd.get('step_ms', float('nan')):15.3f}" for _, vd in runs))


if __name__ == "__main__":
    main()
