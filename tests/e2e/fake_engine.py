#!/usr/bin/env python3
"""A stand-in engine for gateway tests: speaks the loom protocol (docs/protocol.md)
without a model, and misbehaves on request.

It answers every GEN with min(max_tokens, --tokens) copies of token 261 (with an LP
line when asked for logprobs) and DONE; GENs are served one after the other. Between
tokens it reads its input without blocking, so CANCEL (answered with DONE cancelled)
and PING (answered with PONG) are seen mid-request.
Options:
  --model M            ignored (the gateway passes it)
  --no-logprobs        HELLO without the logprobs capability
  --ping               announce the ping capability and answer PING
  --no-pong            announce the ping capability and never answer PING
  --n-vocab N, --n-ctx N
                       HELLO's n_vocab (default 512) and n_ctx (default 2048)
  --tokens N           tokens per GEN at most (default 5)
  --ignore-max-tokens  send --tokens tokens whatever max_tokens says
  --token-id ID        the token sent (default 261)
  --top K              pairs per LP line (default 0; ids 1..K)
  --die-after-gens N   exit with status 3 on receiving the N-th GEN (N may be a
                       comma-separated list: die at each); a file named by --state
                       remembers the count across restarts, so the restarted engine
                       goes on counting
  --tokens-before-death K
                       on a GEN it dies at, first write K tokens (so the death comes
                       in the middle of a response)
  --die-after-hello    write a line to stderr right after HELLO and exit with status 3
  --stall-after-gens N on the N-th GEN stop reading and writing (a stuck engine); N
                       may be a list, and counts on across restarts with --state
  --close-stdout       on the first GEN close stdout and keep running
  --err-size N         answer every GEN with an ERR line whose message is N bytes
  --long-line N        right after HELLO write a line of N bytes
  --hello-delay S      wait S seconds before HELLO (a slow-loading model)
  --token-delay S      wait S seconds before each token
  --script FILE        on each GEN emit the token ids in FILE (comma-separated, read at
                       that GEN) instead, up to max_tokens, with logprob -0.01*(i+1) for
                       the i-th (itself as the one top logprob); DONE stop when all were
                       sent (as if an end-of-generation token came next), else length
"""
import os
import select
import sys
import time


def opt(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


args = sys.argv[1:]
caps = ["allowed", "cancel"]
if "--no-logprobs" not in args:
    caps.insert(0, "logprobs")
if "--ping" in args or "--no-pong" in args:
    caps.append("ping")
answer_ping = "--ping" in args
die_at = {int(x) for x in opt(args, "--die-after-gens", "0").split(",") if x}
stall_at = {int(x) for x in opt(args, "--stall-after-gens", "0").split(",") if x}
before_death = int(opt(args, "--tokens-before-death", "0"))
state = opt(args, "--state")
token_delay = float(opt(args, "--token-delay", "0"))
max_per_gen = int(opt(args, "--tokens", "5"))
ignore_max = "--ignore-max-tokens" in args
token_id = int(opt(args, "--token-id", "261"))
top = int(opt(args, "--top", "0"))
err_size = int(opt(args, "--err-size", "0"))
script = opt(args, "--script")
seen = 0
if state and os.path.exists(state):
    seen = int(open(state).read() or 0)

out = sys.stdout.buffer


def send(text):
    out.write(text.encode())
    out.flush()


inbuf = b""
lines = []
eof = False


def pump(timeout):
    """Reads what stdin has (waiting up to `timeout` seconds, None: block) into `lines`."""
    global inbuf, eof
    if eof:
        return
    r, _, _ = select.select([0], [], [], timeout)
    if not r:
        return
    data = os.read(0, 1 << 16)
    if not data:
        eof = True
        return
    inbuf += data
    *done, inbuf = inbuf.split(b"\n")
    lines.extend(l.decode() for l in done)


cancelled = set()


def control(line):
    """Handles PING and CANCEL at once; returns False for lines to queue (GEN, others)."""
    parts = line.split()
    if parts and parts[0] == "PING":
        if answer_ping:
            send("PONG %s\n" % parts[1])
        return True
    if parts and parts[0] == "CANCEL":
        cancelled.add(parts[1])
        return True
    return False


time.sleep(float(opt(args, "--hello-delay", "0")))
send("HELLO loom/1 engine=fake-engine backend=cpu model=fake n_vocab=%s n_ctx=%s bos=1 eos=2 eog=2 "
     "caps=%s max_logprobs=20\n" % (opt(args, "--n-vocab", "512"), opt(args, "--n-ctx", "2048"), ",".join(caps)))
if "--die-after-hello" in args:
    sys.stderr.write("fake-engine: simulated crash right after HELLO (seen %d)\n" % seen)
    sys.stderr.flush()
    sys.exit(3)
if "--long-line" in args:
    send("T r0 " + "1" * int(opt(args, "--long-line")) + "\n")

queue = []
while True:
    while not queue:
        pump(None)
        while lines:
            l = lines.pop(0)
            if not control(l):
                queue.append(l)
        if eof and not queue:
            sys.exit(0)
    line = queue.pop(0)
    parts = line.split()
    if not parts:
        continue
    if parts[0] != "GEN":
        send("ERR - unknown command\n")
        continue
    seen += 1
    if state:
        open(state, "w").write(str(seen))
    rid = parts[1]
    kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
    if seen in stall_at:
        while True:
            time.sleep(3600)
    if "--close-stdout" in args:
        out.close()
        os.close(1)
        while True:
            time.sleep(3600)
    if err_size:
        send("ERR %s %s\n" % (rid, "x" * err_size))
        continue
    if script:
        ids = [int(x) for x in open(script).read().split(",") if x.strip()]
        n = min(int(kv.get("max_tokens", len(ids))), len(ids))
        for i, t in enumerate(ids[:n]):
            text = "T %s %d\n" % (rid, t)
            if "logprobs" in kv:
                lp = -0.01 * (i + 1)
                text += "LP %s %s%s\n" % (rid, repr(lp), " %d:%s" % (t, repr(lp)) if int(kv["logprobs"]) > 0 else "")
            send(text)
        send("DONE %s %s prompt_tokens=%d completion_tokens=%d\n"
             % (rid, "stop" if n == len(ids) else "length", len(kv["prompt"].split(",")), n))
        continue
    dying = seen in die_at
    if dying:
        n = before_death
    elif ignore_max:
        n = max_per_gen
    else:
        n = min(int(kv.get("max_tokens", max_per_gen)), max_per_gen)
    lp = ""
    if "logprobs" in kv and "logprobs" in caps:
        lp = "LP %s -0.5%s\n" % (rid, "".join(" %d:-%d.5" % (i, i) for i in range(1, min(top, int(kv["logprobs"])) + 1)))
    sent = 0
    finish = "length"
    for _ in range(n):
        if token_delay:
            time.sleep(token_delay)
        pump(0)
        while lines:
            l = lines.pop(0)
            if not control(l):
                queue.append(l)
        if rid in cancelled:
            finish = "cancelled"
            break
        send("T %s %d\n%s" % (rid, token_id, lp))
        sent += 1
    if dying:
        sys.exit(3)
    send("DONE %s %s prompt_tokens=%d completion_tokens=%d\n" % (rid, finish, len(kv["prompt"].split(",")), sent))
