"""End to end: request preparation off the io thread (loom-gateway --prep-threads,
gateway/off_io.hpp; issue 11 item 6).

- A long prompt being parsed and tokenized does not stall the other streams: while a
  completion with a prompt of about 2 MB of text is prepared, a running stream goes on
  receiving its tokens (tests/e2e/paced_engine.py: one every 5 ms). With the preparation on
  the io thread (--prep-threads 0) the stream's largest gap spans nearly all of the long
  request; here it must stay under a third of it. This asserts where the work runs, not how
  fast: the bound is relative, and a run that misses it (a loaded CI machine can stall the
  client too) is repeated, up to ATTEMPTS runs.
- Many requests prepared at once on the pool give exactly what one at a time gives (the
  real stories260K tokenizer's ids), and the errors raised on a pool thread come back as
  OpenAI's error JSON.
- --prep-threads 0 (on the io thread) serves the same answers.
"""
import os
import socket
import sys
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import loomtest
from loomtest import shared

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import bench_itl  # noqa: E402
import bench_prep_stall  # noqa: E402

MODEL = shared("models/stories260K.gguf")
PACED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paced_engine.py")
ATTEMPTS = 3
LONG_CHARS = 2_000_000  # about 860K tokens of stories260K's vocabulary: 0.3-1 s to tokenize

# /tokenize of "Hello world" with stories260K's SentencePiece vocabulary (BOS first).
HELLO_WORLD_IDS = [1, 346, 306, 414, 263, 304, 341]


def tokenize(gw, text):
    status, body = gw.post("/tokenize", {"prompt": text})
    assert status == 200, body
    return body["tokens"]


class RequestPrep(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = loomtest.Gateway(MODEL, "--engine-arg=--n-ctx", "--engine-arg=2000000", engine=PACED)
        cls.gw.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()

    def long_request_during_stream(self, text):
        """Streams 600 tokens; once 20 have come, posts a completion with the prompt `text`.
        Returns (the long request's status, its send and answer times, the stream's token
        event times), perf_counter seconds."""
        body = {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 600, "temperature": 0,
                "ignore_eos": True, "stream": True}
        st = bench_itl.Stream("127.0.0.1", self.gw.port, "/v1/completions", body)
        res = {}

        def long_post():
            res["sent"] = time.perf_counter()
            res["status"] = bench_prep_stall.post(self.gw.port, "/v1/completions",
                                                  {"model": "stories260K", "prompt": text, "max_tokens": 1})
            res["answered"] = time.perf_counter()

        th = None
        deadline = time.time() + 120
        st.sock.settimeout(30)
        try:
            while not st.done and time.time() < deadline:
                st.on_readable(time.perf_counter())
                if th is None and len(st.times) >= 20:
                    th = threading.Thread(target=long_post)
                    th.start()
        except socket.timeout:
            pass
        finally:
            st.sock.close()
        self.assertIsNotNone(th, "the stream never produced 20 tokens")
        th.join(timeout=120)
        self.assertTrue(st.done, "the stream did not end")
        return res["status"], res["sent"], res["answered"], st.times

    def test_long_prompt_does_not_stall_streams(self):
        text = bench_prep_stall.long_text(LONG_CHARS)
        reports = []
        for _ in range(ATTEMPTS):
            status, sent, answered, times = self.long_request_during_stream(text)
            self.assertEqual(status, 200)
            # The stream's gaps that overlap the long request's preparation and answer.
            gaps = [b - a for a, b in zip(times, times[1:]) if b > sent and a < answered]
            window = answered - sent
            largest = max(gaps) if gaps else window
            reports.append("long request %.0f ms, the stream's largest gap in it %.0f ms" %
                           (window * 1000, largest * 1000))
            if largest < window / 3:
                return
        self.fail("the stream stalled while a long prompt was prepared: " + "; ".join(reports))

    def test_concurrent_preparation_matches_serial(self):
        texts = ["Hello world"] + [bench_prep_stall.long_text(500 + 3000 * i, seed=i) for i in range(11)]
        serial = [tokenize(self.gw, t) for t in texts]
        self.assertEqual(serial[0], HELLO_WORLD_IDS)
        with ThreadPoolExecutor(max_workers=12) as ex:
            together = list(ex.map(lambda t: tokenize(self.gw, t), texts * 2))
        self.assertEqual(together, serial * 2)
        # Chat requests prepared at once: each one's usage.prompt_tokens is its /tokenize count.
        msgs = [[{"role": "user", "content": t}] for t in texts[:6]]
        counts = [self.gw.post("/tokenize", {"messages": m})[1]["count"] for m in msgs]

        def chat(m):
            status, body = self.gw.post("/v1/chat/completions",
                                        {"model": "stories260K", "messages": m, "max_tokens": 2})
            self.assertEqual(status, 200, body)
            return body["usage"]["prompt_tokens"]

        with ThreadPoolExecutor(max_workers=6) as ex:
            self.assertEqual(list(ex.map(chat, msgs)), counts)

    def test_errors_from_prep_threads(self):
        status, body = self.gw.request("POST", "/v1/chat/completions", raw="{\"model\": ")
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["type"], "invalid_request_error")
        self.assertIn("at byte 10", body["error"]["message"])
        status, body = self.gw.post("/v1/chat/completions", {"model": "stories260K", "messages": "hi"})
        self.assertEqual((status, body["error"]["param"]), (400, "messages"))
        status, body = self.gw.post("/tokenize", {"prompt": 5})
        self.assertEqual((status, body["error"]["param"]), (400, "prompt"))
        status, body = self.gw.post("/detokenize", {"tokens": [1, 99999]})
        self.assertEqual((status, body["error"]["param"]), (400, "tokens"))
        # The gateway is still whole: a request after the errors is answered.
        self.assertEqual(tokenize(self.gw, "Hello world"), HELLO_WORLD_IDS)


class RequestPrepOnIoThread(unittest.TestCase):
    def test_same_answers_with_no_prep_threads(self):
        gw = loomtest.Gateway(MODEL, "--prep-threads", "0", engine=PACED)
        try:
            gw.wait_ready()
            self.assertEqual(tokenize(gw, "Hello world"), HELLO_WORLD_IDS)
            status, body = gw.post("/v1/completions", {"model": "stories260K", "prompt": "Hello world", "max_tokens": 3})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["usage"], {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10})
            status, body = gw.request("POST", "/v1/completions", raw="[1, 2")
            self.assertEqual(status, 400)
            self.assertEqual(body["error"]["type"], "invalid_request_error")
        finally:
            gw.stop()


if __name__ == "__main__":
    unittest.main()
