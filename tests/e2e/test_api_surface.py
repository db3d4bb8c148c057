"""End to end: the endpoints and the errors. Every bad request gets a 4xx (or 503)
with OpenAI's error object {"error": {"message", "type", "param", "code"}}, never a
500 or a dropped connection; /v1/models, /tokenize, /detokenize and /health answer as
documented; --api-key is checked as a Bearer token.
"""
import http.client
import json
import os
import socket
import unittest

import loomtest
from loomtest import Gateway, shared

MODEL = shared("models/stories260K.gguf")
REF = json.load(open(shared("reference/stories260K.json")))
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_engine.py")
NAME = "stories260K"
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def msgs(text="Hi"):
    return [{"role": "user", "content": text}]


class Errors(loomtest.GatewayTestCase):
    gateway_model = MODEL
    gateway_args = ("--max-body", "65536")

    def check_error(self, status, body, want_status, param="any", code="any"):
        self.assertEqual(status, want_status, body)
        self.assertIsInstance(body, dict, body)
        self.assertEqual(set(body), {"error"})
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        self.assertIsInstance(body["error"]["message"], str)
        self.assertTrue(body["error"]["message"])
        self.assertIsInstance(body["error"]["type"], str)
        if param != "any":
            self.assertEqual(body["error"]["param"], param)
        if code != "any":
            self.assertEqual(body["error"]["code"], code)

    def test_malformed_json_and_wrong_types(self):
        raw_cases = [b"{not json", b"", b"[]", b"null", b"\xff\xfe", b'{"model": "stories260K", "prompt": "x",}']
        for path in (COMP, CHAT):
            for raw in raw_cases:
                with self.subTest(path=path, raw=raw):
                    st, body = self.gw.request("POST", path, raw=raw)
                    self.check_error(st, body, 400)
        cases = [
            (COMP, {"model": 5, "prompt": "x"}, "model"),
            (COMP, {"model": NAME, "prompt": {"a": 1}}, "prompt"),
            (COMP, {"model": NAME, "prompt": "x", "max_tokens": "10"}, "max_tokens"),
            (COMP, {"model": NAME, "prompt": "x", "max_tokens": 2.5}, "max_tokens"),
            (COMP, {"model": NAME, "prompt": "x", "temperature": [1]}, "temperature"),
            (COMP, {"model": NAME, "prompt": "x", "top_p": "0.5"}, "top_p"),
            (COMP, {"model": NAME, "prompt": "x", "seed": "7"}, "seed"),
            (COMP, {"model": NAME, "prompt": "x", "stream": "yes"}, "stream"),
            (COMP, {"model": NAME, "prompt": "x", "stop": [1, 2]}, "stop"),
            (COMP, {"model": NAME, "prompt": "x", "logit_bias": [1]}, "logit_bias"),
            (COMP, {"model": NAME, "prompt": "x", "logit_bias": {"1": "a"}}, "logit_bias"),
            (COMP, {"model": NAME, "prompt": "x", "echo": 1}, "echo"),
            (COMP, {"model": NAME, "prompt": "x", "presence_penalty": 3}, "presence_penalty"),
            (COMP, {"model": NAME, "prompt": "x", "stream": True, "stream_options": 1}, "stream_options"),
            (CHAT, {"model": NAME, "messages": "hi"}, "messages"),
            (CHAT, {"model": NAME, "messages": [{"role": "user"}]}, "messages[0].content"),
            (CHAT, {"model": NAME, "messages": [{"content": "x"}]}, "messages[0].role"),
            (CHAT, {"model": NAME, "messages": [5]}, "messages[0]"),
            (CHAT, {"model": NAME, "messages": msgs(), "logprobs": 1}, "logprobs"),
            (CHAT, {"model": NAME, "messages": msgs(), "n": "2"}, "n"),
        ]
        for path, req, param in cases:
            with self.subTest(req=req):
                st, body = self.gw.post(path, req)
                self.check_error(st, body, 400, param)

    def test_top_logprobs_and_logprobs_ranges(self):
        for top in (-1, 21, 100):
            st, body = self.gw.post(CHAT, {"model": NAME, "messages": msgs(), "logprobs": True, "top_logprobs": top})
            self.check_error(st, body, 400, "top_logprobs")
        st, body = self.gw.post(CHAT, {"model": NAME, "messages": msgs(), "top_logprobs": 3})
        self.check_error(st, body, 400, "top_logprobs")
        st, body = self.gw.post(CHAT, {"model": NAME, "messages": msgs(), "logprobs": False, "top_logprobs": 3})
        self.check_error(st, body, 400, "top_logprobs")
        for lp in (-1, 21):
            st, body = self.gw.post(COMP, {"model": NAME, "prompt": "x", "logprobs": lp})
            self.check_error(st, body, 400, "logprobs")
        st, body = self.gw.post(CHAT, {"model": NAME, "messages": msgs(), "logprobs": True, "top_logprobs": 20,
                                       "max_tokens": 1})
        self.assertEqual(st, 200, body)
        self.assertEqual(len(body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]), 20)

    def test_unknown_model(self):
        for path, req in ((COMP, {"model": "gpt-4", "prompt": "x"}), (CHAT, {"model": "gpt-4", "messages": msgs()})):
            st, body = self.gw.post(path, req)
            self.check_error(st, body, 404, "model", "model_not_found")
        st, body = self.gw.get("/v1/models/gpt-4")
        self.check_error(st, body, 404, "model", "model_not_found")
        st, body = self.gw.post("/tokenize", {"model": "gpt-4", "prompt": "x"})
        self.check_error(st, body, 404, "model", "model_not_found")

    def test_prompt_longer_than_the_context(self):
        long_prompt = "Once upon a time " * 600  # > 2048 tokens
        st, body = self.gw.post(COMP, {"model": NAME, "prompt": long_prompt})
        self.check_error(st, body, 400, "prompt", "context_length_exceeded")
        self.assertIn("2048", body["error"]["message"])
        st, body = self.gw.post(CHAT, {"model": NAME, "messages": msgs(long_prompt)})
        self.check_error(st, body, 400, "messages", "context_length_exceeded")
        st, body = self.gw.post(COMP, {"model": NAME, "prompt": "Once upon a time", "max_tokens": 2045})
        self.check_error(st, body, 400, "max_tokens", "context_length_exceeded")
        st, body = self.gw.post(COMP, {"model": NAME, "prompt": [1] + [403] * 2047, "max_tokens": 0, "echo": True})
        self.assertEqual(st, 200, body)  # scoring a full context is fine

    def test_n_out_of_range(self):
        for n in (0, -1, 129):
            st, body = self.gw.post(COMP, {"model": NAME, "prompt": "x", "n": n})
            self.check_error(st, body, 400, "n")
        st, body = self.gw.post(COMP, {"model": NAME, "prompt": ["x"] * 3, "n": 100, "max_tokens": 1})
        self.check_error(st, body, 400, "n")  # 300 choices is too many

    def test_body_over_the_limit_gets_413(self):
        big = json.dumps({"model": NAME, "prompt": "a" * 100000}).encode()
        st, body = self.gw.request("POST", COMP, raw=big)
        self.check_error(st, body, 413)
        # Also when the client waits for 100 Continue before sending the body.
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=30)
        conn.putrequest("POST", COMP)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(big)))
        conn.putheader("Expect", "100-continue")
        conn.endheaders()
        resp = conn.getresponse()
        self.assertEqual(resp.status, 413)
        self.check_error(resp.status, json.loads(resp.read()), 413)
        conn.close()
        self.assertEqual(self.gw.get("/health")[0], 200)

    def test_expect_100_continue_small_body(self):
        body = json.dumps({"model": NAME, "prompt": "Once", "max_tokens": 2}).encode()
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n" % len(body))
        self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 100 Continue"))
        s.sendall(body)
        data = loomtest.read_http_response(s, to_close=True)
        s.close()
        self.assertTrue(data.startswith(b"HTTP/1.1 200 OK"), data[:200])

    def test_unknown_path_and_wrong_method(self):
        for path in ("/v2/completions", "/v1", "/v1/embeddings", "/v1/completions/x"):
            st, body = self.gw.request("POST", path, raw=b"{}")
            self.check_error(st, body, 404)
        for method, path in (("GET", COMP), ("GET", CHAT), ("POST", "/v1/models"), ("DELETE", "/health"),
                             ("PUT", "/tokenize"), ("GET", "/detokenize")):
            conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=30)
            conn.request(method, path, body=b"{}" if method != "GET" else None)
            resp = conn.getresponse()
            with self.subTest(method=method, path=path):
                self.check_error(resp.status, json.loads(resp.read()), 405)
                self.assertIn(resp.getheader("Allow"), ("GET", "POST"))
            conn.close()

    def test_malformed_http_gets_400(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: zz\r\n\r\n")
        data = s.recv(65536)
        s.close()
        self.assertTrue(data.startswith(b"HTTP/1.1 400"), data[:100])
        self.assertIn(b'"error"', data)

    def test_errors_keep_the_connection_usable(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=30)
        for raw in (b"{bad", json.dumps({"model": "nope", "prompt": "x"}).encode(),
                    json.dumps({"model": NAME, "prompt": "x", "n": 0}).encode()):
            conn.request("POST", COMP, body=raw, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.assertIn(resp.status, (400, 404))
            json.loads(resp.read())
        conn.request("POST", COMP, body=json.dumps({"model": NAME, "prompt": "Once", "max_tokens": 2}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        self.assertEqual(json.loads(resp.read())["usage"]["completion_tokens"], 2)
        conn.close()

    def test_garbage_never_gets_a_500(self):
        values = [None, True, -1, 0, 1e308, -1e308, 3.5, "", "x" * 1000, [], [None], {}, {"a": [1]}, [[[]]],
                  2 ** 63, -(2 ** 63) - 1]
        fields = ["model", "prompt", "messages", "max_tokens", "n", "stop", "logprobs", "top_logprobs", "echo",
                  "logit_bias", "allowed_token_ids", "seed", "stream", "stream_options", "temperature", "top_k",
                  "min_p", "logprobs_mode", "max_completion_tokens", "repetition_penalty", "best_of"]
        for path, base in ((COMP, {"model": NAME, "prompt": "Once", "max_tokens": 1}),
                           (CHAT, {"model": NAME, "messages": msgs(), "max_tokens": 1})):
            for f in fields:
                for v in values:
                    req = dict(base)
                    req[f] = v
                    st, body = self.gw.post(path, req)
                    with self.subTest(path=path, field=f, value=v):
                        self.assertIn(st, (200, 400, 404), body)
                        if st != 200:
                            self.check_error(st, body, st)
        self.assertEqual(self.gw.get("/health")[0], 200)


class LogprobsZero(loomtest.GatewayTestCase):
    """Completions' logprobs 0 and chat's top_logprobs 0 still list the sampled token (issue
    40, item 7), as vLLM does; completions always list it among top_logprobs (OpenAI: up
    to logprobs+1 entries)."""

    gateway_model = MODEL

    def test_the_sampled_token_is_listed(self):
        case = REF["cases"][0]
        st, body = self.gw.post(COMP, {"model": NAME, "prompt": case["prompt"], "max_tokens": 6, "temperature": 0,
                                       "logprobs": 0})
        self.assertEqual(st, 200, body)
        lp = body["choices"][0]["logprobs"]
        self.assertEqual("".join(lp["tokens"]), ", there was a little g")
        for k, step in enumerate(case["steps"][:6]):
            self.assertAlmostEqual(lp["token_logprobs"][k], step["logprob"], delta=2e-2)  # as test_walking_skeleton.py
            self.assertEqual(lp["top_logprobs"][k], {lp["tokens"][k]: lp["token_logprobs"][k]})
        # Sampled hot: the drawn token is listed whatever its rank, beside the top 2.
        st, body = self.gw.post(COMP, {"model": NAME, "prompt": case["prompt"], "max_tokens": 16,
                                       "temperature": 1.5, "seed": 3, "logprobs": 2})
        self.assertEqual(st, 200, body)
        lp = body["choices"][0]["logprobs"]
        sizes = set()
        for tok, val, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            self.assertEqual(top[tok], val)
            sizes.add(len(top))
        self.assertTrue(sizes <= {2, 3}, sizes)
        # Chat: each entry is the sampled token (token, logprob, bytes), with no alternatives.
        st, body = self.gw.post(CHAT, {"model": NAME, "messages": msgs(case["prompt"]), "max_tokens": 4,
                                       "temperature": 0, "logprobs": True, "top_logprobs": 0})
        self.assertEqual(st, 200, body)
        content = body["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), 4)
        self.assertEqual(b"".join(bytes(e["bytes"]) for e in content),
                         body["choices"][0]["message"]["content"].encode())
        for e in content:
            self.assertEqual(set(e), {"token", "logprob", "bytes", "top_logprobs"})
            self.assertEqual(e["top_logprobs"], [])
            self.assertLess(e["logprob"], 0)


class Endpoints(loomtest.GatewayTestCase):
    gateway_model = MODEL

    def test_models(self):
        st, body = self.gw.get("/v1/models")
        self.assertEqual(st, 200)
        self.assertEqual(body["object"], "list")
        self.assertEqual(len(body["data"]), 1)
        m = body["data"][0]
        self.assertEqual((m["id"], m["object"], m["owned_by"], m["max_model_len"]), (NAME, "model", "loom", 2048))
        self.assertIsInstance(m["created"], int)
        st, one = self.gw.get("/v1/models/" + NAME)
        self.assertEqual(st, 200)
        self.assertEqual(one, m)

    def test_tokenize_and_detokenize(self):
        case = REF["cases"][2]
        st, body = self.gw.post("/tokenize", {"model": NAME, "prompt": case["prompt"]})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["tokens"], case["prompt_ids"])
        self.assertEqual(body["count"], len(case["prompt_ids"]))
        self.assertEqual(body["max_model_len"], 2048)
        st, body = self.gw.post("/tokenize", {"prompt": case["prompt"], "add_special_tokens": False})
        self.assertEqual(body["tokens"], case["prompt_ids"][1:])
        st, body = self.gw.post("/tokenize", {"messages": msgs(case["prompt"])})
        self.assertEqual(body["tokens"], case["prompt_ids"])  # no template: the text, with BOS
        st, body = self.gw.post("/detokenize", {"model": NAME, "tokens": case["prompt_ids"]})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["prompt"], " " + case["prompt"])
        st, body = self.gw.post("/tokenize", {"prompt": "😀 中"})
        self.assertEqual(body["tokens"], [1, 410, 243, 162, 155, 131, 410, 231, 187, 176])
        st, body = self.gw.post("/detokenize", {"tokens": body["tokens"]})
        self.assertEqual(body["prompt"], " 😀 中")
        for path, req, param in (("/tokenize", {"prompt": 5}, "prompt"), ("/tokenize", {}, "prompt"),
                                 ("/tokenize", {"prompt": "x", "add_special_tokens": 1}, "add_special_tokens"),
                                 ("/tokenize", {"messages": [{"role": "x", "content": "y"}]}, "messages[0].role"),
                                 ("/detokenize", {"tokens": [1, 99999]}, "tokens"),
                                 ("/detokenize", {"tokens": "1,2"}, "tokens")):
            st, body = self.gw.post(path, req)
            self.assertEqual(st, 400, body)
            self.assertEqual(body["error"]["param"], param)
        st, body = self.gw.request("POST", "/tokenize", raw=b"{x")
        self.assertEqual(st, 400)

    def test_health(self):
        self.assertEqual(self.gw.get("/health"), (200, {"status": "ok"}))


class ApiKey(loomtest.GatewayTestCase):
    gateway_model = MODEL
    gateway_args = ("--api-key", "sk-loom-test")

    def test_bearer_token_checked(self):
        req = {"model": NAME, "prompt": "Once", "max_tokens": 1}
        for headers in ({}, {"Authorization": "Bearer sk-loom-tes"}, {"Authorization": "Bearer sk-loom-test2"},
                        {"Authorization": "sk-loom-test"}, {"Authorization": "Basic sk-loom-test"},
                        {"Authorization": "Bearer "}):
            with self.subTest(headers=headers):
                st, body = self.gw.post(COMP, req, headers=headers)
                self.assertEqual(st, 401, body)
                self.assertEqual(body["error"]["code"], "invalid_api_key")
                self.assertEqual(body["error"]["type"], "invalid_request_error")  # as OpenAI
        st, _ = self.gw.request("GET", "/v1/models")
        self.assertEqual(st, 401)
        st, _ = self.gw.request("GET", "/nope")
        self.assertEqual(st, 401)  # authentication comes first
        for auth in ("Bearer sk-loom-test", "bearer sk-loom-test", "Bearer  sk-loom-test "):
            st, body = self.gw.post(COMP, req, headers={"Authorization": auth})
            self.assertEqual(st, 200, body)
        st, body = self.gw.request("GET", "/v1/models", headers={"Authorization": "Bearer sk-loom-test"})
        self.assertEqual(st, 200, body)
        status, chunks, done = self.gw.stream(CHAT, {"model": NAME, "messages": msgs(), "max_tokens": 2,
                                                     "stream": True},
                                              headers={"Authorization": "Bearer sk-loom-test"})
        self.assertTrue(done)
        # /health stays open, for load balancers.
        self.assertEqual(self.gw.get("/health")[0], 200)


class SlowEngineStart(unittest.TestCase):
    """A fake engine that takes 2 s to say HELLO: /health is 503 until then."""

    def test_health_503_until_the_engine_is_ready(self):
        gw = Gateway(MODEL, "--engine-arg=--hello-delay", "--engine-arg=2", engine=FAKE)
        try:
            st, body = gw.get("/health")
            self.assertEqual((st, body), (503, {"status": "loading"}))
            st, body = gw.post(COMP, {"model": NAME, "prompt": "x", "max_tokens": 2})
            self.assertEqual(st, 503, body)
            self.assertEqual(body["error"]["code"], "engine_unavailable")
            self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
            self.assertEqual(gw.get("/v1/models")[0], 200)  # the model list does not need the engine
            gw.wait_ready(timeout=30)
            st, body = gw.post(COMP, {"model": NAME, "prompt": "x", "max_tokens": 2})
            self.assertEqual(st, 200, body)
            self.assertEqual(body["usage"]["completion_tokens"], 2)
        finally:
            gw.stop()


if __name__ == "__main__":
    loomtest.main()
