"""loom-engine-cpu driven alone over stdin/stdout, as a person or the gateway would:
the HELLO line, byte-exact result lines, malformed input, cancel, several requests in
flight, and exactly one terminal line per request.
"""
import os
import signal
import subprocess
import threading
import unittest

import loomtest
from loomtest import shared

ENGINE = os.path.join(loomtest.BIN, "loom-engine-cpu")
MODEL = shared("models/stories260K.gguf")


def run_engine(lines, *args):
    """Feeds `lines` and closes stdin; returns the engine's stdout lines."""
    p = subprocess.run([ENGINE, "--model", MODEL, *args], input="".join(l + "\n" for l in lines),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def by_id(out):
    d = {}
    for line in out[1:]:
        parts = line.split()
        d.setdefault(parts[1], []).append(line)
    return d


class EngineProtocol(unittest.TestCase):
    def test_hello(self):
        out = run_engine([])
        self.assertEqual(out, [
            "HELLO loom/1 engine=loom-engine-cpu backend=cpu model=llama n_vocab=512 n_ctx=2048 bos=1 eos=2 eog=2 "
            "caps=logprobs,allowed,cancel,prompt_logprobs,penalties,logit_bias,processed_logprobs,seed,ping,grammar "
            "max_logprobs=20"])

    def test_grammar_lines(self):
        # grammar=choice:["yes","no"] (base64): greedy picks a choice in two tokens and the request
        # ends with stop as soon as the choice is complete; a source that is not base64 is a
        # malformed line, one that does not compile an ERR saying why (docs/protocol.md).
        out = run_engine(["GEN g prompt=1,403,407,261,378 max_tokens=12 temperature=0 grammar=choice:WyJ5ZXMiLCJubyJd",
                          "GEN e prompt=1 grammar=regex:KGEpXDE=", "GEN f prompt=1 grammar=regex:YQ"])
        d = by_id(out)
        self.assertEqual(d["g"], ["T g 416", "T g 414", "DONE g stop prompt_tokens=5 completion_tokens=2"])
        self.assertEqual(d["e"], ["ERR e grammar does not compile: regex: backreferences are not supported at offset 5"])
        self.assertEqual(d["f"], ["ERR f grammar source is not base64"])

    def test_greedy_lines(self):
        out = run_engine(["GEN a prompt=1,403,407,261,378 max_tokens=4 temperature=0"])
        self.assertEqual(out[1:], ["T a 432", "T a 383", "T a 286", "T a 261",
                                   "DONE a length prompt_tokens=5 completion_tokens=4"])

    def test_lp_follows_t(self):
        out = run_engine(["GEN a prompt=1,403,407,261,378 max_tokens=2 temperature=0 logprobs=2"])
        self.assertEqual([l.split()[0] for l in out[1:]], ["T", "LP", "T", "LP", "DONE"])
        lp = out[2].split()
        self.assertEqual(lp[:2], ["LP", "a"])
        self.assertEqual([p.split(":")[0] for p in lp[3:]], ["432", "383"])
        self.assertEqual(lp[2], lp[3].split(":")[1])  # the sampled token's logprob is its top-1 value
        self.assertAlmostEqual(float(lp[2]), -0.03178, delta=2e-2)

    def test_malformed_lines_get_err_and_engine_keeps_serving(self):
        out = run_engine([
            "bogus",
            "GEN",
            "GEN bad/id prompt=1",
            "GEN e1 prompt=1,x",
            "GEN e2 prompt=1 logprobs=99",
            "GEN e3 prompt=1 temperature=-1",
            "GEN e4 prompt=600",                     # id outside the 512-token vocabulary
            "GEN e5 prompt=1 allowed=1,9999",
            "GEN ok prompt=1,403 max_tokens=1 temperature=0",
        ])
        self.assertEqual(out[1:], [
            "ERR - unknown command 'bogus'",
            "ERR - GEN has too few fields",
            "ERR - invalid request id 'bad/id'",
            "ERR e1 prompt: 'x' is not an integer in range",
            "ERR e2 logprobs must be in 0..20",
            "ERR e3 temperature must be >= 0",
            "ERR e4 prompt token id out of range 0..511",
            "ERR e5 allowed token id out of range 0..511",
            "T ok 407",
            "DONE ok length prompt_tokens=2 completion_tokens=1",
        ])

    def test_prompt_longer_than_context(self):
        out = run_engine(["GEN p prompt=" + ",".join(["1"] * 40) + " max_tokens=1"], "--ctx", "32")
        self.assertEqual(out[1:], ["ERR p prompt of 40 tokens exceeds the context of 32"])

    def test_context_full_ends_with_length(self):
        out = run_engine(["GEN p prompt=1,403,407,261,378 temperature=0"], "--ctx", "8")
        self.assertEqual(out[-1], "DONE p length prompt_tokens=5 completion_tokens=3")

    def test_duplicate_id_in_flight(self):
        out = run_engine(["GEN x prompt=1 max_tokens=50 temperature=0 ignore_eos=1",
                          "GEN x prompt=1 max_tokens=1"], "--parallel", "1")
        ends = [l for l in out[1:] if l.split()[0] in ("DONE", "ERR")]
        self.assertEqual(ends[0], "ERR x request id is already in use")
        self.assertEqual(ends[1], "DONE x length prompt_tokens=1 completion_tokens=50")

    def test_prompt_logprobs(self):
        out = run_engine(["GEN e prompt=1,403,407 max_tokens=0 prompt_logprobs=1"])
        self.assertEqual(out[1], "PLP e 0 -")
        self.assertTrue(out[2].startswith("PLP e 1 ") and out[3].startswith("PLP e 2 "))
        self.assertEqual(out[4], "DONE e length prompt_tokens=3 completion_tokens=0")

    def test_many_requests_each_end_exactly_once(self):
        lines = []
        for i in range(12):
            extra = " logprobs=3" if i % 2 else ""
            lines.append(f"GEN q{i} prompt=1,{400 + i} max_tokens={3 + i} temperature=0.8 seed={i}{extra}")
        out = run_engine(lines, "--parallel", "3")
        groups = by_id(out)
        self.assertEqual(sorted(groups), sorted(f"q{i}" for i in range(12)))
        for i in range(12):
            g = groups[f"q{i}"]
            terminal = [l for l in g if l.split()[0] in ("DONE", "ERR")]
            self.assertEqual(len(terminal), 1, g)
            self.assertEqual(g[-1], terminal[0])
            kinds = [l.split()[0] for l in g[:-1]]
            self.assertEqual(kinds, ["T", "LP"] * (len(kinds) // 2) if i % 2 else ["T"] * len(kinds))

    def test_same_seed_same_tokens(self):
        a = run_engine(["GEN s prompt=1,403 max_tokens=20 temperature=1 seed=42"])
        b = run_engine(["GEN s prompt=1,403 max_tokens=20 temperature=1 seed=42"])
        c = run_engine(["GEN s prompt=1,403 max_tokens=20 temperature=1 seed=43"])
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_cancel(self):
        p = subprocess.Popen([ENGINE, "--model", MODEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.assertTrue(p.stdout.readline().startswith("HELLO "))
        p.stdin.write("GEN c prompt=1 max_tokens=100000 temperature=1 seed=1 ignore_eos=1\n")
        p.stdin.flush()
        for _ in range(3):
            self.assertTrue(p.stdout.readline().startswith("T c "))
        p.stdin.write("CANCEL c\nCANCEL nobody\n")
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line.startswith("T c "):
                break
        self.assertRegex(line.strip(), r"^DONE c cancelled prompt_tokens=1 completion_tokens=\d+$")
        p.stdin.write("GEN d prompt=1,403 max_tokens=1 temperature=0\n")
        p.stdin.close()
        rest = p.stdout.read().splitlines()
        self.assertEqual(rest, ["T d 407", "DONE d length prompt_tokens=2 completion_tokens=1"])
        self.assertEqual(p.wait(timeout=30), 0)

    def test_ping_is_answered_while_a_request_runs(self):
        # PING is answered by the input reader: its PONG comes before the DONE of a
        # request the scheduler is busy with, and between that request's tokens.
        p = subprocess.Popen([ENGINE, "--model", MODEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.assertTrue(p.stdout.readline().startswith("HELLO "))
        p.stdin.write("GEN long prompt=1 temperature=1 seed=3 ignore_eos=1\n")
        p.stdin.flush()
        self.assertTrue(p.stdout.readline().startswith("T long "))
        p.stdin.write("PING p1\nPING\nPING bad/token\n")
        p.stdin.close()
        lines = p.stdout.read().splitlines()
        self.assertEqual(p.wait(timeout=60), 0)
        self.assertIn("PONG p1", lines)
        done = [i for i, l in enumerate(lines) if l.startswith("DONE long ")]
        self.assertEqual(len(done), 1, lines[-3:])
        self.assertLess(lines.index("PONG p1"), done[0])
        self.assertTrue(lines[done[0]].startswith("DONE long length "), lines[done[0]])
        self.assertGreater(done[0] - lines.index("PONG p1"), 10, "the PONG waited for the request")
        self.assertIn("ERR - PING has too few fields", lines)
        self.assertIn("ERR - invalid PING token", lines)

    def test_engine_stops_when_nobody_reads_its_output(self):
        # A parent that ignores SIGPIPE passes that on through exec (the gateway does);
        # the engine must still stop once its stdout is closed, though stdin stays open.
        p = subprocess.Popen([ENGINE, "--model", MODEL], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, restore_signals=False)
        self.assertTrue(p.stdout.readline().startswith(b"HELLO "))
        p.stdout.close()
        p.stdin.write(b"GEN o prompt=1 max_tokens=1000 temperature=0 ignore_eos=1\n")
        p.stdin.flush()
        try:
            rc = p.wait(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdin.close()
        err = p.stderr.read().decode()
        p.stderr.close()
        self.assertIn(rc, (-signal.SIGPIPE, 1), err)

    def test_bad_model_is_refused_with_err(self):
        p = subprocess.run([ENGINE, "--model", shared("models/legacy/tinyllamas-stories-260k-q8_0.gguf")],
                           input="", capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertTrue(p.stdout.startswith("ERR - "), p.stdout)
        self.assertIn("not a multiple of the block size", p.stdout)

    def test_help(self):
        p = subprocess.run([ENGINE, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0)
        self.assertIn("--model", p.stdout)


if __name__ == "__main__":
    loomtest.main()
