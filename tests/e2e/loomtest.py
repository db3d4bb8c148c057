"""Shared helpers for loom's end-to-end tests: start loom-gateway on a free loopback
port, send HTTP requests, read server-sent event streams.

Standard library only (Debian's python3). Tests talk only to 127.0.0.1.
"""
import http.client
import json
import os
import re
import subprocess
import sys
import time
import unittest

BIN = os.environ.get("LOOM_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
SHARED = os.environ.get("LOOM_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))


def shared(rel):
    """Absolute path of `rel` inside the shared/ folder."""
    return os.path.abspath(os.path.join(SHARED, rel))


class Gateway:
    """A loom-gateway process on a free port; stop() ends it (and its engine)."""

    def __init__(self, model, *extra, engine=None, env=None):
        args = [os.path.join(BIN, "loom-gateway"), "--model", model, "--port", "0"]
        if engine:
            args += ["--engine", engine]
        args += list(extra)
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env)
        self.port = None
        self.log = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.stop()
            raise RuntimeError("loom-gateway did not start:\n" + "".join(self.log))
        # Drain stderr in the background so the gateway never blocks on it.
        import threading
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        try:
            for line in self.proc.stderr:
                self.log.append(line)
        except ValueError:  # closed by stop()
            pass

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _ = self.get("/health")
            if status == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("the engine did not become ready:\n" + "".join(self.log))

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        try:
            return resp.status, json.loads(payload)
        except ValueError:
            return resp.status, payload

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def stream(self, path, body):
        """POSTs with stream=true; returns (status, [decoded chunk objects], saw_done)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            payload = resp.read()
            conn.close()
            return resp.status, json.loads(payload), False
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        chunks, done = [], False
        for event in resp.read().decode("utf-8").split("\n\n"):
            if not event.strip():
                continue
            assert event.startswith("data: "), event
            data = event[len("data: "):]
            if data == "[DONE]":
                done = True
            else:
                assert not done, "data after [DONE]"
                chunks.append(json.loads(data))
        conn.close()
        return 200, chunks, done

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


def joined_bytes(entries):
    """The bytes of chat logprob entries, joined (null bytes count as none)."""
    out = bytearray()
    for e in entries:
        if e["bytes"] is not None:
            out += bytes(e["bytes"])
    return bytes(out)


def main():
    unittest.main(verbosity=2)


if __name__ == "__main__":
    sys.exit("import this module from a test")
