"""End to end: loom-gateway spawns loom-engine-cpu on stories260K and serves real
HTTP requests; results are checked against shared/reference/stories260K.json.

Tolerance: the reference logprobs come from an implementation whose attention keeps
K/V in F16 and sums the weighted V in F16 (its own two files for the same function,
stories260K.json and stories260K-wide-f32.json, differ by up to 1.9e-3). loom computes
attention in F32 and agrees with a float64 recomputation within 1e-5
(tests/unit/forward_f64.cpp); against the reference it stays within REF_TOL.
"""
import json
import math
import os
import unittest

import loomtest
from loomtest import Gateway, GatewayTestCase, joined_bytes, shared

MODEL = shared("models/stories260K.gguf")
REF = json.load(open(shared("reference/stories260K.json")))
REF_TOL = 2e-2  # measured worst case 1.2e-2 over the 72 reference positions


def read_lines(path):
    with open(path) as f:
        return f.read().splitlines()


def ids_of(entries):
    return [int(e["token"].split(":", 1)[1]) for e in entries]


class WalkingSkeleton(GatewayTestCase):
    gateway_model = MODEL
    engine_log = True
    model = "stories260K"

    def chat(self, prompt, **kw):
        body = {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0}
        body.update(kw)
        return body

    def check_against_reference(self, case, entries):
        """entries: chat logprobs.content with token_id:<id> tokens."""
        steps = case["steps"]
        self.assertEqual(len(entries), len(steps))
        for k, (e, st) in enumerate(zip(entries, steps)):
            with self.subTest(prompt=case["prompt"], position=k):
                self.assertEqual(int(e["token"].split(":")[1]), st["id"])
                self.assertEqual(bytes(e["bytes"]), bytes(st["bytes"]))
                self.assertAlmostEqual(e["logprob"], st["logprob"], delta=REF_TOL)
                got = [(int(t["token"].split(":")[1]), t["logprob"]) for t in e["top_logprobs"]]
                self.assertEqual(len(got), 20)
                ref = st["top"]
                # Same ids in the same order, except where neighbours are within the tolerance.
                ref_lp = dict(ref)
                for rank, (tid, lp) in enumerate(got):
                    if tid in ref_lp:
                        self.assertAlmostEqual(lp, ref_lp[tid], delta=REF_TOL)
                    else:  # only a near-tie with the reference's 20th may be swapped in
                        self.assertLess(abs(lp - ref[-1][1]), REF_TOL, f"id {tid} at rank {rank}")
                    self.assertAlmostEqual(lp, ref[rank][1], delta=REF_TOL)
                self.assertEqual(got, sorted(got, key=lambda p: (-p[1], p[0])))

    def test_prompt_ids_match_reference(self):
        for case in REF["cases"]:
            status, body = self.gw.post("/tokenize", {"model": self.model, "prompt": case["prompt"]})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["tokens"], case["prompt_ids"])

    def test_completions_greedy_text_and_logprobs(self):
        for case in REF["cases"]:
            status, body = self.gw.post("/v1/completions", {
                "model": self.model, "prompt": case["prompt"], "max_tokens": len(case["steps"]),
                "temperature": 0, "logprobs": 20, "return_tokens_as_token_ids": True})
            self.assertEqual(status, 200, body)
            ch = body["choices"][0]
            self.assertEqual(ch["text"], case["text"])
            self.assertEqual(ch["finish_reason"], "length")
            lp = ch["logprobs"]
            self.assertEqual([int(t.split(":")[1]) for t in lp["tokens"]], [s["id"] for s in case["steps"]])
            for k, st in enumerate(case["steps"]):
                self.assertAlmostEqual(lp["token_logprobs"][k], st["logprob"], delta=REF_TOL)
                self.assertEqual(len(lp["top_logprobs"][k]), 20)
            self.assertEqual(body["usage"], {"prompt_tokens": len(case["prompt_ids"]),
                                             "completion_tokens": len(case["steps"]),
                                             "total_tokens": len(case["prompt_ids"]) + len(case["steps"])})

    def test_chat_greedy_matches_reference_streamed_and_not(self):
        for case in REF["cases"]:
            req = self.chat(case["prompt"], max_tokens=len(case["steps"]), logprobs=True, top_logprobs=20,
                            return_tokens_as_token_ids=True)
            status, body = self.gw.post("/v1/chat/completions", req)
            self.assertEqual(status, 200, body)
            msg = body["choices"][0]["message"]
            entries = body["choices"][0]["logprobs"]["content"]
            self.assertEqual(msg["content"], case["text"])
            self.assertEqual(joined_bytes(entries), msg["content"].encode("utf-8"))
            self.check_against_reference(case, entries)

            status, chunks, done = self.gw.stream("/v1/chat/completions", dict(req, stream=True))
            self.assertEqual(status, 200)
            self.assertTrue(done)
            text, s_entries = "", []
            for c in chunks:
                for ch in c["choices"]:
                    delta = ch["delta"].get("content") or ""
                    part = (ch.get("logprobs") or {}).get("content") or []
                    # Each chunk's entries spell exactly its delta.
                    self.assertEqual(joined_bytes(part), delta.encode("utf-8"))
                    text += delta
                    s_entries += part
            self.assertEqual(text, msg["content"])
            self.assertEqual(s_entries, entries)

    def test_chat_bytes_spell_content_with_sampling(self):
        req = self.chat("The little dog", max_tokens=40, temperature=1.0, seed=7, logprobs=True, top_logprobs=3)
        status, body = self.gw.post("/v1/chat/completions", req)
        self.assertEqual(status, 200, body)
        msg = body["choices"][0]["message"]["content"]
        self.assertEqual(joined_bytes(body["choices"][0]["logprobs"]["content"]), msg.encode("utf-8"))
        # Same seed, same output, streamed.
        status, chunks, done = self.gw.stream("/v1/chat/completions", dict(req, stream=True))
        self.assertTrue(done)
        self.assertEqual("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]), msg)

    def test_allowed_token_ids_renormalise(self):
        allowed = [261, 286, 383, 403, 432]
        for stream in (False, True):
            req = self.chat("Once upon a time", max_tokens=8, temperature=1.0, seed=3, logprobs=True,
                            top_logprobs=20, allowed_token_ids=allowed, return_tokens_as_token_ids=True)
            if stream:
                status, chunks, done = self.gw.stream("/v1/chat/completions", dict(req, stream=True))
                entries = [e for c in chunks for ch in c["choices"] for e in ((ch.get("logprobs") or {}).get("content") or [])]
            else:
                status, body = self.gw.post("/v1/chat/completions", req)
                self.assertEqual(status, 200, body)
                entries = body["choices"][0]["logprobs"]["content"]
            self.assertEqual(len(entries), 8)
            for e in entries:
                self.assertIn(int(e["token"].split(":")[1]), allowed)
                top = e["top_logprobs"]
                self.assertEqual(sorted(ids_of(top)), allowed)
                self.assertAlmostEqual(sum(math.exp(t["logprob"]) for t in top), 1.0, delta=1e-5)
                self.assertIn(e["logprob"], [t["logprob"] for t in top])

    def test_no_logprobs_means_null_and_no_lp_lines(self):
        before = len(read_lines(self.log))
        status, body = self.gw.post("/v1/chat/completions", self.chat("Once upon a time", max_tokens=5))
        self.assertEqual(status, 200, body)
        self.assertIsNone(body["choices"][0]["logprobs"])
        lines = read_lines(self.log)[before:]
        gen = [l for l in lines if l.startswith("> GEN ")]
        self.assertEqual(len(gen), 1)
        rid = gen[0].split()[2]
        self.assertNotIn("logprobs=", gen[0])
        mine = [l for l in lines if l.startswith("< ") and l.split()[2] == rid]
        self.assertEqual([l.split()[1] for l in mine], ["T"] * 5 + ["DONE"])
        self.assertEqual(mine[-1], f"< DONE {rid} length prompt_tokens=5 completion_tokens=5")

    def test_lp_line_follows_its_token(self):
        before = len(read_lines(self.log))
        status, _ = self.gw.post("/v1/completions", {"model": self.model, "prompt": "Once upon a time",
                                                     "max_tokens": 3, "temperature": 0, "logprobs": 2})
        self.assertEqual(status, 200)
        lines = [l for l in read_lines(self.log)[before:] if l.startswith("< ")]
        kinds = [l.split()[1] for l in lines]
        self.assertEqual(kinds, ["T", "LP", "T", "LP", "T", "LP", "DONE"])
        self.assertEqual(lines[0].split()[3], "432")
        self.assertTrue(lines[1].startswith("< LP ") and " 432:" in lines[1])

    def test_bad_requests_get_openai_errors(self):
        cases = [
            ({"raw": b"{not json"}, 400, None),
            ({"body": {"model": "nope", "prompt": "x"}}, 404, "model"),
            ({"body": {"model": self.model, "prompt": "x", "logprobs": 21}}, 400, "logprobs"),
            ({"body": {"model": self.model, "prompt": "x", "temperature": "hot"}}, 400, "temperature"),
            ({"body": {"model": self.model, "prompt": [99999]}}, 400, "prompt"),
            ({"body": {"model": self.model, "prompt": "x", "allowed_token_ids": [-1]}}, 400, "allowed_token_ids"),
        ]
        for kw, status, param in cases:
            with self.subTest(kw=kw):
                if "raw" in kw:
                    st, body = self.gw.request("POST", "/v1/completions", raw=kw["raw"])
                else:
                    st, body = self.gw.post("/v1/completions", kw["body"])
                self.assertEqual(st, status, body)
                self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
                self.assertEqual(body["error"]["param"], param)
        st, body = self.gw.post("/v1/chat/completions", self.chat("x", top_logprobs=2))
        self.assertEqual(st, 400)
        self.assertEqual(body["error"]["param"], "top_logprobs")
        # The server still answers after all that.
        self.assertEqual(self.gw.get("/health")[0], 200)


class EngineWithoutLogprobs(unittest.TestCase):
    """A gateway in front of an engine that does not announce the logprobs capability."""

    def test_logprobs_refused_plain_request_served(self):
        fake = os.path.join(os.path.dirname(__file__), "fake_engine.py")
        gw = Gateway(MODEL, "--engine-arg=--no-logprobs", engine=fake)
        try:
            gw.wait_ready()
            st, body = gw.post("/v1/chat/completions", {"model": "stories260K", "logprobs": True,
                                                        "messages": [{"role": "user", "content": "hi"}]})
            self.assertEqual(st, 400, body)
            self.assertEqual(body["error"]["code"], "unsupported_by_engine")
            st, body = gw.post("/v1/completions", {"model": "stories260K", "prompt": "hi", "max_tokens": 3})
            self.assertEqual(st, 200, body)
            self.assertEqual(body["choices"][0]["finish_reason"], "length")
            self.assertIsNone(body["choices"][0]["logprobs"])
        finally:
            gw.stop()


if __name__ == "__main__":
    loomtest.main()
