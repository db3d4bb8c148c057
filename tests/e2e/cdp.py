"""Headless Chromium driven over the Chrome DevTools Protocol (CDP), standard library only:
a minimal WebSocket client (RFC 6455: client handshake, masked text frames, fragmented
and control frames) and a Browser class that starts Chromium on a fresh profile and
evaluates JavaScript in its page.

Chromium (Debian's `chromium`) runs with --headless --no-sandbox --disable-gpu and the
switches that keep it off the network (no QUIC, no background networking, component
updates or sync) and --remote-debugging-port=0 on loopback; it talks only to 127.0.0.1.
Every wait is bounded (start, each CDP command, each page condition), so a slow machine
(CI's 2 cores, the ASan run) gets time and a hung browser a clear error, never a hang;
Chromium runs in its own process group, which close() ends whole.
"""
import base64
import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlparse

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import loomproc  # noqa: E402  (tools/loomproc.py: stop)


def find_chromium():
    """The Chromium executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    """A blocking WebSocket client connection to a ws:// URL (RFC 6455)."""

    def __init__(self, url, timeout=60):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the DevTools socket closed during the handshake")
            head += chunk
        head, _, self.buf = head.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError("WebSocket handshake refused: %r" % head[:200])

    def send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        header = bytes([0x81])  # FIN, text
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the DevTools socket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """The next text message (fragments joined; pings answered)."""
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            op = b0 & 0x0F
            if op == 0x8:
                raise ConnectionError("the DevTools socket was closed by the browser")
            if op == 0x9:  # ping -> pong (masked, as a client must)
                m = os.urandom(4)
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + m +
                                  bytes(b ^ m[i % 4] for i, b in enumerate(payload)))
                continue
            if op in (0x1, 0x0):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self):
        self.sock.close()


class Browser:
    """Headless Chromium with one page, driven over CDP. Use as a context manager."""

    def __init__(self, chromium=None, width=1200, height=760, start_timeout=120):
        """Starts Chromium and attaches to its page. Raises RuntimeError when it is not
        found, exits, or shows no DevTools page within `start_timeout` seconds."""
        self.exe = chromium or find_chromium()
        if not self.exe:
            raise RuntimeError("chromium not found")
        self.ws = None
        self.profile = tempfile.mkdtemp(prefix="loom-chromium-")
        self.proc = subprocess.Popen(
            [self.exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-default-apps", "--disable-extensions", "--mute-audio", f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        try:
            self._attach(width, height, time.monotonic() + start_timeout)
        except BaseException:
            self.close()
            raise

    def _attach(self, width, height, deadline):
        # stderr is read by a thread, so that a browser that prints nothing cannot block the
        # deadline; the DevTools port arrives through a queue.
        self.log = []
        ports = queue.Queue()

        def read_stderr():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
                if m:
                    ports.put(int(m.group(1)))
            ports.put(None)  # stderr closed: the browser exited

        threading.Thread(target=read_stderr, daemon=True).start()
        try:
            port = ports.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            port = None
        if port is None:
            raise RuntimeError("chromium did not start (exit status %s):\n%s" % (self.proc.poll(),
                                                                                 "".join(self.log[-30:])))
        target = None
        while target is None and time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/json/list")
                pages = [t for t in json.loads(conn.getresponse().read()) if t.get("type") == "page"]
                conn.close()
                target = pages[0] if pages else None
            except (OSError, ValueError):
                target = None  # not serving yet
            if target is None:
                time.sleep(0.1)
        if target is None:
            raise RuntimeError("chromium has no page target:\n" + "".join(self.log[-30:]))
        self.ws = WebSocket(target["webSocketDebuggerUrl"])
        self.next_id = 0
        self.events = []
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method, wait=60, **params):
        """Sends one CDP command and returns its result. Raises RuntimeError on a CDP error,
        TimeoutError when no answer came within `wait` seconds."""
        self.next_id += 1
        my = self.next_id
        deadline = time.monotonic() + wait
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer to %s within %s s" % (method, wait))
            self.ws.sock.settimeout(left)
            try:
                msg = json.loads(self.ws.recv())
            except socket.timeout:
                raise TimeoutError("no answer to %s within %s s" % (method, wait)) from None
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if len(self.events) < 10000:  # events are kept for debugging only
                self.events.append(msg)

    def evaluate(self, expression, timeout=60):
        """The value of a JavaScript expression in the page (promises awaited, for at
        most `timeout` seconds)."""
        r = self.call("Runtime.evaluate", wait=timeout + 30, expression=expression, awaitPromise=True,
                      returnByValue=True, timeout=int(timeout * 1000))
        if "exceptionDetails" in r:
            raise RuntimeError("page exception: %s" % json.dumps(r["exceptionDetails"])[:2000])
        return r["result"].get("value")

    def navigate(self, url):
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def wait_for(self, expression, timeout=60, what="a page condition"):
        """Polls a JavaScript expression until it is truthy; returns its value. Raises
        AssertionError naming `what` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                v = self.evaluate(expression, timeout=15)
            except RuntimeError:
                v = None  # the page is still loading
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError("timed out waiting for " + what)

    def screenshot(self, path):
        """Writes a PNG of the page's viewport to `path`."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        """Ends the browser and every process it started (its process group), and removes
        its profile."""
        if getattr(self, "ws", None):
            self.ws.close()
            self.ws = None
        loomproc.stop(self.proc, 15)
        try:  # renderers and helpers left behind by the main process
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
