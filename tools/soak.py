#!/usr/bin/env python3
"""Soak benchmark (not run in CI): loom-gateway and its engine under mixed traffic for
--duration seconds (default 600), with the engine killed (SIGKILL) every --kill-every
seconds and clients that disconnect mid-stream or stop reading. Every --interval seconds
it samples the resident memory (VmRSS) and open file descriptors of both processes; at
the end, with the traffic stopped and the gateway idle, it compares the gateway's
figures with those taken, idle too, after the warm-up. Exit status 1 when they grew
(descriptors by more than 4, memory by more than 25% + 8 MiB) or when a request ended
in a way it must not (a hang, a reset, a 5xx other than the 503 a kill causes).

  tools/soak.py --duration 120                      # a short run
  tools/soak.py --bin build/bin --model models/stories260K.gguf --json soak.json

Standard library only; talks to 127.0.0.1.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import procwatch

HERE = os.path.dirname(os.path.abspath(__file__))


def rss_kib(pid):
    """Resident memory of `pid` in KiB, 0 once it is gone (an engine between restarts)."""
    try:
        return procwatch.rss_kib(pid)
    except OSError:
        return 0


def fd_count(pid):
    """Open descriptors of `pid`, 0 once it is gone."""
    try:
        return len(procwatch.fds(pid))
    except OSError:
        return 0


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.bad = []

    def add(self, kind, ok=True, why=""):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if not ok:
                self.bad.append("%s: %s" % (kind, why))


class Soak:
    def __init__(self, a):
        self.a = a
        self.stats = Stats()
        self.stop = threading.Event()
        self.pause = threading.Event()  # set: clients wait (for the idle measurements)
        self.busy = 0
        self.busy_lock = threading.Lock()
        args = [os.path.join(a.bin, "loom-gateway"), "--model", a.model, "--port", "0", "--write-timeout", "2",
                "--engine-ping-interval", "1", "--engine-ping-timeout", "5"]
        self.gw = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        while self.port is None:
            line = self.gw.stderr.readline()
            if not line:
                sys.exit("loom-gateway did not start:\n" + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        threading.Thread(target=self.drain_log, daemon=True).start()
        self.wait_ready()
        self.model_id = json.loads(self.get("/v1/models")[1])["data"][0]["id"]

    def drain_log(self):
        for line in self.gw.stderr:
            self.log.append(line)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the engine did not become ready")

    def engine(self):
        kids = procwatch.live_children(self.gw.pid)
        return kids[0] if kids else None

    # --- traffic -----------------------------------------------------------------
    def client(self, k):
        rng = random.Random(k)
        kinds = [("complete", 35), ("chat_stream", 25), ("disconnect", 10), ("slow_reader", 3), ("misc", 17),
                 ("bad", 10)]
        total = sum(w for _, w in kinds)
        while not self.stop.is_set():
            while self.pause.is_set() and not self.stop.is_set():
                time.sleep(0.05)
            x, kind = rng.uniform(0, total), kinds[-1][0]
            for name, w in kinds:
                if x < w:
                    kind = name
                    break
                x -= w
            with self.busy_lock:
                self.busy += 1
            try:
                getattr(self, kind)(rng)
            except Exception as e:  # a hang or a reset: never expected
                self.stats.add(kind, False, repr(e))
            finally:
                with self.busy_lock:
                    self.busy -= 1

    def post(self, path, body, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        return c, c.getresponse()

    def check_status(self, kind, status, data):
        if status == 200:
            self.stats.add(kind)
        elif status == 503:  # a kill caught it in flight, or the engine was restarting
            self.stats.add(kind + "/503")
        else:
            self.stats.add(kind, False, "status %d: %r" % (status, data[:200]))

    def complete(self, rng):
        body = {"model": self.model_id, "prompt": rng.choice(["Once upon a time", "The cat", "Hi"]),
                "max_tokens": rng.randint(1, 64), "logprobs": rng.randint(0, 5), "temperature": rng.choice([0, 0.8]),
                "n": rng.randint(1, 2)}
        c, r = self.post("/v1/completions", body)
        data = r.read()
        c.close()
        self.check_status("complete", r.status, data)

    def chat_stream(self, rng):
        body = {"model": self.model_id, "messages": [{"role": "user", "content": "Once upon a time"}],
                "max_tokens": rng.randint(1, 96), "stream": True, "logprobs": True, "top_logprobs": 2,
                "n": rng.randint(1, 3)}
        c, r = self.post("/v1/chat/completions", body)
        data = r.read()
        c.close()
        if r.status == 200 and not data.rstrip().endswith(b"data: [DONE]"):
            self.stats.add("chat_stream", False, "no [DONE]: %r" % data[-200:])
        else:
            self.check_status("chat_stream", r.status, data)

    def disconnect(self, rng):
        body = {"model": self.model_id, "prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": True,
                "stream": True}
        c, r = self.post("/v1/completions", body)
        for _ in range(rng.randint(0, 5)):
            r.fp.readline()
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()  # RST
        self.stats.add("disconnect")

    def slow_reader(self, rng):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", self.port))
        body = json.dumps({"model": self.model_id, "prompt": "Once upon a time", "max_tokens": 1500,
                           "ignore_eos": True, "stream": True, "logprobs": 5}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        s.recv(100)
        time.sleep(rng.uniform(1, 4))  # stops reading; the gateway's write timeout ends it
        s.close()
        self.stats.add("slow_reader")

    def misc(self, rng):
        path = rng.choice(["/health", "/v1/models", "/tokenize", "/detokenize"])
        if path in ("/health", "/v1/models"):
            st, data = self.get(path)
            ok = st == 200 or (path == "/health" and st == 503)
        else:
            body = {"prompt": "Once upon a time"} if path == "/tokenize" else {"tokens": [1, 403, 407]}
            c, r = self.post(path, body)
            data = r.read()
            c.close()
            st, ok = r.status, r.status == 200
        self.stats.add("misc", ok, "status %d on %s" % (st, path))

    def bad(self, rng):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        raw = rng.choice([b"{not json", b'{"model": "nope", "prompt": "x"}', b'{"model": 1}',
                          b'{"prompt": "x", "prompt": "y"}', b'[' * 1000])
        c.request("POST", rng.choice(["/v1/completions", "/v1/chat/completions"]), body=raw,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        # 4xx; or 503 while the engine restarts (the gateway says so before it validates)
        self.stats.add("bad", 400 <= r.status < 500 or r.status == 503, "status %d" % r.status)

    # --- the run -------------------------------------------------------------------
    def quiesce(self):
        """Pauses the clients until none is busy and the gateway holds no request."""
        self.pause.set()
        deadline = time.time() + 60
        while time.time() < deadline and self.busy > 0:
            time.sleep(0.05)
        time.sleep(3)  # write timeouts and cancels settle
        self.wait_ready()
        return rss_kib(self.gw.pid), fd_count(self.gw.pid)

    def run(self):
        a = self.a
        clients = [threading.Thread(target=self.client, args=(k,), daemon=True) for k in range(a.clients)]
        for t in clients:
            t.start()
        t0 = time.time()
        time.sleep(min(10, a.duration / 10))  # warm-up: allocator pools, caches
        base_rss, base_fds = self.quiesce()
        self.pause.clear()
        samples, kills = [], 0
        next_kill = time.time() + a.kill_every
        next_sample = time.time()
        end = t0 + a.duration
        while time.time() < end:
            now = time.time()
            if now >= next_sample:
                eng = self.engine()
                samples.append({"t": round(now - t0, 1), "gateway_rss_kib": rss_kib(self.gw.pid),
                                "gateway_fds": fd_count(self.gw.pid), "engine_pid": eng,
                                "engine_rss_kib": rss_kib(eng) if eng else 0,
                                "engine_fds": fd_count(eng) if eng else 0,
                                "requests": sum(self.stats.counts.values())})
                s = samples[-1]
                print("t=%6.1f s  gateway rss %7d KiB fds %4d | engine pid %7s rss %7d KiB fds %3d | requests %d" % (
                    s["t"], s["gateway_rss_kib"], s["gateway_fds"], s["engine_pid"], s["engine_rss_kib"],
                    s["engine_fds"], s["requests"]), flush=True)
                next_sample = now + a.interval
            if now >= next_kill:
                eng = self.engine()
                if eng:
                    os.kill(eng, signal.SIGKILL)
                    kills += 1
                next_kill = now + a.kill_every
            time.sleep(0.05)
        end_rss, end_fds = self.quiesce()
        eng = self.engine()
        end_engine = (rss_kib(eng), fd_count(eng)) if eng else (0, 0)
        self.stop.set()
        for t in clients:
            t.join(timeout=60)
        self.gw.send_signal(signal.SIGTERM)
        try:
            code = self.gw.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.gw.kill()
            code = self.gw.wait()
        zombie_free = "status 383" not in "".join(self.log)
        grew_fds = end_fds > base_fds + 4
        grew_rss = end_rss > base_rss * 1.25 + 8192
        report = {
            "duration_s": a.duration, "clients": a.clients, "kills": kills,
            "restarts_logged": sum("restarting the engine" in l for l in self.log),
            "engine_ends_logged": sorted({re.sub(r"\d+ ms", "N ms", l.strip()[len("loom-gateway: "):])
                                          for l in self.log if "the engine" in l and ("exited" in l or "PING" in l
                                                                                      or "stopped" in l)}),
            "restart_delays_ms": [int(m.group(1)) for m in (re.search(r"restarting the engine in (\d+) ms", l)
                                                           for l in self.log) if m],
            "idle_after_warmup": {"gateway_rss_kib": base_rss, "gateway_fds": base_fds},
            "idle_at_end": {"gateway_rss_kib": end_rss, "gateway_fds": end_fds, "engine_rss_kib": end_engine[0],
                            "engine_fds": end_engine[1]},
            "max_during_run": {k: max(s[k] for s in samples) for k in ("gateway_rss_kib", "gateway_fds",
                                                                       "engine_rss_kib", "engine_fds")} if samples else {},
            "requests": dict(sorted(self.stats.counts.items())), "bad_outcomes": self.stats.bad[:20],
            "n_bad": len(self.stats.bad), "gateway_exit": code, "samples": samples,
        }
        print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(report, f, indent=1)
        failed = grew_fds or grew_rss or self.stats.bad or code != 0 or not zombie_free
        if failed:
            print("soak: FAILED (%s)" % ", ".join(w for w, c in (("descriptors grew", grew_fds), ("memory grew", grew_rss),
                                                                  ("bad outcomes", bool(self.stats.bad)),
                                                                  ("gateway exit %s" % code, code != 0)) if c))
        return 1 if failed else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"), help="folder of loom-gateway")
    p.add_argument("--model", default=None, help="GGUF file (default: ../shared/models/stories260K.gguf, "
                                                 "else models/stories260K.gguf)")
    p.add_argument("--duration", type=float, default=600, help="seconds of traffic (default 600)")
    p.add_argument("--interval", type=float, default=10, help="seconds between samples (default 10)")
    p.add_argument("--kill-every", type=float, default=30, help="seconds between engine kills (default 30)")
    p.add_argument("--clients", type=int, default=8, help="client threads (default 8)")
    p.add_argument("--json", help="also write the report and every sample to this file")
    a = p.parse_args()
    if a.model is None:
        for cand in (os.path.join(HERE, "..", "..", "shared", "models", "stories260K.gguf"),
                     os.path.join(HERE, "..", "models", "stories260K.gguf")):
            if os.path.exists(cand):
                a.model = cand
                break
        else:
            sys.exit("soak: give --model")
    sys.exit(Soak(a).run())


if __name__ == "__main__":
    main()
