"""Child-process helpers shared by loom's tools (benchmarks, GPU checks) and its e2e tests:
read a server's port from the lines it logs, ask its /health, stop it. Standard library only;
loopback (127.0.0.1) only."""
import http.client
import re
import subprocess
import time


def read_port(stream, pattern, deadline, log):
    """Reads lines of the text pipe `stream`, appending each to the list `log`, until one
    matches the regular expression `pattern` (group 1: a port number), the pipe ends, or
    time.time() passes `deadline` (seconds since the epoch; checked between lines). Returns
    the port (int), or None when no line matched."""
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        log.append(line)
        m = re.search(pattern, line)
        if m:
            return int(m.group(1))
    return None


def healthy(port, timeout=5):
    """Whether GET /health on 127.0.0.1:`port` answers 200 within `timeout` seconds; False
    on any connection error (the server not yet, or no longer, listening)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        c.close()
        return r.status == 200
    except OSError:
        return False


def stop(proc, timeout=10):
    """Ends the subprocess.Popen `proc`: SIGTERM, up to `timeout` seconds' wait, then SIGKILL
    and as long again. Returns its exit status (negative: the signal that ended it)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return proc.returncode


class Engine:
    """An engine child process (loom-engine-*, docs/protocol.md) spoken to line by line over
    its stdin/stdout. Raises RuntimeError when its first line is not HELLO; `hello` is that
    line, `load_s` the seconds from start to it."""

    def __init__(self, argv):
        t0 = time.time()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.hello = self.p.stdout.readline().strip()
        self.load_s = time.time() - t0
        if not self.hello.startswith("HELLO"):
            raise RuntimeError(f"{argv[0]} did not start: {self.hello}")
        self.n = 0

    def lines(self, fields):
        """Sends `GEN <id> <fields>` (a new id each call) and yields (arrival time in
        time.perf_counter() seconds, the line's split fields) for each line of that id, its
        DONE or ERR line last. Raises RuntimeError when the engine exits first."""
        self.n += 1
        rid = f"r{self.n}"
        self.p.stdin.write(f"GEN {rid} {fields}\n")
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("engine exited")
            parts = line.split()
            if len(parts) > 1 and parts[1] == rid:
                yield time.perf_counter(), parts
                if parts[0] in ("DONE", "ERR"):
                    return

    def close(self, timeout=120):
        """Closes the engine's stdin (its signal to finish) and waits up to `timeout` seconds."""
        self.p.stdin.close()
        self.p.wait(timeout=timeout)
