#!/usr/bin/env python3
"""A stand-in engine for gateway tests: speaks the loom protocol (docs/protocol.md)
without a model.

It answers every GEN with min(max_tokens, 5) copies of token 261 and DONE.
Options: --model M (ignored), --no-logprobs (HELLO without the logprobs capability),
--die-after-gens N (exit with status 3 on receiving the N-th GEN; a file named by
--state remembers the count across restarts, so the restarted engine behaves).
"""
import os
import sys

args = sys.argv[1:]
caps = ["allowed", "cancel"]
if "--no-logprobs" not in args:
    caps.insert(0, "logprobs")
die_after = int(args[args.index("--die-after-gens") + 1]) if "--die-after-gens" in args else 0
state = args[args.index("--state") + 1] if "--state" in args else None
seen = 0
if state and os.path.exists(state):
    seen = int(open(state).read() or 0)

out = sys.stdout
out.write("HELLO loom/1 engine=fake-engine backend=cpu model=fake n_vocab=512 n_ctx=2048 bos=1 eos=2 eog=2 "
          "caps=%s max_logprobs=20\n" % ",".join(caps))
out.flush()
for line in sys.stdin:
    parts = line.split()
    if not parts:
        continue
    if parts[0] == "GEN":
        seen += 1
        if state:
            open(state, "w").write(str(seen))
        if die_after and seen == die_after:
            sys.exit(3)
        rid = parts[1]
        kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
        n = min(int(kv.get("max_tokens", 5)), 5)
        for _ in range(n):
            out.write("T %s 261\n" % rid)
            if "logprobs" in kv and "logprobs" in caps:
                out.write("LP %s -0.5\n" % rid)
            out.flush()
        out.write("DONE %s length prompt_tokens=%d completion_tokens=%d\n" % (rid, len(kv["prompt"].split(",")), n))
        out.flush()
    elif parts[0] == "CANCEL":
        pass  # every request already ended
    else:
        out.write("ERR - unknown command\n")
        out.flush()
