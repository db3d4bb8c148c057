"""The GPU engine's kernels, run on the CPU emulator (loom-engine-gpuemu, part of every build
on x86-64), against loom-engine-cpu over the protocol: same greedy tokens, and logprobs within
2e-3 on the F32 model with the F32 KV pool (issue 5's bound), within 5e-2 with the default F16
pool (K and V rounded to F16), and 2e-2 on the quantized models (their prefill GEMMs take F16
operands), 2e-3 on those too with every product in F32 (--precision exact) and with the GEMM
paths' products on F16 high and low parts (--precision accurate). Then engine core v2 (issue
10) on the GPU path: a request run alone, with its prompt chunked among concurrent requests,
and with its prefix from the KV cache gives the same lines, bitwise with --precision exact, and
the same tokens with logprobs within 2e-3 without it.

Skipped when loom-engine-gpuemu was not built (-DLOOM_GPU_EMU=OFF, or not x86-64). CI builds
it, so a kernel change that breaks the GPU engine's logic fails here even without a GPU.
"""
import json
import os
import re
import subprocess
import tempfile
import time
import unittest

import loomtest
from loomtest import shared

CPU = os.path.join(loomtest.BIN, "loom-engine-cpu")
MAKE_MODEL = os.path.join(loomtest.BIN, "loom-make-model")
EMU = os.path.join(loomtest.BIN, "loom-engine-gpuemu")
SAMPLER = os.path.join(loomtest.BIN, "loom-gpu-sampler-test-emu")
STORIES = "models/stories260K.gguf"
# Set by CMake in a sanitizer build, where the emulator runs about ten times slower: the wide
# models are left out and the long-row case runs one model type (Q4_K_M: Q4_K and Q6_K) and one
# decode path; the Release build runs them all.
SANITIZED = os.environ.get("LOOM_SANITIZED") == "1"


def generate(engine, model, cases, args=(), logprobs=20):
    lines = "".join(f"GEN c{i} prompt={','.join(map(str, c['prompt_ids']))} max_tokens={len(c['steps'])} "
                    f"temperature=0 logprobs={logprobs} ignore_eos=1\n" for i, c in enumerate(cases))
    p = subprocess.run([engine, "--model", model, *args], input=lines, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    out = {}
    for line in p.stdout.splitlines()[1:]:
        parts = line.split()
        if parts[0] == "T":
            out.setdefault(parts[1], []).append([int(parts[2])])
        elif parts[0] == "LP":
            out[parts[1]][-1].append({int(t.split(":")[0]): float(t.split(":")[1]) for t in parts[3:]})
        elif parts[0] == "ERR":
            raise AssertionError(line)
    return out


def make_model(path, *shape):
    """A random-weight GGUF at `path` from loom-make-model with the flags `shape`."""
    subprocess.run([MAKE_MODEL, "--out", path, *shape], check=True, capture_output=True, timeout=120)


class Engine:
    """loom-engine-gpuemu driven line by line (to send a request after others have ended)."""

    def __init__(self, model, *args):
        self.p = subprocess.Popen([EMU, "--model", model, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines = []
        hello = self.p.stdout.readline()
        assert hello.startswith("HELLO "), hello + self.p.stderr.read()

    def send(self, *lines):
        self.p.stdin.write("".join(l + "\n" for l in lines))
        self.p.stdin.flush()

    def wait_end(self, *rids, timeout=300):
        """Reads lines until every request in `rids` has its DONE (an ERR fails the test)."""
        left, deadline = set(rids), time.time() + timeout
        while left and time.time() < deadline:
            line = self.p.stdout.readline().rstrip("\n")
            assert line, "the engine exited"
            assert not line.startswith("ERR"), line
            self.lines.append(line)
            parts = line.split()
            if parts[0] == "DONE":
                left.discard(parts[1])
        assert not left, f"no DONE for {left}"

    def of(self, rid):
        """Request rid's lines without its id, and the cached_tokens its DONE reports."""
        out, cached = [], 0
        for l in self.lines:
            parts = l.split(" ", 2)
            if len(parts) > 1 and parts[1] == rid:
                m = re.search(r" cached_tokens=(\d+)", l)
                if m:
                    cached = int(m.group(1))
                    l = l[:m.start()] + l[m.end():]
                out.append(parts[0] + " " + (l.split(" ", 2)[2] if len(parts) > 2 else ""))
        return out, cached

    def close(self):
        self.p.stdin.close()
        err = self.p.stderr.read()
        code = self.p.wait(timeout=120)
        self.p.stdout.close()
        self.p.stderr.close()
        assert code == 0, err


def tokens_and_logprobs(lines):
    toks = [int(l.split()[1]) for l in lines if l.startswith("T ")]
    lps = [{int(p.split(":")[0]): float(p.split(":")[1]) for p in l.split()[2:]} for l in lines if l.startswith("LP ")]
    return toks, lps


@unittest.skipUnless(os.path.exists(EMU), "loom-engine-gpuemu not built (-DLOOM_GPU_EMU=OFF or not x86-64)")
class GpuEmulator(unittest.TestCase):
    def test_device_sampler_matches_reference_sampler(self):
        # Six slots per launch, two draws each (the second after the device's penalty update);
        # two rows in three with a grammar mask, beside unmasked rows of the same launch; now and
        # then a row with a NaN logit, which both samplers refuse.
        p = subprocess.run([SAMPLER, "36"], capture_output=True, text=True, timeout=900)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("0 disagree", p.stdout)
        m = re.search(r"masked draws: (\d+) \(raw logprobs (\d+), processed logprobs (\d+), single token (\d+), "
                      r"none allowed (\d+)\); rows with a NaN logit: (\d+)", p.stdout)
        self.assertTrue(m, p.stdout)
        self.assertTrue(all(int(x) > 0 for x in m.groups()), p.stdout)  # every kind was checked

    def test_print_plan(self):
        # --print-plan: the forward plan's table (engine/backends/gpu/gpu_plan.hpp), then exit. On
        # the emulator stories260K's F32 matrices take the matvec up to 8 rows (no decode GEMM
        # there) and loom's GEMM beyond; exact takes the fixed 8-vector matvec for every step.
        def plan(*args):
            p = subprocess.run([EMU, "--model", shared(STORIES), "--print-plan", *args], input="", capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout
        fast = plan()
        self.assertTrue(fast.startswith("forward plan: precision fast, KV cache F16, products of 1-2048 rows\n"), fast)
        self.assertIn("  matvec path: steps of up to 8 rows; decode GEMM: off; GEMM inputs F32; RMSNorm fused into "
                      "one-row steps: yes\n", fast)
        self.assertIn("layers 0-4: RoPE fused into the QKV matvec\n  q (f32 64x64):  1-8: matvec  9-2048: gemm\n", fast)
        self.assertTrue(fast.endswith("logits:\n  output (f32 512x64):  1-8: matvec  9-2048: gemm\n"), fast)
        exact = plan("--precision", "exact")
        self.assertIn("KV cache F32", exact)
        self.assertIn("  down (f32 64x172):  1-2048: matvec_fixed\n", exact)
        self.assertIn("longer chunks: decode_all\n", exact)
        self.assertIn("layers 0-4: RoPE after the QKV product\n", exact)

    def check(self, model, ref, tol, n_cases=3, args=(), keep=None):
        """Asserts the greedy tokens equal and the largest |logprob difference| below tol; returns it
        (and appends the engine's results to `keep` when given)."""
        with open(shared(ref)) as f:
            cases = json.load(f)["cases"][:n_cases]
        want = generate(CPU, shared(model), cases)
        got = generate(EMU, shared(model), cases, args)
        if keep is not None:
            keep.append(got)
        worst = 0.0
        for cid in want:
            self.assertEqual([t[0] for t in got[cid]], [t[0] for t in want[cid]], f"{model} {cid}")
            for (tok_w, lp_w), (tok_g, lp_g) in zip(want[cid], got[cid]):
                for t, v in lp_w.items():
                    if t in lp_g:
                        worst = max(worst, abs(v - lp_g[t]))
        self.assertLess(worst, tol, f"{model}: largest |logprob difference| {worst}")
        return worst

    def test_iq_weight_types_are_refused_by_name(self):
        # The GPU engines do not read the IQ1/IQ2/IQ3 types yet (loom-engine-cpu does): a file in
        # one is refused at load, naming the first tensor and its type, on the protocol and on
        # stderr; the CPU engine serves the same file.
        with tempfile.TemporaryDirectory() as d:
            for t in ("iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s"):
                with self.subTest(type=t):
                    path = os.path.join(d, t + ".gguf")
                    make_model(path, "--layers", "1", "--dim", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "256",
                               "--vocab", "300", "--ctx", "64", "--type", t, "--threads", "1")
                    p = subprocess.run([EMU, "--model", path], input="", capture_output=True, text=True, timeout=120)
                    msg = f"tensor 'token_embd.weight' has type {t}, which loom-engine-gpuemu does not support"
                    self.assertEqual(p.returncode, 1)
                    self.assertTrue(p.stdout.startswith("ERR - " + msg), p.stdout)
                    self.assertIn(msg, p.stderr)
                    c = subprocess.run([CPU, "--model", path], input="GEN r prompt=1,40,41 max_tokens=2 temperature=0\n",
                                       capture_output=True, text=True, timeout=120)
                    self.assertEqual(c.returncode, 0, c.stderr)
                    self.assertEqual(len([l for l in c.stdout.splitlines() if l.startswith("T r ")]), 2, c.stdout)

    def test_f32_model_f32_kv_within_2e3(self):
        self.check(STORIES, "reference/stories260K.json", 2e-3, args=["--kv-f32"])

    def test_f32_model_f16_kv(self):
        self.check(STORIES, "reference/stories260K.json", 5e-2)

    @unittest.skipIf(SANITIZED, "the wide models' 32 heads take minutes under ASan; the long-row case runs Q4_K and Q6_K")
    def test_quantized_models(self):
        # One prompt each: the emulator runs the wide models' 32 heads slowly.
        for t in ("q8_0", "q4_k", "q6_k"):
            with self.subTest(type=t):
                self.check(f"models/wide/stories260K-wide-{t}.gguf", f"reference/stories260K-wide-{t}.json", 2e-2, 1,
                           ["--kv-f32"])

    @unittest.skipIf(SANITIZED, "the wide models' 32 heads take minutes under ASan")
    def test_quantized_models_f32_products_within_2e3(self):
        # --precision exact (F32 KV pool): every product in F32 on weights decoded as the CPU engine
        # decodes them (the 8-vector matvec, prompts included), F32 K/V: 1.5e-5 here and on an
        # H100 for every shared model (tools/gpu_check.sh exact), so the F16 operands are what the
        # 2e-2 above allows for. Q4_K only (the farthest with F16 operands): minutes a model here.
        self.check("models/wide/stories260K-wide-q4_k.gguf", "reference/stories260K-wide-q4_k.json", 2e-3, 1,
                   ["--precision", "exact"])

    @unittest.skipIf(SANITIZED, "the wide models' 32 heads take minutes under ASan")
    def test_split_products_within_2e3(self):
        # --precision accurate: every GEMM-path product on F16 high and low parts of its activations
        # and weights, each part product F16 x F16 with F32 sums as cuBLAS takes them (the
        # emulator runs them on its plain batched kernel). --matvec-rows 1 sends every step of
        # the three prompts (24 prefill rows, then 3 decode rows) through the GEMM path. Without
        # the split, wide Q4_K is 1.05e-2 from the CPU engine (weights rounded to F16); with it
        # 1.2e-5, and wide F16 (exact weights) 1.3e-5, 9.8e-3 without the activations' low part.
        # With --decode-gemm-rows 64 the Q4_K and Q6_K matrices take the decode GEMM's exact
        # kernel instead (quants as exact F16 integers, the activations' two parts; one prompt, as
        # the emulator runs it slowly): Q4_K 1.0e-5, Q4_K_M (Q6_K for some matrices) 9.0e-6. The
        # first generated token's logprobs come from the 8-row prompt step alone, and the split
        # copies' products are row by row the same in any batch, so they differ from the split
        # copies' at that position (another summation) only if the exact kernel ran.
        for rounding in ("--decode-gemm-tiled", "--decode-gemm-f16"):  # both round operands to F16
            p = subprocess.run([EMU, "--model", shared(STORIES), "--precision", "accurate", rounding], input="",
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1)
            self.assertTrue(p.stdout.startswith("ERR - --precision accurate takes the decode GEMM's exact kernel"),
                            p.stdout)
        args = ["--kv-f32", "--matvec-rows", "1"]
        q4 = ("models/wide/stories260K-wide-q4_k.gguf", "reference/stories260K-wide-q4_k.json")
        self.assertGreater(self.check(*q4, 5e-2, 3, args), 2e-3, "the GEMM path was not reached")
        runs = []
        for t in ("q4_k", "f16"):
            with self.subTest(type=t):
                self.check(f"models/wide/stories260K-wide-{t}.gguf", f"reference/stories260K-wide-{t}.json", 2e-3, 3,
                           [*args, "--precision", "accurate"], runs)
        exact = [*args, "--precision", "accurate", "--decode-gemm-rows", "64"]
        for t in ("q4_k", "q4_k_m"):
            with self.subTest(type=t, kernel="exact"):
                self.check(f"models/wide/stories260K-wide-{t}.gguf", f"reference/stories260K-wide-{t}.json", 2e-3, 1,
                           exact, runs)
        moved = max(abs(v - runs[2]["c0"][0][1].get(tok, v)) for tok, v in runs[0]["c0"][0][1].items())
        self.assertGreater(moved, 0.0, "the exact kernel did not run")

    def test_long_rows_every_decode_path(self):
        # Rows of several chunks per thread and several row groups per block (ffn_down has 4352
        # columns), which no shared model has: the default matvec path (one quantized row: the
        # single-vector kernel, RMSNorm and RoPE fused), the batched kernel for it
        # (--no-matvec-single; F16 runs its default), the fixed 8-vector tiling
        # (--precision exact), RoPE outside the QKV matvec, and the tensor-core decode GEMM
        # for the 5-token prompt (its tile kernel: the emulator's GEMM input is F32, and the
        # fragment kernels, which take F16 activations, are loom-gpu-qgemm-test's), against the
        # CPU engine. The GEMM rounds weights and activations to F16, as the cuBLAS path does on
        # CUDA: 2.1e-3 (F16) and 3.4e-3 (Q4_K_M) here, so 5e-3. Then every step on the GEMM path
        # (--matvec-rows 1) of the Q4_K_M (Q6_K), BF16 and Q8_0 models: their weights dequantized
        # to F16 in the fast tier, within 5e-3, and split into F16 high and low parts with the
        # activations' (--precision accurate), within 1e-4: kernels that tests/gpu/test_plan.cpp
        # counts as covered on these types.
        cases = [{"prompt_ids": [1, 5, 9, 22, 301], "steps": [0] * 4}]
        gemm = ["--matvec-rows", "1"]
        accurate = ["--precision", "accurate", "--matvec-rows", "1"]
        with tempfile.TemporaryDirectory() as d:
            # Q4_K_M: Q4_K, with Q6_K for ffn_down and the output.
            for t in ("q4_k_m",) if SANITIZED else ("f16", "bf16", "q8_0", "q4_k_m"):
                model = os.path.join(d, f"{t}.gguf")
                make_model(model, "--layers", "1", "--dim", "512", "--heads", "8", "--kv-heads", "2", "--ffn", "4352",
                           "--vocab", "1000", "--type", t, "--seed", "7")
                want = generate(CPU, model, cases)["c0"]
                tc = ["--decode-gemm-rows", "64", "--matvec-rows", "1", "--decode-gemm-f16"]
                batched = ["--no-matvec-single"]  # Q4_K and Q6_K rows after a separate RMSNorm
                paths = [[], ["--precision", "exact"], ["--no-fuse-rope"], batched, tc]
                if SANITIZED:
                    paths = [[], batched, tc]
                elif t in ("bf16", "q8_0"):
                    paths = []
                # F16's GEMM paths are the 5-token prompt's above and test_split_products_within_2e3's.
                if t != "f16":
                    paths += [gemm, accurate]
                for extra in paths:
                    with self.subTest(type=t, args=extra):
                        got = generate(EMU, model, cases, ["--kv-f32", *extra])["c0"]
                        self.assertEqual([s[0] for s in got], [s[0] for s in want])
                        worst = max(abs(v - g[1][tok]) for w, g in zip(want, got) for tok, v in w[1].items())
                        self.assertLess(worst, 5e-3 if extra in (tc, gemm) else 1e-4)
                        if extra == tc:  # the F16 operands show: the prompt did go through the kernel
                            self.assertGreater(worst, 1e-6)
                if t == "q4_k_m":
                    # Two requests decoding together, then one alone (the second ends first): the
                    # batched kernel's two-vector launches (RoPE and the K/V store at each
                    # vector's own position), then the single-vector kernel on the same cache.
                    two = cases + [{"prompt_ids": [1, 7, 3], "steps": [0] * 2}]
                    want2 = generate(CPU, model, two)
                    got2 = generate(EMU, model, two, ["--kv-f32"])
                    for cid in want2:
                        self.assertEqual([s[0] for s in got2[cid]], [s[0] for s in want2[cid]], cid)
                        worst = max(abs(v - g[1].get(tok, -9999.0))  # a token missing from the top 20 fails
                                    for w, g in zip(want2[cid], got2[cid]) for tok, v in w[1].items())
                        self.assertLess(worst, 1e-4, cid)

    @unittest.skipIf(SANITIZED, "64 prompts of 33-300 tokens take minutes on the emulator under ASan")
    def test_many_decode_rows_long_attention_span(self):
        # 64 requests decoding together on a model whose heads the vectorized decode attention
        # takes (head_dim 32, 4 KV heads, 2 query heads each): 64 x 4 >= 256, so their steps
        # take 256-position splits (kernels.hpp attn_decode_span): with every context under 256
        # positions one split, written by the split kernel itself; with one request at 300
        # positions two splits and the combine. Same greedy tokens as the CPU engine, and top-3
        # logprobs within 2e-3 with the F32 KV pool.
        short = [{"prompt_ids": [1] + [3 + (37 * i + 11 * j) % 500 for j in range(33 + i % 23)], "steps": [0] * 6}
                 for i in range(64)]
        long = [{"prompt_ids": [1] + [3 + 13 * j % 500 for j in range(299)], "steps": [0] * 6}]
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.gguf")
            make_model(model, "--layers", "1", "--dim", "256", "--heads", "8", "--kv-heads", "4", "--ffn", "512",
                       "--vocab", "600", "--ctx", "1024", "--type", "f32", "--seed", "3")
            for what, cases in (("one split", short), ("two splits", short[:63] + long)):
                want = generate(CPU, model, cases, logprobs=3)  # the emulator's top-20 is slow
                got = generate(EMU, model, cases, ["--kv-f32", "--parallel", "64"], logprobs=3)
                worst = 0.0
                for cid in want:
                    self.assertEqual([t[0] for t in got[cid]], [t[0] for t in want[cid]], f"{what}: {cid}")
                    for (_, lp_w), (_, lp_g) in zip(want[cid], got[cid]):
                        worst = max([worst] + [abs(v - lp_g[t]) for t, v in lp_w.items() if t in lp_g])
                self.assertLess(worst, 2e-3, what)

    def test_flash_prefill_attention(self):
        # The tensor-core FlashAttention prefill (--prefill-attn flash, the CUDA default) against
        # the F32 tiled kernel on the same F16 KV pool: head_dim 64 with 2 query heads a KV head,
        # head_dim 128 with 4 (Llama 3's shape); a 150-token prompt (three key tiles of 64, the
        # last partial, the causal diagonal inside tiles), the same prompt in chunks of 40
        # (queries at positions 40.. whose keys are partly cached), and a second request behind
        # the first one's cached prefix.
        prompt = [1] + [3 + (29 * j) % 500 for j in range(149)]
        other = prompt[:96] + [7 + j for j in range(20)]
        lines = [f"GEN a prompt={','.join(map(str, prompt))} max_tokens=3 temperature=0 logprobs=5 ignore_eos=1",
                 f"GEN b prompt={','.join(map(str, other))} max_tokens=3 temperature=0 logprobs=5 ignore_eos=1"]
        with tempfile.TemporaryDirectory() as d:
            # Under the sanitizers (ten times slower) the first shape, unchunked, only.
            for heads, kv_heads, hd in ((4, 2, 64),) if SANITIZED else ((4, 2, 64), (8, 2, 128)):
                model = os.path.join(d, f"m{heads}.gguf")
                make_model(model, "--layers", "2", "--dim", str(hd * heads), "--heads", str(heads), "--kv-heads",
                           str(kv_heads), "--ffn", "256", "--vocab", "600", "--ctx", "512", "--type", "f32", "--seed", "5")
                for chunk in ([],) if SANITIZED else ([], ["--max-batch-tokens", "40"]):
                    runs = {}
                    for mode in ("tiled", "flash"):
                        e = Engine(model, "--prefill-attn", mode, *chunk)
                        e.send(lines[0])
                        e.wait_end("a")
                        e.send(lines[1])
                        e.wait_end("b")
                        e.close()
                        runs[mode] = (e.of("a")[0], e.of("b")[0])
                        self.assertGreaterEqual(e.of("b")[1], 80, "b's prefix came from the cache")
                    for (ta, tb) in zip(runs["tiled"], runs["flash"]):
                        toks, lps = tokens_and_logprobs(ta)
                        t2, l2 = tokens_and_logprobs(tb)
                        self.assertEqual(t2, toks, (heads, chunk))
                        worst = max(abs(v - y[t]) for x, y in zip(lps, l2) for t, v in x.items() if t in y)
                        self.assertLess(worst, 1e-4, (heads, chunk))

    def batching(self, *args):
        """Request a (greedy) and c (sampled, seeded): each alone in one engine; in another with
        --max-batch-tokens 8, together (a's 37-token prompt chunked beside c's steps), then a again
        (its first two blocks from the prefix cache). Returns a and c alone, a and c together,
        a from the cache, and the cached_tokens of the last."""
        model = shared(STORIES)
        a = "prompt=1," + ",".join(str(10 + 7 * i % 480) for i in range(36)) + " max_tokens=4 temperature=0 logprobs=5"
        c = "prompt=1,403,407,261,378,300,301 max_tokens=5 temperature=0.9 top_k=40 seed=11 logprobs=3"
        alone = Engine(model, *args)
        alone.send(f"GEN a {a}")
        alone.wait_end("a")
        alone.send(f"GEN c {c}")
        alone.wait_end("c")
        alone.close()
        mixed = Engine(model, "--max-batch-tokens", "8", *args)
        mixed.send(f"GEN a1 {a}", f"GEN c1 {c}")
        mixed.wait_end("a1", "c1")
        mixed.send(f"GEN a2 {a}")
        mixed.wait_end("a2")
        mixed.close()
        return (alone.of("a")[0], alone.of("c")[0], mixed.of("a1")[0], mixed.of("c1")[0], mixed.of("a2")[0],
                mixed.of("a2")[1])

    def test_batch_invariant_lines_are_bitwise_equal(self):
        a, c, a1, c1, a2, cached = self.batching("--precision", "exact")
        self.assertGreaterEqual(cached, 32)
        self.assertEqual(len([l for l in a if l.startswith("T ")]), 4)
        self.assertEqual(a1, a)
        self.assertEqual(a2, a)
        self.assertEqual(c1, c)

    def test_batching_keeps_tokens_and_logprobs_within_2e3(self):
        a, c, a1, c1, a2, cached = self.batching()
        self.assertGreaterEqual(cached, 32)
        toks, lps = tokens_and_logprobs(a)
        self.assertEqual(len(toks), 4)
        for other in (a1, a2):
            t2, l2 = tokens_and_logprobs(other)
            self.assertEqual(t2, toks)
            worst = max(abs(v - y[t]) for x, y in zip(lps, l2) for t, v in x.items() if t in y)
            self.assertLess(worst, 2e-3)


if __name__ == "__main__":
    loomtest.main()
