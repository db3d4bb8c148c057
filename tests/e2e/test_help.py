"""End to end: every binary's --help exits 0, prints to stdout, and names only flags the
reference documents (docs/api.md; the GPU engines' in docs/gpu.md), and the flag tables of
loom-gateway (docs/api.md) and of the GPU engines (docs/gpu.md) name exactly the flags --help
prints."""
import os
import re
import subprocess
import unittest

import loomtest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
API = open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8").read()
GPU = open(os.path.join(ROOT, "docs", "gpu.md"), encoding="utf-8").read()


def help_of(exe):
    out = subprocess.run([os.path.join(loomtest.BIN, exe), "--help"], capture_output=True, text=True, timeout=30)
    return out


def table_flags(doc, heading):
    """The flags in the first column of the table under `heading` (up to its blank line)."""
    table = doc[doc.index(heading):]
    table = table[:table.index("\n\n", table.index("| flag"))]
    return set(re.findall(r"^\| `(--[a-z0-9-]+)`", table, re.M))


def flags(text):
    """The long flags a --help text defines: those in the option column of its option
    lines (two spaces, then a dash; the description, after a wider gap, is left out)."""
    found = set()
    for line in text.splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
        if m:
            found.update(re.findall(r"--[a-z][a-z0-9-]*", m.group(1)))
    return found


class Help(unittest.TestCase):
    def check(self, exe, minimum, doc=API, where="docs/api.md"):
        out = help_of(exe)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr, "")
        got = flags(out.stdout)
        self.assertTrue(set(minimum) <= got, (exe, sorted(got)))
        for f in sorted(got):
            self.assertTrue("`" + f in doc, "%s %s is not in %s" % (exe, f, where))
        return out.stdout, got

    def test_gateway(self):
        text, got = self.check("loom-gateway", ["--help", "--model", "--engine", "--port", "--api-key"])
        for endpoint in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/tokenize", "/metrics",
                         "/health", "playground"):
            self.assertIn(endpoint, text)
        # docs/api.md's table lists exactly the flags --help prints.
        self.assertEqual(table_flags(API, "## `loom-gateway` flags"), got)

    def test_engine(self):
        text, _ = self.check("loom-engine-cpu", ["--help", "--model", "--threads", "--ctx", "--parallel", "--precision"])
        self.assertIn("Precision is exact", text)
        cpu = os.path.join(loomtest.BIN, "loom-engine-cpu")
        # --precision exact is its only tier; the other tiers and the removed switch are refused by name.
        for args, want in ((["--precision", "fast"], "--precision fast is not available"),
                           (["--batch-invariant"], "--batch-invariant was replaced by --precision exact")):
            out = subprocess.run([cpu, "--model", "x.gguf", *args], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 2, args)
            self.assertIn(want, out.stderr)

    @unittest.skipUnless(os.path.exists(os.path.join(loomtest.BIN, "loom-engine-gpuemu")),
                         "loom-engine-gpuemu not built (-DLOOM_GPU_EMU=OFF or not x86-64)")
    def test_gpu_engine(self):
        # loom-engine-cuda and -hip print the same text (engine/backends/gpu/main.cpp, the options
        # from gpu_options.hpp's one parser, which the GPU tools share); the emulator build is the
        # one every build makes.
        _, got = self.check("loom-engine-gpuemu", ["--help", "--model", "--precision", "--print-plan", "--kv-f32",
                                                    "--kv-f16", "--prefill-attn", "--matvec-rows"], doc=GPU,
                            where="docs/gpu.md")
        self.assertEqual(table_flags(GPU, "## Flags"), got)
        self.assertNotIn("--batch-invariant", got)
        self.assertNotIn("--split-products", got)
        # The switches --precision replaced, and bad tiers, are refused by name.
        emu = os.path.join(loomtest.BIN, "loom-engine-gpuemu")
        for args, want in ((["--batch-invariant"], "--batch-invariant was replaced by --precision exact"),
                           (["--split-products"], "--split-products was replaced by --precision accurate"),
                           (["--precision", "best"], "bad value 'best' for --precision (fast, accurate or exact)"),
                           (["--precision"], "--precision needs a value")):
            out = subprocess.run([emu, "--model", "x.gguf", *args], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 2, args)
            self.assertTrue(out.stderr.startswith("loom-engine-gpuemu: " + want), out.stderr)

    def test_make_model(self):
        text, got = self.check("loom-make-model", ["--help", "--out", "--preset", "--type", "--chat-template"])
        # Every flag the parser takes is in the help (a bad one is named on stderr, exit 2).
        for f in sorted(got - {"--help"}):
            out = subprocess.run([os.path.join(loomtest.BIN, "loom-make-model"), f], capture_output=True, text=True)
            self.assertNotIn("unknown flag", out.stderr, f)
        bad = subprocess.run([os.path.join(loomtest.BIN, "loom-make-model"), "--bogus", "1"], capture_output=True,
                             text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("unknown flag --bogus", bad.stderr)


if __name__ == "__main__":
    loomtest.main()
