"""End to end: scripts/run.sh in a fresh copy of the repository (the files git tracks, as
a clone has them) serves the shipped default model, models-default/stories260K.gguf, and
its first completion is English: the model's greedy continuation of "Once upon a time".

The script runs with LOOM_BIN_DIR set to the built binaries (so it neither installs nor
builds) and, where this runs as root with `unshare` and `ip`, inside a new network
namespace that has only a loopback interface: nothing outside the machine is reachable,
so the run shows that the default path needs no network.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import loomtest
import loomproc  # noqa: E402  (tools/, put on sys.path by loomtest)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GREEDY = ", there was a little girl named Lily. She loved to play outside in the park."


def fresh_copy(dest):
    """Copies the files git tracks (as they are in the work tree) to `dest`."""
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue  # deleted in the work tree, not yet in the index
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))


def serve_and_complete(tree, bindir):
    """Runs tree/scripts/run.sh --port 0, waits for its ready line, asks for one greedy
    completion; returns {"log": [...], "status": int, "body": {...}}."""
    env = dict(os.environ, LOOM_BIN_DIR=bindir)
    proc = subprocess.Popen(["bash", os.path.join(tree, "scripts", "run.sh"), "--port", "0"], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = []
    try:
        port = loomproc.read_port(proc.stdout, r"ready on http://127\.0\.0\.1:(\d+)", time.time() + 90, log)
        if port is None:
            return {"log": log, "status": None, "body": None}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({
            "model": "stories260K", "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}),
            headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return {"log": log, "status": resp.status, "body": json.loads(resp.read())}
    finally:
        loomproc.stop(proc)


def isolated():
    return (os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip") and
            subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0)


@unittest.skipUnless(os.path.isdir(os.path.join(ROOT, ".git")) or os.path.isfile(os.path.join(ROOT, ".git")),
                     "not a git checkout")
class RunScript(unittest.TestCase):
    def test_fresh_copy_serves_the_shipped_model_offline(self):
        tree = tempfile.mkdtemp(prefix="loom-fresh-")
        try:
            fresh_copy(tree)
            self.assertTrue(os.path.isfile(os.path.join(tree, "models-default", "stories260K.gguf")),
                            "the default model is not tracked by git")
            self.assertFalse(os.path.exists(os.path.join(tree, "models")))
            bindir = os.path.abspath(loomtest.BIN)
            if isolated():
                cmd = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable,
                       os.path.abspath(__file__), "--inside", tree, bindir]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
                self.assertEqual(out.returncode, 0, out.stderr)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                r["isolated"] = True
            else:
                r = serve_and_complete(tree, bindir)
            log = "".join(r["log"])
            self.assertEqual(r["status"], 200, log)
            self.assertIn("run: starting loom-gateway on models-default/stories260K.gguf", log)
            self.assertNotIn("random", log)
            text = r["body"]["choices"][0]["text"]
            self.assertEqual(text, GREEDY[:len(text)], text)
            self.assertTrue(text.startswith(", there was a little girl named Lily"), text)
            print("isolated network namespace:", r.get("isolated", False), "| text:", repr(text))
        finally:
            shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--inside":
        print(json.dumps(serve_and_complete(sys.argv[2], sys.argv[3])))
    else:
        loomtest.main()
