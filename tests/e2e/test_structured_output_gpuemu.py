#!/usr/bin/env python3
"""Structured output end to end on the GPU engine: test_structured_output.py's checks run
again with loom-gateway driving loom-engine-gpuemu (the GPU kernels on the CPU emulator), whose
grammar masks are applied on the device by the batched sampler (engine/backends/gpu/k_sample.cu).
The emulator decodes stories260K at about 0.3 s a token on 2 loaded cores, so the heaviest
requests of the CPU suite are cut down here (fewer schemas and seeds, short outputs).

- The emulator announces the `grammar` capability (HELLO), so the gateway accepts the requests.
- Schemas with short outputs (5 of the 10), temperature 1, raw and processed logprobs: output
  ends with "stop", parses and validates; the joined logprob bytes equal the content; where a
  processed top list is shorter than 20 it is the whole allowed set and sums to 1.
- As the CPU suite: raw logprobs stay the model's distribution (and the forced first token's
  processed logprob is 0); streamed structured output; forced tool calls validate; what cannot
  be enforced is refused by name; guided_choice and guided_regex (two seeds each).
- Greedy (temperature 0) grammar-constrained output is the CPU engine's, token for token, on
  stories260K for the same 5 schemas, raw and processed (the emulator with an F32 KV cache, as
  the CPU engine's; logprobs within 2e-3, as in test_gpu_emulator.py), and equal top-list sizes.

Skipped when loom-engine-gpuemu was not built (-DLOOM_GPU_EMU=OFF, or not x86-64), and in the
sanitizer stage (LOOM_SANITIZED=1; see SKIP).
"""
import json
import math
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loomtest  # noqa: E402
import test_structured_output as so  # noqa: E402  (a module attribute: its classes do not run here)

EMU = os.path.join(loomtest.BIN, "loom-engine-gpuemu")
KV_F32 = ("--engine-arg=--kv-f32",)


SHORT = [0, 1, 2, 4, 9]  # indexes of so.SCHEMAS whose outputs are a few dozen tokens
# The Release stage runs it; under ASan + UBSan the emulator is several times slower again (over
# half an hour here), and the device masks' sanitizer coverage comes from test_gpu_emulator.py's
# sampler check (masked rows beside unmasked ones), which runs in both stages.
SKIP = unittest.skipUnless(os.path.exists(EMU) and not loomtest.SANITIZED,
                           "loom-engine-gpuemu not built (-DLOOM_GPU_EMU=OFF or not x86-64), or a sanitizer build")


@SKIP
class StructuredOutputOnGpuEmulator(so.StructuredOutput):
    gateway_args = ("--engine", EMU)
    # Replaced below by cut-down versions (the originals take an hour on the emulator).
    test_fifty_requests_over_ten_schemas_validate = None
    test_json_object_choice_and_regex = None

    def test_emulator_announces_grammar(self):
        p = subprocess.run([EMU, "--model", so.MODEL, "--kv-tokens", "256"], input="", capture_output=True,
                           text=True, timeout=120)
        hello = [line for line in p.stdout.splitlines() if line.startswith("HELLO")]
        self.assertEqual(len(hello), 1, p.stdout + p.stderr)
        self.assertIn("grammar", hello[0].split("caps=")[1].split()[0].split(","), hello[0])

    def test_short_schemas_validate_with_raw_and_processed_logprobs(self):
        small_lists = 0
        for k in SHORT:
            schema = so.SCHEMAS[k]
            for mode in ("processed", "raw"):
                status, body = self.chat(
                    seed=1000 * k + len(mode), temperature=1, logprobs=True, top_logprobs=20, logprobs_mode=mode,
                    max_tokens=150, response_format={"type": "json_schema", "json_schema": {
                        "name": "s%d" % k, "strict": True, "schema": schema}})
                self.assertEqual(status, 200, body)
                c = body["choices"][0]
                where = "schema %d %s: %r" % (k, mode, c["message"]["content"])
                self.assertEqual(c["finish_reason"], "stop", where)
                so.validate(json.loads(c["message"]["content"]), schema, schema)
                self.check_entries(c)
                if mode == "processed":
                    for e in c["logprobs"]["content"]:
                        top = e["top_logprobs"]
                        if len(top) < 20:  # the whole allowed set
                            small_lists += 1
                            self.assertIn(e["token"], [t["token"] for t in top], where)
                            self.assertAlmostEqual(sum(math.exp(t["logprob"]) for t in top), 1.0, places=4, msg=where)
        self.assertGreater(small_lists, 10)  # the sums above were checked, many times

    def test_choice_and_regex(self):
        self.check_choice_and_regex(range(2))


@SKIP
class GreedyGrammarMatchesCpuEngine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cpu = loomtest.Gateway(so.MODEL)
        try:
            cls.cpu.wait_ready()
            cls.emu = loomtest.Gateway(so.MODEL, *KV_F32, engine=EMU)
            cls.emu.wait_ready()
        except BaseException:
            cls.cpu.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cpu.stop()
        cls.emu.stop()

    def greedy(self, gw, schema, mode):
        status, body = gw.post("/v1/chat/completions", {
            "model": "stories260K", "messages": so.MESSAGES, "max_tokens": 150, "temperature": 0,
            "logprobs": True, "top_logprobs": 5, "logprobs_mode": mode,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
        self.assertEqual(status, 200, body)
        return body["choices"][0]

    def test_greedy_output_and_logprobs_equal_the_cpu_engines(self):
        for k in SHORT:
            schema = so.SCHEMAS[k]
            for mode in ("raw", "processed"):
                want, got = self.greedy(self.cpu, schema, mode), self.greedy(self.emu, schema, mode)
                where = "schema %d %s: %r" % (k, mode, want["message"]["content"])
                self.assertEqual(got["message"]["content"], want["message"]["content"], where)
                self.assertEqual(got["finish_reason"], want["finish_reason"], where)
                we, ge = want["logprobs"]["content"], got["logprobs"]["content"]
                self.assertEqual([e["token"] for e in ge], [e["token"] for e in we], where)
                for w, g in zip(we, ge):
                    self.assertAlmostEqual(g["logprob"], w["logprob"], delta=2e-3, msg=where)
                    self.assertEqual([t["token"] for t in g["top_logprobs"]][:1],
                                     [t["token"] for t in w["top_logprobs"]][:1], where)
                    self.assertEqual(len(g["top_logprobs"]), len(w["top_logprobs"]), where)
                if want["finish_reason"] == "stop":
                    so.validate(json.loads(want["message"]["content"]), schema, schema)


if __name__ == "__main__":
    loomtest.main()
