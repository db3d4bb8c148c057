"""End to end: every binary's --help exits 0, prints to stdout, and names only flags the
reference documents (docs/api.md; the GPU engines' in docs/gpu.md), and docs/api.md's
loom-gateway table names every flag loom-gateway's --help prints."""
import os
import re
import subprocess
import unittest

import loomtest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
API = open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8").read()


def help_of(exe):
    out = subprocess.run([os.path.join(loomtest.BIN, exe), "--help"], capture_output=True, text=True, timeout=30)
    return out


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
            self.assertIn("`" + f, doc, "%s %s is not in %s" % (exe, f, where))
        return out.stdout, got

    def test_gateway(self):
        text, got = self.check("loom-gateway", ["--help", "--model", "--engine", "--port", "--api-key"])
        for endpoint in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/models", "/tokenize", "/metrics",
                         "/health", "playground"):
            self.assertIn(endpoint, text)
        # docs/api.md's table lists exactly the flags --help prints.
        table = API[API.index("## `loom-gateway` flags"):]
        table = table[:table.index("\n\n", table.index("| flag"))]
        self.assertEqual(set(re.findall(r"^\| `(--[a-z-]+)`", table, re.M)), got)

    def test_engine(self):
        self.check("loom-engine-cpu", ["--help", "--model", "--threads", "--ctx", "--parallel"])

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
