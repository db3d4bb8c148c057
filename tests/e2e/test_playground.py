"""End to end: the playground page at / in a real browser (headless Chromium over the
DevTools protocol, tests/e2e/cdp.py) against loom-gateway on stories260K.

The page runs a scripted request (its test mode, /?autorun=1&...), streams it, and the
test checks the DOM: one span per token, whose text joins to the answer and whose
data-logprob is the logprob the API returns for the same (greedy) request; spans shaded;
hovering a token opens its top alternatives with their probabilities and the entropy.
Set LOOM_PLAYGROUND_SCREENSHOT=path.png to save a screenshot (docs/playground.png).
"""
import http.client
import math
import os
import unittest
from urllib.parse import urlencode

import loomtest
from loomtest import shared

import cdp

MODEL = shared("models/stories260K.gguf")
NAME = "stories260K"
KEY = "sk-playground-test"
PROMPT = "Once upon a time"

SPANS_JS = """[...document.querySelectorAll('#out .tok')].map(s => ({
  text: s.textContent, logprob: s.dataset.logprob === undefined ? null : Number(s.dataset.logprob),
  shaded: s.style.background !== '' && s.style.background !== 'none'}))"""


@unittest.skipUnless(cdp.find_chromium(), "chromium is not installed (scripts/install-deps.sh with "
                                          "LOOM_WITH_TEST_TOOLS=1 installs it)")
class Playground(loomtest.GatewayTestCase):
    gateway_model = MODEL
    gateway_args = ("--api-key", KEY)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.browser = cdp.Browser()
        except BaseException:
            super().tearDownClass()  # the gateway, which no tearDownClass would stop
            raise

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        super().tearDownClass()

    runs = 0

    def open_page(self, **params):
        """Opens the page in its test mode and waits (bounded: a loaded CI machine, the ASan
        run) until its scripted request ended; returns the page's state, "done" or "error".
        Each run has its own `run` number, so that the previous page's state never counts."""
        Playground.runs += 1
        q = dict(autorun=1, api_key=KEY, run=Playground.runs, **params)
        self.browser.navigate("http://127.0.0.1:%d/?%s" % (self.gw.port, urlencode(q)))
        return self.browser.wait_for(
            "new URLSearchParams(location.search).get('run') === '%d' && document.body && "
            "document.body.dataset.state" % Playground.runs, timeout=120, what="the page's scripted request")

    def run_page(self, **params):
        state = self.open_page(**params)
        result = self.browser.evaluate("window.loomResult")
        self.assertEqual(state, "done", result)
        return self.browser.evaluate(SPANS_JS), result

    def api(self, path, body):
        st, out = self.gw.post(path, dict(body, model=NAME), headers={"Authorization": "Bearer " + KEY})
        self.assertEqual(st, 200, out)
        return out["choices"][0]

    def test_files_are_served_without_the_key(self):
        for path, kind in (("/", "text/html"), ("/static/playground.js", "text/javascript"),
                           ("/static/playground.css", "text/css")):
            conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=30)
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            self.assertEqual(resp.status, 200, path)
            self.assertTrue(resp.getheader("Content-Type").startswith(kind), resp.getheader("Content-Type"))
            self.assertGreater(len(body), 500, path)
        for path in ("/static/nothing.js", "/static/../server.cpp", "/index.html"):
            self.assertEqual(self.gw.request("GET", path, headers={"Authorization": "Bearer " + KEY})[0], 404, path)
        # The API itself still wants the key.
        self.assertEqual(self.gw.get("/v1/models")[0], 401)

    def test_chat_tokens_carry_their_logprobs(self):
        spans, result = self.run_page(mode="chat", prompt=PROMPT, temperature=0, max_tokens=12, top_logprobs=3,
                                      hover=2)
        ref = self.api("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "temperature": 0,
                                                "max_tokens": 12, "logprobs": True, "top_logprobs": 3})
        content = ref["logprobs"]["content"]
        self.assertEqual("".join(s["text"] for s in spans), ref["message"]["content"])
        self.assertEqual(result["text"], ref["message"]["content"])
        self.assertEqual(len(spans), len(content))
        for s, e in zip(spans, content):
            self.assertEqual(s["text"], e["token"])
            self.assertEqual(s["logprob"], e["logprob"])  # the same float, as JSON carried it
            self.assertTrue(s["shaded"], s)
        # The hovered token's tip: its alternatives with probabilities, and the entropy.
        tip = self.browser.evaluate("""(() => { const t = document.getElementById('tip');
            return {hidden: t.hidden, head: t.querySelector('.head').textContent,
                    rows: [...t.querySelectorAll('tr')].map(r => [...r.cells].slice(0, 2).map(c => c.textContent))};
            })()""")
        self.assertFalse(tip["hidden"])
        top = content[2]["top_logprobs"]
        self.assertEqual([r[0] for r in tip["rows"]], [t["token"].replace(" ", "\u2423") for t in top])
        self.assertEqual([r[1] for r in tip["rows"]], ["%.2f%%" % (100 * math.exp(t["logprob"])) for t in top])
        ps = [math.exp(t["logprob"]) for t in top]
        rest = max(0.0, 1 - sum(ps))
        h = -sum(p * math.log2(p) for p in ps) - (rest * math.log2(rest) if rest > 1e-9 else 0)
        self.assertIn("entropy \u2265 %.3f bits over the top 3" % h, tip["head"])
        self.assertIn("p = %.4f" % math.exp(content[2]["logprob"]), tip["head"])
        shot = os.environ.get("LOOM_PLAYGROUND_SCREENSHOT")
        if shot:
            self.browser.screenshot(shot)

    def test_completions_with_allowed_ids_and_processed_logprobs(self):
        allowed = [261, 278, 300, 321, 352, 400, 450]
        spans, _ = self.run_page(mode="completions", prompt=PROMPT, temperature=0, max_tokens=8, top_logprobs=2,
                                 logprobs_mode="processed", allowed=",".join(map(str, allowed)))
        ref = self.api("/v1/completions", {"prompt": PROMPT, "temperature": 0, "max_tokens": 8, "logprobs": 2,
                                           "logprobs_mode": "processed", "allowed_token_ids": allowed})
        lp = ref["logprobs"]
        self.assertEqual([s["text"] for s in spans], lp["tokens"])
        self.assertEqual([s["logprob"] for s in spans], lp["token_logprobs"])
        self.assertEqual("".join(s["text"] for s in spans), ref["text"])

    def test_errors_are_shown(self):
        self.assertEqual(self.open_page(mode="chat", prompt=PROMPT, top_logprobs=21), "error")
        status = self.browser.evaluate("document.getElementById('status').textContent")
        self.assertIn("HTTP 400", status)
        self.assertIn("top_logprobs", status)


if __name__ == "__main__":
    loomtest.main()
