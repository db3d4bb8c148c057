"""End to end: engine supervision. A client that goes away cancels its engine request
at once (checked in the protocol log of the real CPU engine: a `> CANCEL <id>` line,
then `DONE <id> cancelled` after few tokens); an engine that dies fails the requests in
flight with a clear error (503, or an error event then `data: [DONE]` in a stream),
is started again, and the next request succeeds.
"""
import http.client
import json
import os
import socket
import tempfile
import unittest

import loomtest
from loomtest import Gateway, GatewayTestCase, shared, wait_until

MODEL = shared("models/stories260K.gguf")
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_engine.py")
NAME = "stories260K"
LONG = 2000  # tokens asked for; the cancelled requests must end far earlier


def log_lines(path):
    with open(path) as f:
        return f.read().splitlines()


class ClientDisconnect(GatewayTestCase):
    gateway_model = MODEL
    engine_log = True

    def last_gen_id(self, before):
        gens = [l for l in log_lines(self.log)[before:] if l.startswith("> GEN ")]
        self.assertEqual(len(gens), 1, gens)
        return gens[0].split()[2]

    def check_cancelled(self, before):
        """The request sent after log line `before` was cancelled by the gateway soon
        after the client left: returns the tokens it generated."""
        rid = wait_until(lambda: self.last_gen_id(before) if any(
            l.startswith("> GEN ") for l in log_lines(self.log)[before:]) else None, what="the GEN line")
        done = wait_until(lambda: [l for l in log_lines(self.log)[before:] if l.startswith("< DONE %s " % rid)],
                          timeout=60, what="DONE of " + rid)[0]
        lines = log_lines(self.log)[before:]
        self.assertIn("> CANCEL " + rid, lines)
        self.assertEqual(done.split()[3], "cancelled", done)
        generated = int(done.rsplit("completion_tokens=", 1)[1])
        self.assertLess(generated, LONG // 2, done)
        # After the CANCEL left the gateway, only the tokens already on their way come
        # (the engine stops within one token; a few more may sit in the pipe).
        after = lines[lines.index("> CANCEL " + rid):]
        late = [l for l in after if l.startswith("< T %s " % rid)]
        self.assertLessEqual(len(late), 64, "tokens after CANCEL: %d" % len(late))
        return generated

    def body(self, stream):
        return json.dumps({"model": NAME, "prompt": "Once upon a time", "max_tokens": LONG, "ignore_eos": True,
                           "logprobs": 5, "stream": stream}).encode()

    def test_client_closing_mid_stream_cancels(self):
        before = len(log_lines(self.log))
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=60)
        conn.request("POST", "/v1/completions", body=self.body(True), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        first = resp.fp.readline()  # the first event's line
        self.assertTrue(first.startswith(b"data: ") or first.strip(), first)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        self.check_cancelled(before)
        self.assertEqual(self.gw.get("/health")[0], 200)

    def test_client_closing_mid_request_cancels(self):
        before = len(log_lines(self.log))
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
        body = self.body(False)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        # Wait for the first tokens, then leave without reading the answer.
        wait_until(lambda: any(l.startswith("< T ") for l in log_lines(self.log)[before:]), what="a token")
        s.close()
        self.check_cancelled(before)
        # The gateway still serves.
        st, out = self.gw.post("/v1/completions", {"model": NAME, "prompt": "Once", "max_tokens": 3})
        self.assertEqual(st, 200, out)

    def test_n_choices_all_cancelled(self):
        before = len(log_lines(self.log))
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", body=json.dumps({
            "model": NAME, "messages": [{"role": "user", "content": "Once upon a time"}], "n": 3,
            "max_tokens": LONG, "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.fp.readline()
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        gens = wait_until(lambda: [l.split()[2] for l in log_lines(self.log)[before:] if l.startswith("> GEN ")]
                          if len([l for l in log_lines(self.log)[before:] if l.startswith("> GEN ")]) == 3 else None,
                          what="three GEN lines")
        for rid in gens:
            done = wait_until(lambda: [l for l in log_lines(self.log)[before:] if l.startswith("< DONE %s " % rid)],
                              timeout=60, what="DONE of " + rid)[0]
            self.assertEqual(done.split()[3], "cancelled", done)
            self.assertIn("> CANCEL " + rid, log_lines(self.log)[before:])


class EngineDeath(unittest.TestCase):
    """fake_engine.py dies on its 2nd and 4th GEN (after 2 tokens); the gateway starts
    it again each time."""

    @classmethod
    def setUpClass(cls):
        fd, cls.state = tempfile.mkstemp(prefix="loom-fake-state-")
        os.close(fd)
        cls.gw = Gateway(MODEL, "--engine-arg=--die-after-gens", "--engine-arg=2,4",
                         "--engine-arg=--tokens-before-death", "--engine-arg=2", "--engine-arg=--state",
                         "--engine-arg=" + cls.state, engine=FAKE)
        cls.gw.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        os.unlink(cls.state)

    def request(self, stream=False):
        body = {"model": NAME, "prompt": "Once upon a time", "max_tokens": 5, "logprobs": 1}
        if stream:
            return self.gw.stream("/v1/completions", dict(body, stream=True))
        return self.gw.post("/v1/completions", body)

    def test_death_fails_in_flight_requests_then_recovers(self):
        # GEN 1: served.
        st, body = self.request()
        self.assertEqual(st, 200, body)
        self.assertEqual(body["usage"]["completion_tokens"], 5)
        # GEN 2: the engine dies after two tokens: 503 with the error object.
        st, body = self.request()
        self.assertEqual(st, 503, body)
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        self.assertEqual(body["error"]["code"], "engine_error")
        self.assertEqual(body["error"]["type"], "server_error")
        self.assertIn("exited", body["error"]["message"])
        # The engine is started again; GEN 3 is served.
        self.gw.wait_ready(timeout=30)
        st, body = self.request()
        self.assertEqual(st, 200, body)
        self.assertEqual(body["choices"][0]["finish_reason"], "length")
        # GEN 4, streamed: the two tokens, an error event, then [DONE].
        st, chunks, done = self.request(stream=True)
        self.assertEqual(st, 200)
        self.assertTrue(done)
        self.assertIn("error", chunks[-1])
        self.assertEqual(chunks[-1]["error"]["code"], "engine_error")
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks[:-1]), self.token_text() * 2)
        # GEN 5: served again.
        self.gw.wait_ready(timeout=30)
        st, chunks, done = self.request(stream=True)
        self.assertTrue(done)
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
        self.assertTrue(any("restarting the engine" in l for l in self.gw.log))

    def token_text(self):
        st, body = self.gw.post("/detokenize", {"tokens": [261]})
        return body["prompt"]


if __name__ == "__main__":
    loomtest.main()
