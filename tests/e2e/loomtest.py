"""Shared helpers for loom's end-to-end tests: start loom-gateway on a free loopback
port, send HTTP requests, read server-sent event streams.

Standard library only (Debian's python3). Tests talk only to 127.0.0.1.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

# True in a sanitizer build (CMake sets LOOM_SANITIZED=1 for every e2e test there): memory
# figures then include ASan's quarantine and shadow, and some checks are left out.
SANITIZED = os.environ.get("LOOM_SANITIZED") == "1"

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import loomproc  # noqa: E402  (tools/loomproc.py: port from the log, /health, stop)
import gguf_edit  # noqa: E402

BIN = os.environ.get("LOOM_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
SHARED = os.environ.get("LOOM_SHARED", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))


def shared(rel):
    """Absolute path of `rel` inside the shared/ folder."""
    return os.path.abspath(os.path.join(SHARED, rel))


class Gateway:
    """A loom-gateway process on a free port; stop() ends it (and its engine)."""

    def __init__(self, model, *extra, engine=None, env=None, port=0, preexec_fn=None):
        args = [os.path.join(BIN, "loom-gateway"), "--model", model, "--port", str(port)]
        if engine:
            args += ["--engine", engine]
        args += list(extra)
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=preexec_fn)
        self.log = []
        self.port = loomproc.read_port(self.proc.stderr, r"listening on http://127\.0\.0\.1:(\d+)",
                                       time.time() + 60, self.log)
        if self.port is None:
            self.stop()
            raise RuntimeError("loom-gateway did not start:\n" + "".join(self.log))
        # Drain stderr in the background so the gateway never blocks on it.
        import threading
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

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

    def stream(self, path, body, headers=None):
        """POSTs with stream=true; returns (status, [decoded chunk objects], saw_done).
        An error event mid-stream is a chunk object with an "error" key."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request("POST", path, body=json.dumps(body), headers=h)
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

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        """Ends the gateway (SIGTERM) and returns its exit status. Raises
        AssertionError when it (or its engine, whose stderr it copies) reported a
        sanitizer error (ASan, LSan, UBSan, TSan builds)."""
        loomproc.stop(self.proc)
        if getattr(self, "_drainer", None):
            self._drainer.join(timeout=10)
        self.proc.stderr.close()
        log = "".join(self.log)
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer"):
            if mark in log:
                raise AssertionError("loom-gateway reported a sanitizer error:\n" + log[-6000:])
        return self.proc.returncode


class GatewayTestCase(unittest.TestCase):
    """A TestCase whose tests share one Gateway, self.gw: started on the class attribute
    gateway_model (a GGUF path) with gateway_args (extra loom-gateway arguments) before
    the class's first test and stopped after its last. setUpClass raises RuntimeError when the
    gateway does not start or its engine does not become ready; tearDownClass raises
    AssertionError when the gateway reported a sanitizer error (Gateway.stop). With
    engine_log set, the engine's protocol traffic is logged (--engine-log) to a temporary
    file, self.log, removed after the last test."""

    gateway_model = None
    gateway_args = ()
    engine_log = False
    chat_body = None  # the request body chat() starts from

    def chat(self, **extra):
        """POSTs /v1/chat/completions: the class's chat_body with the members of `extra` set
        over it (the class attribute is not changed). Returns what Gateway.post returns."""
        body = dict(self.chat_body)
        body.update(extra)
        return self.gw.post("/v1/chat/completions", body)

    @classmethod
    def setUpClass(cls):
        args = list(cls.gateway_args)
        if cls.engine_log:
            fd, cls.log = tempfile.mkstemp(prefix="loom-%s-" % cls.__name__.lower(), suffix=".log")
            os.close(fd)
            args += ["--engine-log", cls.log]
        cls.gw = Gateway(cls.gateway_model, *args)
        cls.gw.wait_ready()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.gw.stop()
        finally:
            if cls.engine_log and os.path.exists(cls.log):
                os.unlink(cls.log)


class ModelCopyTestCase(unittest.TestCase):
    """A TestCase whose tests share one Gateway, self.gw, serving a copy of the GGUF
    source_model with the chat template shared/models/templates/<template>, written as
    <model_id>.gguf in a temporary folder, self.tmp (model_id: "copy-" and the class name in
    lower case unless the class sets it). The folder is removed after the class's last test.
    A subclass that needs more of the copy, or other gateway arguments, overrides setUpClass
    and calls copy_model. Raises as GatewayTestCase does."""

    source_model = None
    template = None
    model_id = None

    @classmethod
    def copy_model(cls, **edit):
        """Makes cls.tmp and the copy in it; `edit` goes to gguf_edit.edit (add_tokens,
        set_kv). Returns (the copy's path, its vocabulary size)."""
        cls.tmp = tempfile.mkdtemp(prefix="loom-copy-")
        if cls.model_id is None:
            cls.model_id = "copy-" + cls.__name__.lower()
        path = os.path.join(cls.tmp, cls.model_id + ".gguf")
        with open(shared("models/templates/" + cls.template), encoding="utf-8") as f:
            text = f.read()
        return path, gguf_edit.edit(cls.source_model, path, chat_template=text, **edit)

    @classmethod
    def setUpClass(cls):
        path, _ = cls.copy_model()
        cls.gw = Gateway(path)
        cls.gw.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def completion(self, body):
        """POSTs the chat completion `body` to self.gw, streamed when body["stream"] is true,
        and asserts it succeeded (status 200; a stream also ended with [DONE]). Returns the
        stream's chunks, or the response's first choice."""
        if body.get("stream"):
            status, chunks, done = self.gw.stream("/v1/chat/completions", body)
            self.assertEqual(status, 200, chunks)
            self.assertTrue(done)
            return chunks
        status, resp = self.gw.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, resp)
        return resp["choices"][0]


def read_http_response(sock, to_close=False):
    """Reads one HTTP/1.1 response from the socket `sock` (its timeout bounds each read):
    until the body its Content-Length names is complete, or, with to_close (or without a
    Content-Length), until the peer closes. Returns the bytes read, head and body."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        if not to_close and b"\r\n\r\n" in data:
            hdr, body = data.split(b"\r\n\r\n", 1)
            length = [int(l.split(b":")[1]) for l in hdr.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
    return data


def wait_until(predicate, timeout=30, what="a condition"):
    """Polls predicate() every 20 ms until it returns a true value, which is returned."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def token_bytes(token):
    """The bytes a completions `tokens` string stands for: "bytes:\\xNN..." spells
    bytes that are not valid UTF-8; any other string is its UTF-8 text."""
    if token.startswith("bytes:\\x"):
        return bytes(int(h, 16) for h in token[len("bytes:"):].split("\\x")[1:])
    return token.encode("utf-8")


def spells(text, data):
    """Whether bytes `data` spell `text`: exactly, or, when the text holds U+FFFD
    (bytes that are not valid UTF-8), as Python's decode(errors="replace") reads them."""
    if "\ufffd" not in text:
        return data == text.encode("utf-8")
    return data.decode("utf-8", errors="replace") == text


def chat_choices(chunks):
    """A chat stream's chunks folded per choice index: {index: (content, entries,
    finish_reason)}; also checks that every chunk's entries spell its delta."""
    out = {}
    for c in chunks:
        for ch in c.get("choices", []):
            text, entries, finish = out.get(ch["index"], ("", [], None))
            delta = ch["delta"].get("content") or ""
            part = (ch.get("logprobs") or {}).get("content") or []
            if not spells(delta, joined_bytes(part)):
                raise AssertionError("a chunk's logprob bytes do not spell its delta: %r" % ch)
            out[ch["index"]] = (text + delta, entries + part, ch["finish_reason"] or finish)
    return out


def completion_choices(chunks):
    """A completions stream's chunks folded per choice index: {index: (text,
    tokens, token_logprobs, finish_reason)}; tokens/token_logprobs are [] without
    logprobs."""
    out = {}
    for c in chunks:
        for ch in c.get("choices", []):
            text, toks, lps, finish = out.get(ch["index"], ("", [], [], None))
            lp = ch.get("logprobs") or {}
            out[ch["index"]] = (text + ch["text"], toks + (lp.get("tokens") or []),
                                lps + (lp.get("token_logprobs") or []), ch["finish_reason"] or finish)
    return out


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
