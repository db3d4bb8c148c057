"""End to end: the x-request-id response header (the client's own, else a new random id,
on JSON, streamed and error answers alike) and the gateway's start-up lines (the model
file's read-ahead, then one ready line with the URL)."""
import http.client
import json
import re

import loomtest
from loomtest import shared

MODEL = shared("models/stories260K.gguf")
NAME = "stories260K"


class RequestId(loomtest.GatewayTestCase):
    gateway_model = MODEL

    def ask(self, conn, method, path, body=None, rid=None):
        h = {"Content-Type": "application/json"}
        if rid is not None:
            h["x-request-id"] = rid
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("x-request-id")

    def test_echoed_or_generated(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=60)
        comp = {"model": NAME, "prompt": "Once upon a time", "max_tokens": 3}
        self.assertEqual(self.ask(conn, "POST", "/v1/completions", comp, "req-7"), (200, "req-7"))
        self.assertEqual(self.ask(conn, "POST", "/v1/completions", dict(comp, stream=True), "s:8"), (200, "s:8"))
        self.assertEqual(self.ask(conn, "POST", "/v1/completions", dict(comp, n=0), "bad-9"), (400, "bad-9"))
        self.assertEqual(self.ask(conn, "GET", "/nowhere", None, "nf"), (404, "nf"))
        # None sent (or one that is not visible ASCII): a new 32-hex-digit id each time,
        # on the same keep-alive connection too.
        ids = set()
        for rid in (None, None, "has space", "x" * 201):
            st, got = self.ask(conn, "GET", "/v1/models", None, rid)
            self.assertEqual(st, 200)
            self.assertRegex(got, r"^[0-9a-f]{32}$")
            ids.add(got)
        self.assertEqual(len(ids), 4)
        for path in ("/health", "/metrics", "/"):
            st, got = self.ask(conn, "GET", path, None, "p")
            self.assertEqual((st, got), (200, "p"), path)
        conn.close()

    def test_startup_lines(self):
        loomtest.wait_until(lambda: "ready on" in "".join(self.gw.log), what="the ready line in the log")
        log = "".join(self.gw.log)
        self.assertRegex(log, r"loom-gateway: loaded stories260K\.gguf: 100% \(1\.2 MB in [0-9.]+ s\); "
                              r"starting the engine\n")
        ready = re.findall(r"loom-gateway: ready on http://127\.0\.0\.1:(\d+) \(model 'stories260K', "
                           r"loom-engine-cpu on cpu, context 2048; the playground is at /\)\n", log)
        self.assertEqual(ready, [str(self.gw.port)])
        # The read-ahead comes before the engine starts, the ready line after it.
        self.assertLess(log.index("loaded stories260K.gguf"), log.index("ready on"))


if __name__ == "__main__":
    loomtest.main()
