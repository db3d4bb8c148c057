"""Chaos, engine side: the real CPU engine killed with SIGKILL under load five times in
30 s (the death is logged with its signal, no zombie is left, every request in flight
ends cleanly, service is back within 1 s); the engine inherits nothing but its pipes
and dies with the gateway; and fake engines (fake_engine.py) that die right after
HELLO, send a malformed HELLO, too many tokens, token ids past the vocabulary, huge
ERR or over-long lines, close their output, stop answering PING, or fall silent
(--request-timeout).
"""
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import loomtest
import procwatch
from loomtest import Gateway, shared, wait_until

MODEL = shared("models/stories260K.gguf")
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_engine.py")
NAME = "stories260K"


def engine_pid(gw, other_than=None, timeout=10):
    """The pid of the gateway's live engine child (one that is not `other_than`)."""
    def find():
        kids = [c for c in procwatch.live_children(gw.pid) if c != other_than]
        return kids[0] if len(kids) == 1 else None
    return wait_until(find, timeout=timeout, what="the engine process")


def health(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/health")
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return r.status, json.loads(body)
    except OSError:
        return None, None


class Load:
    """Client threads sending completions (streamed or not) until stop(); every
    outcome must be a clean one: 200 with a finished response, 503 with OpenAI's error
    object, or a stream that ends with a finish_reason or an error event, then [DONE]."""

    def __init__(self, port, threads=4, max_tokens=60):
        self.port, self.max_tokens = port, max_tokens
        self.stop_flag = threading.Event()
        self.outcomes, self.errors = [], []
        self.threads = [threading.Thread(target=self.run, args=(k,), daemon=True) for k in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=60)
            if t.is_alive():
                self.errors.append("a client thread hung")

    def run(self, k):
        rng = random.Random(k)
        while not self.stop_flag.is_set():
            stream = rng.random() < 0.5
            body = {"model": NAME, "prompt": "Once upon a time", "max_tokens": self.max_tokens, "ignore_eos": True,
                    "logprobs": 2, "stream": stream}
            try:
                self.outcomes.append(self.one(body))
            except Exception as e:  # a hang, a reset, a malformed answer: all failures
                self.errors.append("%s: %r" % ("stream" if stream else "plain", e))

    def one(self, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if resp.status == 503:
            err = json.loads(data)["error"]
            assert set(err) == {"message", "type", "param", "code"}, err
            assert err["code"] in ("engine_error", "engine_unavailable"), err
            return "503"
        assert resp.status == 200, (resp.status, data[:300])
        if not body["stream"]:
            out = json.loads(data)
            assert out["choices"][0]["finish_reason"] == "length", out
            assert out["usage"]["completion_tokens"] == self.max_tokens, out["usage"]
            return "200"
        events = [e for e in data.decode().split("\n\n") if e.strip()]
        assert events and events[-1] == "data: [DONE]", events[-2:]
        last = json.loads(events[-2][len("data: "):])
        if "error" in last:
            assert last["error"]["code"] == "engine_error", last
            return "stream-error"
        assert last["choices"][0]["finish_reason"] == "length", last
        return "stream-200"


class EngineKilledUnderLoad(unittest.TestCase):
    def test_kill_9_five_times_in_30_s(self):
        gw = Gateway(MODEL)
        try:
            gw.wait_ready()
            load = Load(gw.port)
            load.start()
            start = time.time()
            for k in range(5):
                time.sleep(max(0.0, start + 1 + 6 * k - time.time()))
                old = engine_pid(gw)
                wait_until(lambda: len(load.outcomes) > 0, what="a first answer")
                os.kill(old, signal.SIGKILL)
                killed_at = time.time()
                new = None
                while time.time() - killed_at < 5:  # back = a new engine said HELLO
                    st, _ = health(gw.port)
                    kids = procwatch.live_children(gw.pid)
                    if st == 200 and kids and old not in kids:
                        new = kids[0]
                        break
                    time.sleep(0.01)
                back_after = time.time() - killed_at
                self.assertIsNotNone(new, "the engine was not restarted")
                self.assertLess(back_after, 1.0, "service back after %.2f s" % back_after)
                self.assertEqual(procwatch.zombies(gw.pid), [], "zombie engines")
                self.assertIsNone(procwatch.state(old), "the killed engine was not reaped")
                wait_until(lambda: sum("the engine exited (signal 9, SIGKILL)" in l for l in gw.log) == k + 1,
                           timeout=5, what="the death in the log")
            load.stop()
            self.assertLess(time.time() - start, 40)
        finally:
            code = gw.stop()
        log = "".join(gw.log)
        self.assertEqual(load.errors, [], log[-3000:])
        self.assertNotIn("status 383", log)
        kinds = set(load.outcomes)
        self.assertTrue({"200", "stream-200"} & kinds, kinds)
        self.assertTrue({"503", "stream-error"} & kinds, "no request was in flight at a kill: %s" % kinds)
        self.assertEqual(code, 0, log[-2000:])


class EngineInheritsOnlyItsPipes(unittest.TestCase):
    def test_no_socket_reaches_the_engine_and_it_dies_with_the_gateway(self):
        gw = Gateway(MODEL)
        try:
            gw.wait_ready()
            # Hold a client connection open while looking, so there is one to leak.
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
            conn.request("GET", "/v1/models")
            self.assertEqual(conn.getresponse().status, 200)
            eng = engine_pid(gw)
            fds = procwatch.fds(eng)
            self.assertTrue(all(fds.get(k, "").startswith("pipe:") for k in (0, 1, 2)), fds)
            others = {k: v for k, v in fds.items() if k > 2}
            self.assertFalse([v for v in others.values() if v.startswith(("socket:", "pipe:", "anon_inode:"))],
                             "the engine inherited %s" % others)
            conn.close()
            gw.proc.kill()  # SIGKILL: no chance to clean up
            gw.proc.wait()
            self.assertTrue(procwatch.wait_gone(eng, 2), "the orphaned engine lives on")
        finally:
            gw.stop()

    def test_engine_dies_with_any_parent(self):
        # Not only the gateway's children: the engine asks for PR_SET_PDEATHSIG itself.
        r, w = os.pipe()  # its stdin never reaches end of file while we hold w
        code = ("import subprocess, sys\n"
                "p = subprocess.Popen([sys.argv[1], '--model', sys.argv[2]], stdin=int(sys.argv[3]),"
                " stdout=subprocess.DEVNULL, pass_fds=(int(sys.argv[3]),))\n"
                "print(p.pid, flush=True)\n"
                "p.wait()\n")
        parent = subprocess.Popen([sys.executable, "-c", code, os.path.join(loomtest.BIN, "loom-engine-cpu"), MODEL,
                                   str(r)], stdout=subprocess.PIPE, text=True, pass_fds=(r,))
        try:
            eng = int(parent.stdout.readline())
            wait_until(lambda: procwatch.state(eng) in ("S", "R"), what="the engine")
            time.sleep(0.3)  # past its start-up
            parent.kill()
            parent.wait()
            self.assertTrue(procwatch.wait_gone(eng, 2), "the engine outlived its parent")
        finally:
            parent.stdout.close()
            os.close(r)
            os.close(w)


class FakeEngines(unittest.TestCase):
    """One gateway per misbehaving fake engine."""

    def gateway(self, *engine_args, extra=()):
        args = list(extra) + ["--engine-arg=" + a for a in engine_args]
        gw = Gateway(MODEL, *args, engine=FAKE)
        self.addCleanup(gw.stop)
        return gw

    def complete(self, gw, stream=False, max_tokens=3):
        body = {"model": NAME, "prompt": "Once upon a time", "max_tokens": max_tokens}
        if stream:
            return gw.stream("/v1/completions", dict(body, stream=True))
        return gw.post("/v1/completions", body)

    def test_dies_right_after_hello_backs_off_then_unhealthy(self):
        gw = self.gateway("--die-after-hello", extra=("--engine-restart-limit", "3"))
        st, body = wait_until(lambda: (lambda r: r if r[1] and r[1].get("status") == "unhealthy" else None)(
            health(gw.port)), timeout=20, what="/health unhealthy")
        self.assertEqual(st, 503)
        self.assertIn("died 3 times in a row", body["reason"])
        self.assertIn("exited (status 3)", body["reason"])
        self.assertTrue(any("simulated crash right after HELLO" in l for l in body["engine_stderr"]), body)
        wait_until(lambda: any("restarting the engine in 1600 ms" in l for l in gw.log), timeout=20,
                   what="a fourth restart")
        delays = [int(m.group(1)) for m in (re.search(r"restarting the engine in (\d+) ms", l) for l in gw.log) if m]
        self.assertEqual(delays[:4], [200, 400, 800, 1600])
        log = "".join(gw.log)
        self.assertEqual(log.count("loom-gateway: unhealthy: "), 1, log)
        self.assertIn("| fake-engine: simulated crash right after HELLO", log)

    def test_malformed_hello_is_an_engine_failure(self):
        gw = self.gateway("--n-vocab", "0")
        self.assertEqual(gw.proc.wait(timeout=20), 1)
        gw.stop()
        self.assertIn("malformed HELLO: n_vocab=0 (must be 1..2147483647)", "".join(gw.log))

    def test_more_tokens_than_max_tokens_is_refused(self):
        gw = self.gateway("--ignore-max-tokens", "--tokens", "5000")
        gw.wait_ready()
        st, body = self.complete(gw, max_tokens=3)
        self.assertEqual(st, 503, body)
        self.assertIn("more tokens than max_tokens=3", body["error"]["message"])
        st, chunks, done = self.complete(gw, stream=True, max_tokens=3)
        self.assertTrue(done)
        self.assertIn("more tokens than max_tokens=3", chunks[-1]["error"]["message"])
        self.assertLessEqual(sum(len(c["choices"][0]["text"]) > 0 for c in chunks[:-1]), 3)
        self.assertEqual(health(gw.port)[0], 200)

    def test_token_outside_the_vocabulary_is_refused(self):
        gw = self.gateway("--token-id", "512")
        gw.wait_ready()
        st, body = self.complete(gw)
        self.assertEqual(st, 503, body)
        self.assertIn("token id 512 is outside the vocabulary (n_vocab 512)", body["error"]["message"])

    def test_huge_err_line_is_cut(self):
        gw = self.gateway("--err-size", "1000000")
        gw.wait_ready()
        st, body = self.complete(gw)
        self.assertEqual(st, 503, body)
        msg = body["error"]["message"]
        self.assertLess(len(msg), 600, msg[:100])
        self.assertIn("(1000000 bytes)", msg)

    def test_over_long_line_is_an_engine_failure(self):
        gw = self.gateway("--long-line", "2000000")
        wait_until(lambda: any("the engine wrote a line longer than 1048576 bytes" in l for l in gw.log), timeout=20,
                   what="the failure in the log")
        self.assertTrue(any("the engine was stopped (signal 9, SIGKILL)" in l for l in gw.log), gw.log)

    def test_engine_that_closes_its_output_is_stopped(self):
        gw = self.gateway("--close-stdout")
        gw.wait_ready()
        t0 = time.time()
        st, body = self.complete(gw)
        self.assertEqual(st, 503, body)
        self.assertIn("the engine closed its output; it was stopped (signal 15, SIGTERM)", body["error"]["message"])
        self.assertLess(time.time() - t0, 5)

    def test_stuck_engine_is_found_by_ping_and_restarted(self):
        fd, state = tempfile.mkstemp(prefix="loom-fake-state-")
        os.close(fd)
        self.addCleanup(os.unlink, state)
        gw = self.gateway("--ping", "--stall-after-gens", "1,3", "--state", state,
                          extra=("--engine-ping-interval", "0.2", "--engine-ping-timeout", "0.5"))
        gw.wait_ready()
        t0 = time.time()
        st, body = self.complete(gw)  # GEN 1: the engine stops reading and writing
        self.assertEqual(st, 503, body)
        self.assertIn("the engine did not answer PING within 500 ms", body["error"]["message"])
        self.assertLess(time.time() - t0, 5)
        gw.wait_ready(timeout=20)
        st, body = self.complete(gw)  # GEN 2: served by the restarted engine
        self.assertEqual(st, 200, body)
        st, chunks, done = self.complete(gw, stream=True)  # GEN 3: stuck again, mid-stream
        self.assertTrue(done)
        self.assertIn("did not answer PING", chunks[-1]["error"]["message"])

    def test_silent_engine_meets_the_request_timeout(self):
        fd, log = tempfile.mkstemp(prefix="loom-timeout-", suffix=".log")
        os.close(fd)
        self.addCleanup(os.unlink, log)
        gw = self.gateway("--token-delay", "10", extra=("--request-timeout", "0.5", "--engine-log", log))
        gw.wait_ready()
        t0 = time.time()
        st, body = self.complete(gw)
        self.assertEqual(st, 503, body)
        self.assertEqual(body["error"]["code"], "request_timeout")
        self.assertLess(time.time() - t0, 3)
        st, chunks, done = self.complete(gw, stream=True)
        self.assertTrue(done)
        self.assertEqual(chunks[-1]["error"]["code"], "request_timeout")
        with open(log) as f:
            lines = f.read().splitlines()
        self.assertIn("> CANCEL r1", lines)
        self.assertIn("> CANCEL r2", lines)

    def test_engine_that_never_answers_ping_is_restarted(self):
        gw = self.gateway("--no-pong", extra=("--engine-ping-interval", "0.1", "--engine-ping-timeout", "0.3"))
        wait_until(lambda: sum("did not answer PING within 300 ms; killing it" in l for l in gw.log) >= 2, timeout=20,
                   what="two liveness kills")
        # The gateway reaps a killed engine when its exit is seen, so one killed a moment ago can
        # still be a zombie; one that stays for seconds was never reaped.
        wait_until(lambda: procwatch.zombies(gw.pid) == [], timeout=5, what="every killed engine reaped")


class BusyEngineAnswersPing(unittest.TestCase):
    def test_pongs_come_while_tokens_are_generated(self):
        fd, log = tempfile.mkstemp(prefix="loom-ping-", suffix=".log")
        os.close(fd)
        self.addCleanup(os.unlink, log)
        gw = Gateway(MODEL, "--engine-log", log, "--engine-ping-interval", "0.02", "--engine-ping-timeout", "2")
        try:
            gw.wait_ready()
            load = Load(gw.port, threads=4, max_tokens=400)
            load.start()
            time.sleep(3)
            load.stop()
        finally:
            gw.stop()
        self.assertEqual(load.errors, [])
        with open(log) as f:
            lines = f.read().splitlines()
        pongs = [i for i, l in enumerate(lines) if l.startswith("< PONG ")]
        self.assertGreater(len(pongs), 20)
        # Some PONG arrives between two tokens of one request: answered mid-generation.
        tokens = [i for i, l in enumerate(lines) if l.startswith("< T ")]
        self.assertTrue(any(tokens[0] < p < tokens[-1] for p in pongs))
        self.assertFalse(any("did not answer PING" in l for l in gw.log), "".join(gw.log)[-2000:])


if __name__ == "__main__":
    loomtest.main()
