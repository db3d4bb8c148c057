"""End to end: hostile input is refused briefly. Error messages quote at most a couple
of hundred bytes of what the client sent (a 7 MiB model id, a 1 MiB role or
logit_bias key, 60 KB paths and methods) and say how long it was; JSON that RapidJSON
would take but RFC 8259 does not (lone surrogates, high or low; repeated keys;
nesting deep enough to exhaust a recursive reader) gets 400.
"""
import http.client
import json
import socket
import unittest

import loomtest
from loomtest import GatewayTestCase, shared

NAME = "stories260K"
COMP = "/v1/completions"
CHAT = "/v1/chat/completions"


class InputLimits(GatewayTestCase):
    gateway_model = shared("models/stories260K.gguf")

    def refused(self, path, raw, status=400):
        st, body = self.gw.request("POST", path, raw=raw)
        self.assertEqual(st, status, body if isinstance(body, dict) else body[:300])
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        return body["error"]

    def assert_short(self, err, full_length):
        self.assertLess(len(err["message"]), 600, err["message"][:300])
        self.assertIn("(%d bytes)" % full_length, err["message"])

    def test_huge_model_id(self):
        model = "m" * (7 << 20)
        err = self.refused(COMP, json.dumps({"model": model, "prompt": "x"}).encode(), 404)
        self.assertEqual(err["code"], "model_not_found")
        self.assert_short(err, 7 << 20)

    def test_huge_role(self):
        role = "r" * (1 << 20)
        err = self.refused(CHAT, json.dumps({"model": NAME, "messages": [{"role": role, "content": "x"}]}).encode())
        self.assertEqual(err["param"], "messages[0].role")
        self.assert_short(err, 1 << 20)

    def test_huge_logit_bias_key(self):
        key = "9" * (1 << 20)
        err = self.refused(COMP, json.dumps({"model": NAME, "prompt": "x", "logit_bias": {key: 1}}).encode())
        self.assertEqual(err["param"], "logit_bias")
        self.assert_short(err, 1 << 20)

    def test_logit_bias_key_must_be_plain_digits(self):
        for key in ("1\u00002", "+5", " 5", "5 ", "0x10", "", "99999999999"):
            err = self.refused(COMP, json.dumps({"model": NAME, "prompt": "x", "logit_bias": {key: 1}}).encode())
            self.assertEqual(err["param"], "logit_bias", key)
        st, body = self.gw.post(COMP, {"model": NAME, "prompt": "x", "max_tokens": 1, "logit_bias": {"5": 1}})
        self.assertEqual(st, 200, body)

    def raw_http(self, head):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=30)
        s.sendall(head)
        data = loomtest.read_http_response(s)
        s.close()
        hdr, body = data.split(b"\r\n\r\n", 1)
        return int(hdr.split()[1]), json.loads(body)

    def test_huge_path_and_method(self):
        path = "/" + "p" * 60000
        st, body = self.raw_http(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
        self.assertEqual(st, 404)
        self.assert_short(body["error"], len(path))
        method = "M" * 60000
        st, body = self.raw_http(b"%s /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % method.encode())
        self.assertEqual(st, 405)
        self.assert_short(body["error"], len(method))

    def test_lone_surrogates_are_refused(self):
        for esc in ("\\ud800", "\\udc00", "\\udfff", "x\\udbff y", "\\udc00\\ud800"):
            raw = ('{"model": "%s", "prompt": "%s", "max_tokens": 1}' % (NAME, esc)).encode()
            err = self.refused(COMP, raw)
            self.assertIn("surrogate", err["message"], esc)
            raw = ('{"model": "%s", "messages": [{"role": "user", "content": "%s"}]}' % (NAME, esc)).encode()
            self.assertIn("surrogate", self.refused(CHAT, raw)["message"])
        # A proper pair is one character and is served.
        st, body = self.gw.request("POST", COMP, raw=(
            '{"model": "%s", "prompt": "\\ud83d\\ude00", "max_tokens": 1}' % NAME).encode())
        self.assertEqual(st, 200, body)

    def test_repeated_keys_are_refused(self):
        err = self.refused(COMP, ('{"model": "%s", "prompt": "x", "max_tokens": 4, "max_tokens": -1}' % NAME).encode())
        self.assertEqual(err["message"], "the request body repeats the key 'max_tokens' in one object")
        err = self.refused(CHAT, ('{"model": "%s", "messages": [{"role": "user", "content": "a", "content": "b"}]}'
                                  % NAME).encode())
        self.assertIn("'content'", err["message"])
        err = self.refused("/tokenize", b'{"prompt": "a", "prompt": "b"}')
        self.assertIn("'prompt'", err["message"])

    def test_deep_nesting_is_refused_not_a_crash(self):
        for depth in (129, 1 << 20):
            raw = ('{"model": "%s", "prompt": "x", "user": %s}' % (NAME, "[" * depth + "]" * depth)).encode()
            self.assertIn("deeper than 128 levels", self.refused(COMP, raw)["message"])
        self.assertEqual(self.gw.get("/health")[0], 200)


if __name__ == "__main__":
    loomtest.main()
