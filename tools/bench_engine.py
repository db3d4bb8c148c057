#!/usr/bin/env python3
"""Benchmark an engine over its own protocol (docs/protocol.md): prefill and decode
tokens/s, time to first token, and peak resident memory.

Usage:
  tools/bench_engine.py --engine build/bin/loom-engine-cpu --model M.gguf \
      [--prompt 512] [--gen 128] [--logprobs 20] [--runs 3] [--engine-arg=--threads=2]

Each run sends one GEN with a prompt of --prompt random token ids (fixed seed) and
max_tokens=--gen, ignore_eos=1, temperature 0. Prefill time is GEN written → first T
read (it includes the first sampling step: that is time to first token, TTFT); decode
tokens/s is (tokens - 1) / (last T - first T). Peak RSS is the engine's VmHWM after
the runs, read while it still runs. Prints one JSON line and a short table; medians over --runs.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--logprobs", type=int, default=-1, help="K for logprobs=K (-1: none)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--engine-arg", action="append", default=[])
    a = ap.parse_args()

    started = time.perf_counter()
    p = subprocess.Popen([a.engine, "--model", a.model, *a.engine_arg], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    hello = p.stdout.readline()
    if not hello.startswith("HELLO "):
        sys.exit(f"engine did not start: {hello.strip()}")
    load_s = time.perf_counter() - started
    fields = dict(f.split("=", 1) for f in hello.split()[2:] if "=" in f)
    n_vocab = int(fields["n_vocab"])
    rng = random.Random(1234)
    results = []
    for run in range(a.runs + 1):  # run 0 warms up
        prompt = [1] + [rng.randrange(3, n_vocab) for _ in range(a.prompt - 1)]
        extra = f" logprobs={a.logprobs}" if a.logprobs >= 0 else ""
        line = (f"GEN b{run} prompt={','.join(map(str, prompt))} max_tokens={a.gen} temperature=0 "
                f"ignore_eos=1{extra}\n")
        t0 = time.perf_counter()
        p.stdin.write(line)
        p.stdin.flush()
        times = []
        while True:
            out = p.stdout.readline()
            if not out:
                sys.exit("engine exited")
            kind = out.split(" ", 1)[0]
            if kind == "T":
                times.append(time.perf_counter())
            elif kind in ("DONE", "ERR"):
                if kind == "ERR":
                    sys.exit(out.strip())
                break
        if run == 0:
            continue
        ttft = times[0] - t0
        decode = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
        results.append({"ttft_s": ttft, "prefill_tok_s": a.prompt / ttft, "decode_tok_s": decode})
    rss = peak_rss_mib(p.pid)  # read while the engine is alive
    p.stdin.close()
    p.wait(timeout=60)
    summary = {
        "engine": os.path.basename(a.engine), "model": os.path.basename(a.model), "prompt": a.prompt, "gen": a.gen,
        "logprobs": a.logprobs, "runs": a.runs, "load_s": round(load_s, 3),
        "ttft_s": statistics.median(r["ttft_s"] for r in results),
        "prefill_tok_s": statistics.median(r["prefill_tok_s"] for r in results),
        "decode_tok_s": statistics.median(r["decode_tok_s"] for r in results),
        "peak_rss_mib": rss,
    }
    print(json.dumps(summary))
    print(f"{'prefill tok/s':>14} {'decode tok/s':>13} {'TTFT s':>8} {'peak RSS MiB':>13}")
    print(f"{summary['prefill_tok_s']:14.1f} {summary['decode_tok_s']:13.1f} {summary['ttft_s']:8.3f} "
          f"{summary['peak_rss_mib']:13.1f}")


if __name__ == "__main__":
    main()
