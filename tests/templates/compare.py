#!/usr/bin/python3
"""Renders every chat template with Python's Jinja2 and with loom-render-template and
requires byte-identical output (or, when Jinja2 raises, that loom raises too, with the same
message for raise_exception()).

The reference environment is the one shared/models/templates/README.md describes (the way
Hugging Face transformers renders chat templates): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and jinja2.ext.loopcontrols; transformers' tojson filter
(json.dumps with ensure_ascii=False, indent, separators, sort_keys); raise_exception(msg) and
strftime_now(fmt) globals; variables messages, tools (only when the conversation has tools),
add_generation_prompt, bos_token, eos_token and the conversation's kwargs (which never replace
those five).

Cases: every template x every conversations/*.json (each with add_generation_prompt true and
false unless the file says otherwise), then the language snippets of snippets.json (small
templates with their own variables) that exercise the rest of the language.

strftime_now makes some templates date dependent, so both sides read the clock from the
test hook LOOM_FAKE_TIME (Unix seconds; default 1721952000 = 2024-07-26) in UTC.

Usage: compare.py --renderer PATH/loom-render-template --templates DIR
                  [--conversations DIR] [--snippets FILE|''] [-v]
Exit status 0 when everything matches, 1 otherwise (each mismatch is printed with a diff).
"""
import argparse
import copy
import datetime
import difflib
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("LOOM_FAKE_TIME", "1721952000")
os.environ["TZ"] = "UTC"
time.tzset()

import jinja2  # noqa: E402
from jinja2.exceptions import TemplateError  # noqa: E402
from jinja2.ext import loopcontrols  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

RESERVED = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token")


class RaisedByTemplate(TemplateError):
    """What raise_exception() raises, so that its message can be compared exactly."""


def make_env():
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise RaisedByTemplate(message)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(int(os.environ["LOOM_FAKE_TIME"])).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def reference(env, source, case):
    """Returns ("ok", text) or ("raise", message) or ("error", description)."""
    case = copy.deepcopy(case)  # templates may pop() from lists: keep the caller's data intact
    try:
        template = env.from_string(source)
        variables = {k: v for k, v in case.get("kwargs", {}).items() if k not in RESERVED}
        variables["messages"] = case["messages"]
        if case.get("tools") is not None:
            variables["tools"] = case["tools"]
        variables["add_generation_prompt"] = case["add_generation_prompt"]
        variables["bos_token"] = case["bos_token"]
        variables["eos_token"] = case["eos_token"]
        return "ok", template.render(**variables)
    except RaisedByTemplate as e:
        return "raise", str(e)
    except Exception as e:  # any other failure of the template: loom must fail too
        return "error", f"{type(e).__name__}: {e}"


def load_snippets(path):
    """Small templates covering the language (tests/templates/snippets.json)."""
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        items = json.load(f)
    out = []
    for i, item in enumerate(items):
        variables = dict(item.get("vars", {}))
        case = {"messages": variables.pop("messages", []), "add_generation_prompt": False,
                "bos_token": "<s>", "eos_token": "</s>", "kwargs": variables}
        out.append((f"snippet {i}", item["template"], case))
    return out


def loom(renderer, template_path, case):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(case, f, ensure_ascii=False)
        path = f.name
    try:
        p = subprocess.run([renderer, template_path, path], capture_output=True, timeout=60)
    finally:
        os.unlink(path)
    if p.returncode == 0:
        return "ok", p.stdout.decode("utf-8", "surrogateescape")
    err = p.stderr.decode("utf-8", "replace").rstrip("\n")
    if p.returncode == 2 and err.startswith("raise_exception: "):
        return "raise", err[len("raise_exception: "):]
    if p.returncode == 2 and err.startswith("TemplateError: "):
        return "error", err[len("TemplateError: "):]
    return "crash", f"exit code {p.returncode}: {err}"


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            break
    else:
        i = min(len(a), len(b))
    lo = max(0, i - 60)
    return f"first difference at char {i}:\n  jinja2: {a[lo:i + 60]!r}\n  loom:   {b[lo:i + 60]!r}"


def load_cases(conv_dir):
    cases = []
    for path in sorted(glob.glob(os.path.join(conv_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            conv = json.load(f)
        name = os.path.splitext(os.path.basename(path))[0]
        prompts = conv.get("add_generation_prompt", [True, False])
        for agp in prompts if isinstance(prompts, list) else [prompts]:
            case = {
                "messages": conv["messages"],
                "add_generation_prompt": agp,
                "bos_token": conv.get("bos_token", "<s>"),
                "eos_token": conv.get("eos_token", "</s>"),
            }
            if conv.get("tools") is not None:
                case["tools"] = conv["tools"]
            if conv.get("kwargs"):
                case["kwargs"] = conv["kwargs"]
            cases.append((name, agp, case))
    return cases


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--renderer", required=True, help="path of loom-render-template")
    ap.add_argument("--templates", required=True, help="folder of *.jinja chat templates")
    ap.add_argument("--conversations", default=os.path.join(here, "conversations"))
    ap.add_argument("--snippets", default=os.path.join(here, "snippets.json"),
                    help="JSON list of {template, vars} language snippets to compare too ('' to skip)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every case")
    args = ap.parse_args()

    env = make_env()
    templates = sorted(glob.glob(os.path.join(args.templates, "*.jinja")))
    cases = load_cases(args.conversations)
    if not templates or not cases:
        print(f"no templates ({len(templates)}) or conversations ({len(cases)}) found", file=sys.stderr)
        return 1

    total = matched = 0
    outcomes = {"ok": 0, "raise": 0, "error": 0}
    pair_ok = {}
    failures = []
    for tpath in templates:
        with open(tpath, encoding="utf-8", newline="") as f:  # the exact text loom reads
            source = f.read()
        tname = os.path.basename(tpath)
        for cname, agp, case in cases:
            total += 1
            ref_kind, ref = reference(env, source, case)
            got_kind, got = loom(args.renderer, tpath, case)
            if ref_kind == "ok":
                ok = got_kind == "ok" and got == ref
            elif ref_kind == "raise":
                ok = got_kind == "raise" and got == ref
            else:
                ok = got_kind == "error"
            key = (tname, cname)
            pair_ok[key] = pair_ok.get(key, True) and ok
            label = f"{tname} x {cname} (add_generation_prompt={agp})"
            if ok:
                matched += 1
                outcomes[ref_kind] += 1
                if args.verbose:
                    extra = "" if ref_kind == "ok" else f" [{ref_kind}: {ref}" + (f" | loom: {got}]" if ref_kind == "error" else "]")
                    print(f"ok    {label}{extra}")
                continue
            if ref_kind == "ok" and got_kind == "ok":
                detail = first_difference(ref, got)
                diff = "".join(difflib.unified_diff(ref.splitlines(True), got.splitlines(True), "jinja2", "loom", n=1))
                detail += "\n" + diff[:3000]
            else:
                detail = f"jinja2 {ref_kind}: {ref[:500]!r}\n  loom {got_kind}: {got[:500]!r}"
            failures.append(f"FAIL  {label}\n  {detail}")

    snippets = load_snippets(args.snippets)
    snip_matched = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, source, case in snippets:
            tpath = os.path.join(tmp, "snippet.jinja")
            with open(tpath, "w", encoding="utf-8", newline="") as f:
                f.write(source)
            ref_kind, ref = reference(env, source, case)
            got_kind, got = loom(args.renderer, tpath, case)
            ok = (got_kind == ref_kind and got == ref) if ref_kind != "error" else got_kind == "error"
            if ok:
                snip_matched += 1
                if args.verbose:
                    print(f"ok    {label}: {source[:60]!r} -> {ref_kind}: {ref[:80]!r}")
            else:
                failures.append(f"FAIL  {label}: {source!r}\n  jinja2 {ref_kind}: {ref[:800]!r}\n  loom   {got_kind}: {got[:800]!r}")

    for f in failures:
        print(f)
    pairs = len(pair_ok)
    pairs_matched = sum(pair_ok.values())
    print(f"jinja2 {jinja2.__version__}: {len(templates)} templates x {len(cases)} conversation variants")
    print(f"matched {matched}/{total} renders ({outcomes['ok']} identical texts, {outcomes['raise']} identical "
          f"raise_exception messages, {outcomes['error']} errors on both sides); "
          f"{pairs_matched}/{pairs} (template x conversation) pairs")
    if snippets:
        print(f"matched {snip_matched}/{len(snippets)} language snippets")
    return 0 if matched == total and snip_matched == len(snippets) else 1


if __name__ == "__main__":
    sys.exit(main())
