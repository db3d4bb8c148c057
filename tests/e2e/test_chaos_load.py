"""Chaos, load: 1,000 concurrent connections all answered; 200 connections dribbling
their headers while a normal client is served at once; a storm of 200 streams that
disconnect, after which the engine is idle and both processes hold the file
descriptors they held before; a reader that stops reading a fast stream, whose
request is cancelled after --write-timeout while the gateway's memory stays bounded;
a reader that reads slowly, which gets every event whole (the SSE writes that the
socket does not take at once finish asynchronously, gateway/stream_driver.cpp).
"""
import asyncio
import json
import os
import resource
import socket
import tempfile
import time
import unittest

import loomtest
import procwatch
from loomtest import Gateway, shared, wait_until

MODEL = shared("models/stories260K.gguf")
NAME = "stories260K"
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_engine.py")


def raise_fd_limit(want):
    """Raises this process's RLIMIT_NOFILE soft limit to `want` (children inherit it);
    skips the test when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        raise unittest.SkipTest("RLIMIT_NOFILE hard limit %d < %d" % (hard, want))
    if soft == resource.RLIM_INFINITY or soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def request_bytes(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
        method, path, len(data))
    return head.encode() + data


async def read_response(reader):
    """Reads one HTTP/1.1 response with a Content-Length: (status, body bytes)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for l in lines[1:]:
        if l.lower().startswith("content-length:"):
            length = int(l.split(":", 1)[1])
    return status, await reader.readexactly(length)


class Load(loomtest.GatewayTestCase):
    gateway_model = MODEL
    engine_log = True

    @classmethod
    def setUpClass(cls):
        raise_fd_limit(4096)
        super().setUpClass()

    def engine(self):
        return procwatch.live_children(self.gw.pid)[0]

    def test_1000_concurrent_connections(self):
        n = 1000

        async def run():
            conns = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", self.gw.port) for _ in range(n)))
            # Every connection is open at once before any request is sent.
            for k, (_, w) in enumerate(conns):
                if k % 50 == 0:
                    w.write(request_bytes("POST", "/v1/completions",
                                          {"model": NAME, "prompt": "Once upon a time", "max_tokens": 4,
                                           "temperature": 0}))
                elif k % 2:
                    w.write(request_bytes("GET", "/v1/models"))
                else:
                    w.write(request_bytes("POST", "/tokenize", {"prompt": "Once upon a time"}))
            results = await asyncio.wait_for(asyncio.gather(*(read_response(r) for r, _ in conns)), 120)
            for _, w in conns:
                w.close()
            return results

        results = asyncio.run(run())
        self.assertEqual(len(results), n)
        for k, (status, body) in enumerate(results):
            self.assertEqual(status, 200, body[:200])
            out = json.loads(body)
            if k % 50 == 0:
                self.assertEqual(out["usage"]["completion_tokens"], 4)
            elif k % 2:
                self.assertEqual(out["data"][0]["id"], NAME)
            else:
                self.assertEqual(out["count"], len(out["tokens"]))
        # The same completion, asked alone, gives the same text (nothing was mixed up).
        st, alone = self.gw.post("/v1/completions", {"model": NAME, "prompt": "Once upon a time", "max_tokens": 4,
                                                     "temperature": 0})
        self.assertEqual(json.loads(results[0][1])["choices"][0]["text"], alone["choices"][0]["text"])

    def test_slow_headers_do_not_block_others(self):
        n = 200

        async def run():
            slow = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", self.gw.port) for _ in range(n)))
            header = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 40
            latencies = []
            for k in range(20):  # one byte per slow connection, then one normal request
                for _, w in slow:
                    w.write(header[k:k + 1])
                t0 = time.time()
                r, w = await asyncio.open_connection("127.0.0.1", self.gw.port)
                w.write(request_bytes("GET", "/v1/models"))
                status, body = await asyncio.wait_for(read_response(r), 10)
                latencies.append(time.time() - t0)
                w.close()
                assert status == 200, (status, body)
                await asyncio.sleep(0.05)
            for _, w in slow:
                w.close()
            return latencies

        latencies = asyncio.run(run())
        self.assertLess(max(latencies), 1.0, latencies)

    def test_disconnect_storm_leaves_nothing_behind(self):
        eng = self.engine()
        wait_until(lambda: self.idle(), timeout=30, what="an idle engine before the storm")
        gw_fds, eng_fds = len(procwatch.fds(self.gw.pid)), len(procwatch.fds(eng))
        before = len(self.lines())
        n = 200

        async def run():
            conns = []
            for _ in range(n):
                r, w = await asyncio.open_connection("127.0.0.1", self.gw.port)
                w.write(request_bytes("POST", "/v1/completions", {
                    "model": NAME, "prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True,
                    "logprobs": 3, "stream": True}))
                conns.append((r, w))
            # Each stream has begun (its header came) before they all go.
            for r, _ in conns:
                await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 60)
            for _, w in conns:
                w.transport.abort()  # RST, no goodbye

        asyncio.run(run())
        gens = wait_until(lambda: (lambda g: g if len(g) == n else None)(
            [l.split()[2] for l in self.lines()[before:] if l.startswith("> GEN ")]), timeout=30, what="200 GENs")
        # Every request ends (cancelled, most of them), and the engine goes idle.
        wait_until(lambda: self.ended(gens, before), timeout=60, what="an end line for every request")
        lines = self.lines()[before:]
        cancelled = sum(1 for l in lines if l.startswith("< DONE ") and " cancelled " in l)
        self.assertGreater(cancelled, n // 2, "most requests should have been cancelled")
        wait_until(lambda: self.idle(), timeout=30, what="an idle engine")
        wait_until(lambda: len(procwatch.fds(self.gw.pid)) <= gw_fds, timeout=30,
                   what="the gateway's descriptors back to %d (now %d)" % (gw_fds, len(procwatch.fds(self.gw.pid))))
        self.assertEqual(len(procwatch.fds(eng)), eng_fds)
        self.assertEqual(self.engine(), eng, "the engine was restarted")
        self.assertEqual(self.gw.get("/health")[0], 200)

    # --- helpers
    def lines(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def ended(self, ids, before):
        lines = self.lines()[before:]
        ends = {l.split()[2] for l in lines if l.startswith(("< DONE ", "< ERR "))}
        return all(i in ends for i in ids)

    def idle(self):
        """The engine used no CPU over 0.3 s."""
        eng = self.engine()
        c0 = procwatch.cpu_seconds(eng)
        time.sleep(0.3)
        return procwatch.cpu_seconds(eng) - c0 < 0.02


class SlowReader(unittest.TestCase):
    def test_reader_that_stops_reading(self):
        fd, log = tempfile.mkstemp(prefix="loom-slow-", suffix=".log")
        os.close(fd)
        self.addCleanup(os.unlink, log)
        # A fake engine that floods: as many tokens as asked, each with 20 top logprobs (a
        # response far past --max-response-bytes' default, which is raised out of the way).
        gw = Gateway(MODEL, "--write-timeout", "1", "--max-response-bytes", str(1 << 40), "--engine-log", log,
                     "--engine-arg=--tokens", "--engine-arg=1000000", "--engine-arg=--top", "--engine-arg=20",
                     "--engine-arg=--n-ctx", "--engine-arg=2000000", engine=FAKE)
        try:
            gw.wait_ready()
            rss0, fds0 = procwatch.rss_kib(gw.pid), len(procwatch.fds(gw.pid))
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", gw.port))
            # Chat's logprobs (a bytes array for every one of 20 alternatives) make ~2 KB of SSE a
            # token: the gateway's send buffer (up to tcp_wmem's 4 MiB) fills after a few thousand
            # tokens, within seconds even when the Python fake engine runs slow on a loaded machine.
            body = {"model": NAME, "messages": [{"role": "user", "content": "Once upon a time"}],
                    "max_tokens": 1000000, "logprobs": True, "top_logprobs": 20, "stream": True}
            s.sendall(request_bytes("POST", "/v1/chat/completions", body))
            self.assertTrue(s.recv(1000).startswith(b"HTTP/1.1 200"))
            # Stop reading. The gateway must cancel the request and close the connection.
            peak = rss0
            deadline = time.time() + 30
            # The protocol log grows by megabytes: search each new piece once (with the last
            # 64 bytes before it), never the whole log, and quote only its end on failure.
            with open(log) as f:
                carry, size, cancel = "", 0, None
                while time.time() < deadline and cancel is None:
                    new = f.read()
                    size += len(new)
                    piece = carry + new
                    at = piece.find("> CANCEL ")
                    if at >= 0 and "\n" in piece[at:]:
                        cancel = piece[at:].split("\n", 1)[0]
                    carry = piece[-64:]
                    peak = max(peak, procwatch.rss_kib(gw.pid))
                    time.sleep(0.05)
            self.assertEqual(cancel, "> CANCEL r1", "no CANCEL in %d bytes of protocol log, which ends %r" % (size, carry))
            wait_until(lambda: any("did not read its stream for 1000 ms" in l for l in gw.log), timeout=10,
                       what="the write timeout")
            for _ in range(20):
                peak = max(peak, procwatch.rss_kib(gw.pid))
                time.sleep(0.05)
            if not loomtest.SANITIZED:  # ASan's quarantine keeps freed memory resident
                self.assertLess(peak - rss0, 64 * 1024, "the gateway grew by %d KiB" % (peak - rss0))
            s.settimeout(10)
            try:  # what was buffered, then the end
                while s.recv(1 << 16):
                    pass
            except ConnectionResetError:
                pass
            s.close()
            st, out = gw.post("/v1/completions", {"model": NAME, "prompt": "Once", "max_tokens": 2})
            self.assertEqual(st, 200, out)
            wait_until(lambda: len(procwatch.fds(gw.pid)) <= fds0, timeout=10, what="the descriptors back")
        finally:
            gw.stop()

    def test_reader_that_reads_slowly_gets_every_event(self):
        # 3,000 tokens of about 2 KB of SSE each (6 MB, more than the send buffer takes) to a
        # client with a 4 KiB receive buffer that reads in small pieces: most writes do not fit
        # at once and finish later, in order, within the write timeout.
        tokens = 3000
        gw = Gateway(MODEL, "--write-timeout", "20", "--engine-arg=--tokens", "--engine-arg=%d" % tokens,
                     "--engine-arg=--top", "--engine-arg=20", "--engine-arg=--n-ctx", "--engine-arg=100000",
                     engine=FAKE)
        try:
            gw.wait_ready()
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", gw.port))
            body = {"model": NAME, "messages": [{"role": "user", "content": "Once upon a time"}],
                    "max_tokens": tokens, "logprobs": True, "top_logprobs": 20, "stream": True}
            s.sendall(request_bytes("POST", "/v1/chat/completions", body))
            s.settimeout(60)
            time.sleep(0.5)  # let the send buffer fill first
            data = b""
            deadline = time.time() + 120
            while not data.endswith(b"0\r\n\r\n") and time.time() < deadline:
                piece = s.recv(2048)
                if not piece:
                    break
                data += piece
                if len(data) % 65536 < 2048:
                    time.sleep(0.001)
            s.close()
            head, _, rest = data.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head[:200])
            events, pos = [], 0
            while True:  # chunked transfer coding: every chunk whole and in order
                line_end = rest.index(b"\r\n", pos)
                size = int(rest[pos:line_end], 16)
                if size == 0:
                    break
                chunk = rest[line_end + 2:line_end + 2 + size]
                self.assertEqual(rest[line_end + 2 + size:line_end + 4 + size], b"\r\n")
                events.append(chunk)
                pos = line_end + 4 + size
            self.assertEqual(events[-1], b"data: [DONE]\n\n")
            got = [json.loads(e[6:]) for e in events[:-1]]
            entries = [c for g in got for ch in g["choices"] for c in (ch.get("logprobs") or {}).get("content") or []]
            self.assertEqual(len(entries), tokens)
            self.assertTrue(all(len(c["top_logprobs"]) == 20 for c in entries))
            self.assertEqual(got[-1]["choices"][0]["finish_reason"], "length")
        finally:
            gw.stop()


if __name__ == "__main__":
    loomtest.main()
