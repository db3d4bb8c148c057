"""The GPU engine (loom-engine-gpuemu: the shared GPU backend on the CPU emulator) and the
architectures and features of issue 39: it refuses at load, by name, what its kernels do not
compute (a declared sliding window, the gemma2/gemma3/phi3 architectures, a mixture of experts:
a llama file with experts and the qwen3moe/gpt-oss architectures), never serving such a file with
other maths (a mixture run as its dense part would load: it must not); and it runs YaRN RoPE scaling, whose cos/sin table it shares with the CPU
engine (engine/rope_angles.hpp), with the same greedy tokens as loom-engine-cpu and logprobs
within 2e-3 (every product in F32, F32 KV cache), teacher forcing not needed at that distance.

Skipped when loom-engine-gpuemu was not built.
"""
import json
import os
import subprocess
import unittest

import loomtest
from loomtest import shared
from test_gpu_emulator import CPU, EMU, generate


def load_error(engine, model, *args):
    """The ERR line an engine prints when it refuses `model` at load (asserting it exits 1)."""
    p = subprocess.run([engine, "--model", shared(model), *args], input="", capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    first = p.stdout.splitlines()[0]
    assert first.startswith("ERR - "), first
    return first


@unittest.skipUnless(os.path.exists(EMU), "loom-engine-gpuemu not built")
class GpuArchitectures(unittest.TestCase):
    def test_declared_sliding_window_is_refused_by_key(self):
        msg = load_error(EMU, "models/arch/llama-swa-f32.gguf")
        self.assertIn("llama.attention.sliding_window = 8", msg)
        self.assertIn("no sliding-window attention", msg)
        # A context within the window never reaches it: that loads.
        p = subprocess.run([EMU, "--model", shared("models/arch/llama-swa-f32.gguf"), "--ctx", "8"], input="",
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(p.stdout.startswith("HELLO "), p.stdout)

    def test_other_architectures_are_refused_by_name(self):
        for arch in ("gemma2", "gemma3", "phi3"):
            with self.subTest(arch=arch):
                msg = load_error(EMU, f"models/arch/{arch}-f32.gguf")
                self.assertIn(f"unsupported architecture '{arch}'", msg)

    def test_mixtures_of_experts_are_refused_by_name(self):
        # llama-moe is a llama file: it binds as llama unless its experts are seen.
        for model, arch, n in (("llama-moe-f32", "llama", 4), ("llama-moe-q8_0", "llama", 4),
                               ("qwen3moe-f32", "qwen3moe", 8), ("gpt-oss-mxfp4", "gpt-oss", 4)):
            with self.subTest(model=model):
                msg = load_error(EMU, f"models/arch/{model}.gguf")
                self.assertIn(f"'{arch}' is a mixture of experts ({arch}.expert_count = {n})", msg)
                self.assertIn("loom-engine-gpuemu does not run yet", msg)

    def test_yarn_matches_the_cpu_engine(self):
        for name in ("llama-yarn-f32", "qwen2-yarn-f32"):
            with self.subTest(model=name):
                with open(shared(f"reference64/arch/{name}.json")) as f:
                    cases = json.load(f)["cases"][:2]  # the emulator is slow: two of the three prompts
                model = shared(f"models/arch/{name}.gguf")
                want = generate(CPU, model, cases, ["--ctx", "512"])
                got = generate(EMU, model, cases, ["--ctx", "512", "--precision", "exact"])
                worst = 0.0
                for cid in want:
                    self.assertEqual([t[0] for t in got[cid]], [t[0] for t in want[cid]], f"{name} {cid}")
                    for (_, lp_w), (_, lp_g) in zip(want[cid], got[cid]):
                        worst = max([worst] + [abs(v - lp_g[t]) for t, v in lp_w.items() if t in lp_g])
                self.assertLess(worst, 2e-3, f"{name}: largest |logprob difference| {worst}")


if __name__ == "__main__":
    loomtest.main()
