#!/usr/bin/env python3
"""A stand-in engine for gateway tests: speaks the loom protocol (docs/protocol.md)
without a model.

It answers every GEN with min(max_tokens, 5) copies of token 261 and DONE.
Options:
  --model M            ignored (the gateway passes it)
  --no-logprobs        HELLO without the logprobs capability
  --die-after-gens N   exit with status 3 on receiving the N-th GEN (N may be a
                       comma-separated list: die at each); a file named by --state
                       remembers the count across restarts, so the restarted engine
                       goes on counting
  --tokens-before-death K
                       on a GEN it dies at, first write K tokens (so the death comes
                       in the middle of a response)
  --hello-delay S      wait S seconds before HELLO (a slow-loading model)
  --token-delay S      wait S seconds before each token
  --script FILE        on each GEN emit the token ids in FILE (comma-separated, read at
                       that GEN) instead, up to max_tokens, with logprob -0.01*(i+1) for
                       the i-th (itself as the one top logprob); DONE stop when all were
                       sent (as if an end-of-generation token came next), else length
  --n-vocab N          the n_vocab HELLO announces (default 512)
"""
import os
import sys
import time


def opt(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


args = sys.argv[1:]
caps = ["allowed", "cancel"]
if "--no-logprobs" not in args:
    caps.insert(0, "logprobs")
die_at = {int(x) for x in opt(args, "--die-after-gens", "0").split(",") if x}
before_death = int(opt(args, "--tokens-before-death", "0"))
state = opt(args, "--state")
token_delay = float(opt(args, "--token-delay", "0"))
script = opt(args, "--script")
n_vocab = int(opt(args, "--n-vocab", "512"))
seen = 0
if state and os.path.exists(state):
    seen = int(open(state).read() or 0)

time.sleep(float(opt(args, "--hello-delay", "0")))
out = sys.stdout
out.write("HELLO loom/1 engine=fake-engine backend=cpu model=fake n_vocab=%d n_ctx=2048 bos=1 eos=2 eog=2 "
          "caps=%s max_logprobs=20\n" % (n_vocab, ",".join(caps)))
out.flush()
for line in sys.stdin:
    parts = line.split()
    if not parts:
        continue
    if parts[0] == "GEN":
        seen += 1
        if state:
            open(state, "w").write(str(seen))
        rid = parts[1]
        kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
        dying = seen in die_at
        if script:
            ids = [int(x) for x in open(script).read().split(",") if x.strip()]
            n = min(int(kv.get("max_tokens", len(ids))), len(ids))
            for i, t in enumerate(ids[:n]):
                out.write("T %s %d\n" % (rid, t))
                if "logprobs" in kv:
                    lp = -0.01 * (i + 1)
                    top = " %d:%s" % (t, repr(lp)) if int(kv["logprobs"]) > 0 else ""
                    out.write("LP %s %s%s\n" % (rid, repr(lp), top))
                out.flush()
            out.write("DONE %s %s prompt_tokens=%d completion_tokens=%d\n"
                      % (rid, "stop" if n == len(ids) else "length", len(kv["prompt"].split(",")), n))
            out.flush()
            continue
        n = before_death if dying else min(int(kv.get("max_tokens", 5)), 5)
        for _ in range(n):
            time.sleep(token_delay)
            out.write("T %s 261\n" % rid)
            if "logprobs" in kv and "logprobs" in caps:
                out.write("LP %s -0.5\n" % rid)
            out.flush()
        if dying:
            sys.exit(3)
        out.write("DONE %s length prompt_tokens=%d completion_tokens=%d\n" % (rid, len(kv["prompt"].split(",")), n))
        out.flush()
    elif parts[0] == "CANCEL":
        pass  # every request already ended
    else:
        out.write("ERR - unknown command\n")
        out.flush()
