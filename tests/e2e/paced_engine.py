#!/usr/bin/env python3
"""A stand-in engine that decodes at a fixed pace, for latency tests of the gateway:
speaks the loom protocol (docs/protocol.md) without a model.

Every --step seconds (default 0.005, the ITL of a mid-size model) it writes one token
for each active request, all in one write, as a batched decode step does: `T` and,
when the GEN asked for logprobs=K, an `LP` line with K alternatives. Tokens cycle
through ids 259..511 (stories260K's text pieces, so the gateway has text to release);
a request ends with DONE ... length after max_tokens (default 16). CANCEL ends one with
DONE ... cancelled. Sleeping, not computing, sets the pace, so the ITL it offers does
not depend on how busy the machine is.

Options: --model M (ignored), --step S, --n-vocab N (default 512), --n-ctx N (default 2048),
  --first-token-delay S   a request's first token comes S seconds after its GEN (a queue
                          or a long prefill), instead of at the next step
  --cached-tokens N       DONE lines carry cached_tokens=min(N, prompt tokens), as an
                          engine with a prefix cache reports its hits
"""
import os
import select
import sys
import time


def opt(args, name, default):
    return args[args.index(name) + 1] if name in args else default


def main():
    args = sys.argv[1:]
    step = float(opt(args, "--step", "0.005"))
    n_vocab = int(opt(args, "--n-vocab", "512"))
    n_ctx = int(opt(args, "--n-ctx", "2048"))
    first_delay = float(opt(args, "--first-token-delay", "0"))
    cached = opt(args, "--cached-tokens", None)
    out = sys.stdout
    out.write("HELLO loom/1 engine=paced-engine backend=cpu model=paced n_vocab=%d n_ctx=%d bos=1 eos=2 eog=2 "
              "caps=logprobs,allowed,cancel,prompt_logprobs,penalties,logit_bias,processed_logprobs,seed "
              "max_logprobs=20\n" % (n_vocab, n_ctx))
    out.flush()
    active = {}  # id -> [prompt_tokens, generated, max_tokens, K or None, next token, not before]
    order = []
    fd = sys.stdin.fileno()
    pending = b""
    next_step = time.monotonic() + step
    while True:
        timeout = max(0.0, next_step - time.monotonic()) if active else None
        ready, _, _ = select.select([fd], [], [], timeout)
        lines = []
        if ready:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            pending += data
            *lines, pending = pending.split(b"\n")
        for raw in lines:
            # The prompt's ids are counted, not parsed, and cut out before the line is decoded: a
            # prompt of 100K tokens then takes well under a millisecond, so that it does not hold
            # up the pace (a real engine reads on a thread of its own).
            prompt_len, at = 0, raw.find(b" prompt=")
            if at >= 0:
                end = raw.find(b" ", at + 1)
                end = len(raw) if end < 0 else end
                prompt_len = raw.count(b",", at, end) + 1
                raw = raw[:at] + raw[end:]
            parts = raw.decode().split()
            if not parts:
                continue
            if parts[0] == "GEN":
                kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
                k = int(kv["logprobs"]) if "logprobs" in kv else None
                if not active:
                    next_step = time.monotonic() + step
                active[parts[1]] = [prompt_len, 0, int(kv.get("max_tokens", 16)), k,
                                    259 + len(order) % 253, time.monotonic() + first_delay]
                order.append(parts[1])
            elif parts[0] == "CANCEL" and parts[1] in active:
                r = active.pop(parts[1])
                out.write("DONE %s cancelled prompt_tokens=%d completion_tokens=%d\n" % (parts[1], r[0], r[1]))
                out.flush()
            elif parts[0] != "CANCEL":
                out.write("ERR - unknown command\n")
                out.flush()
        if not active or time.monotonic() < next_step:
            continue
        next_step += step
        buf = []
        for rid in [r for r in order if r in active]:
            r = active[rid]
            if r[5] > time.monotonic():
                continue
            if r[1] >= r[2]:
                extra = " cached_tokens=%d" % min(int(cached), r[0]) if cached is not None else ""
                buf.append("DONE %s length prompt_tokens=%d completion_tokens=%d%s\n" % (rid, r[0], r[1], extra))
                del active[rid]
                continue
            tok = r[4]
            r[4] = 259 + (tok - 259 + 1) % (n_vocab - 259)
            r[1] += 1
            buf.append("T %s %d\n" % (rid, tok))
            if r[3] is not None:
                alts = " ".join("%d:%.7g" % (259 + (tok - 259 + j) % (n_vocab - 259), -0.25 - 0.5 * j)
                                for j in range(r[3]))
                buf.append("LP %s -0.25%s\n" % (rid, " " + alts if alts else ""))
        order = [r for r in order if r in active]
        out.write("".join(buf))
        out.flush()


if __name__ == "__main__":
    main()
