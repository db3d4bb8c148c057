#!/usr/bin/env python3
"""The hostile request mix of issue 40 against a running loom-gateway, and the gateway's
memory before, during and after it.

The mix: 16 regexes at once whose automata explode (refused), request bodies with a 1 MiB
parameter name and with 100,000 names, a request for 128 choices of 2,000 tokens with 20 top
logprobs each, and Transfer-Encoding framings other than chunked. Each is refused with a 4xx.

  tools/hostile_mix.py --bin build/bin --model models-default/stories260K.gguf [--rounds 3] [--skip-long]

starts loom-gateway from --bin on a free port, sends a few plain completions, reads its RSS
(idle), runs the mix --rounds times while sampling RSS every 10 ms (peak), waits --settle
seconds (3) and reads it again (after). Prints one line: idle, peak and after in MiB.
Standard library only; loopback only.
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loomproc  # noqa: E402
import procwatch  # noqa: E402

# About 60 bytes; (a|b)*a(a|b){24} alone asks for 2^24 DFA states.
HOSTILE_REGEX = "(a|b)*a(a|b){24}(c|d)*c(c|d){24}[0-9]{3}"


def post(port, path, body, timeout=120):
    """POSTs `body` (bytes, or an object sent as JSON); returns (status, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    return resp.status, payload


def smuggle(port, encoding):
    """A request whose body is a second request, framed by Transfer-Encoding `encoding`;
    returns every byte the gateway sends until it closes (or 10 s pass)."""
    inner = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: %s\r\n"
            "Content-Type: application/json\r\n\r\n" % encoding).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(head + inner)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    s.close()
    return data


def run_mix(port, model, long_request=True):
    """Sends the mix once; returns the list of statuses (HTTP codes; the smuggling attempts as
    the first status line's code). long_request=False leaves out the request for 128 x 2,000
    tokens (a gateway without --max-request-tokens would run it for minutes)."""
    statuses = []
    lock = threading.Lock()

    def send(path, body):
        st, _ = post(port, path, body)
        with lock:
            statuses.append(st)

    jobs = [("/v1/completions", {"model": model, "prompt": "x", "max_tokens": 4, "guided_regex": HOSTILE_REGEX})
            for _ in range(16)]
    jobs += [("/v1/completions", {"model": model, "prompt": "x", "k" * (1 << 20): 1}) for _ in range(4)]
    many = {"model": model, "prompt": "x"}
    many.update(("p%d" % i, 1) for i in range(100000))
    jobs += [("/v1/chat/completions", many)] * 2
    if long_request:
        jobs.append(("/v1/completions", {"model": model, "prompt": "x", "n": 128, "max_tokens": 2000, "logprobs": 20}))
    threads = [threading.Thread(target=send, args=j) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for enc in ("gzip", "chunked, identity", '"chunked"'):
        statuses.append(int(smuggle(port, enc).split(b" ", 2)[1]))
    return statuses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="folder with loom-gateway and loom-engine-cpu")
    ap.add_argument("--model", required=True, help="GGUF model file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--skip-long", action="store_true", help="leave out the 128 x 2,000-token request (for builds "
                    "that would run it)")
    args = ap.parse_args()
    proc = subprocess.Popen([os.path.join(args.bin, "loom-gateway"), "--model", args.model, "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = loomproc.read_port(proc.stderr, r"listening on http://127\.0\.0\.1:(\d+)", time.time() + 60, [])
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        model = os.path.basename(args.model)[:-len(".gguf")]
        deadline = time.time() + 60
        while post(port, "/v1/completions", {"model": model, "prompt": "Once", "max_tokens": 2})[0] != 200:
            if time.time() > deadline:
                raise SystemExit("the engine did not become ready")
            time.sleep(0.1)
        for _ in range(5):
            post(port, "/v1/completions", {"model": model, "prompt": "Once upon a time", "max_tokens": 16})
        time.sleep(args.settle)
        idle = procwatch.rss_kib(proc.pid)
        peak, stop = [idle], threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], procwatch.rss_kib(proc.pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.time()
        statuses = []
        for _ in range(args.rounds):
            statuses += run_mix(port, model, not args.skip_long)
        took = time.time() - t0
        stop.set()
        sampler.join()
        time.sleep(args.settle)
        after = procwatch.rss_kib(proc.pid)
        print("statuses %s; %d round(s) in %.1f s; RSS idle %.0f MiB, peak %.0f MiB, after %.0f s %.0f MiB" % (
            sorted(set(statuses)), args.rounds, took, idle / 1024, peak[0] / 1024, args.settle, after / 1024))
    finally:
        loomproc.stop(proc)


if __name__ == "__main__":
    main()
