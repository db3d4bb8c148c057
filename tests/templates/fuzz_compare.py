#!/usr/bin/python3
"""Differential fuzzing of loom-render-template against Python's Jinja2 (a developer tool,
not run by CTest: compare.py is the deterministic CI check).

Generates random templates from a grammar of text, whitespace control ({%- -%} {%+ +%}),
statements (if, for, set, macro, call, filter, with, raw, loop controls, namespaces) and
expressions (literals, operators, filters, tests, Python methods, % and str.format), renders
each with the reference environment of compare.py and with loom, and reports every case
where loom's output differs, or where only one side fails. With --messages it also lists
cases where both fail with different messages.

Usage: fuzz_compare.py --renderer PATH/loom-render-template [--seed N] [--count N]
                       [--mode ws|expr|stmt] [--messages]
Exit status 1 when a mismatch was found.
"""
import argparse
import os
import random
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

TEXT = ["", " ", "  ", "\n", "\t", "a", " b ", "\n  ", "  \n", "x\n\n", "\n\n", " \t\n ", "c\u3000", "\u00a0", "é"]
ATOMS = ["'Ünï ß'", "'a\\nb'", "1e15", "-0.0", "(1,)", "{'a': {'b': [1, (2, 3)]}}", "'%s-%d'", "'{}:{:>4}'",
         "'  x  '", "3.0", "7", "'ß'", "1", "0", "-3", "2.5", "0.1", "1e3", "'ab'", "''", "\"x y\"", "'Ab C'",
         "[1, 2, 3]", "[]", "{'k': 1, 'j': [2]}", "{}", "(1, 'a')", "none", "true", "false",
         "x", "y", "s", "l", "d", "u", "n", "f", "m", "ml"]
FILTERS = ["length", "upper", "lower", "trim", "first", "last", "list", "string", "int", "float", "abs", "title",
           "capitalize", "tojson", "sort", "unique|list", "reverse|list", "join(',')", "default('D')",
           "default('D', true)", "round", "sum", "min", "max", "count", "dictsort", "items|list",
           "map('string')|list", "select|list", "reject('none')|list", "selectattr('k')|list",
           "map(attribute='k')|list", "indent(2)", "center(6)", "wordcount", "batch(2)|list", "slice(2)|list",
           "replace('a', 'Z')", "truncate(5, true)", "format(1)", "tojson(indent=2)", "groupby('k')", "int(7)",
           "sort(reverse=true)", "sort(attribute='k')", "join('|', attribute='k')", "map('upper')|list",
           "map('lower')|join", "select('odd')|list", "select('string')|list", "reject('defined')|list",
           "selectattr('k', 'gt', 1)|list", "dictsort(by='value')", "round(1, 'floor')", "int(0, 16)",
           "indent(2, true, true)", "trim('x ')", "unique(attribute='k')|list", "min(attribute='k')",
           "max(case_sensitive=true)", "sum(start=1)", "tojson(sort_keys=true)", "tojson(indent='--')",
           "truncate(3, false, '.', 0)", "format('a', 1)", "batch(3, 0)|list", "slice(3, 'z')|list", "attr('k')",
           "center(1)", "string|length"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
         "odd", "even", "divisibleby 2", "boolean", "true", "false", "lower", "upper", "in [1, 'ab']", "eq 1",
         "callable", "sameas none"]
METHODS = ["strip()", "upper()", "split()", "split(',')", "startswith('a')", "endswith('b')", "replace('a', 'q')",
           "lstrip('a')", "title()", "find('b')", "count('a')", "get('k')", "get('z', 9)", "keys()|list",
           "items()|list", "values()|list", "index(1)", "join(['x', 'y'])", "format(1, 2)", "isdigit()",
           "capitalize()", "rsplit(' ', 1)", "split(None, 1)", "rsplit(',', 1)", "partition(',')", "zfill(5)",
           "center(7, '*')", "swapcase()", "isalnum()", "startswith(('x', 'A'))", "strip('A b')", "splitlines()",
           "count('')", "replace('', '-')"]
BINARY = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
VARS = {"x": 5, "y": "Ab,c", "s": "a b", "l": [3, 1, 2], "d": {"k": 1, "j": "v"}, "n": None, "f": 1.5,
        "m": [{"k": 2, "r": "u"}, {"k": 1, "r": "a"}], "ml": [[1, 2], [3]]}


class Generator:
    def __init__(self, rng, mode):
        self.rng = rng
        self.mode = mode

    def pick(self, items):
        return self.rng.choice(items)

    def space(self):
        return self.pick(["", " ", "  ", "\n", " \n "])

    def open_tag(self):
        return self.pick(["{%", "{%-", "{%+", "{%", "{%"])

    def close_tag(self):
        return self.pick(["%}", "-%}", "+%}", "%}", "%}"])

    def value(self):
        return self.expr() if self.mode != "ws" else self.pick(ATOMS)

    def expr(self, depth=0):
        r, e = self.rng.random(), lambda: self.expr(depth + 1)
        if depth > 2 or r < 0.3:
            return self.pick(ATOMS)
        if r < 0.45:
            return f"{e()} {self.pick(BINARY)} {e()}"
        if r < 0.6:
            return f"{e()}|{self.pick(FILTERS)}"
        if r < 0.67:
            return f"{e()} is {self.pick(['', 'not '])}{self.pick(TESTS)}"
        if r < 0.72:
            return f"({e()}).{self.pick(METHODS)}"
        if r < 0.75:
            return self.pick([f"({e()}) % ({e()}, {e()})", f"'{{}}|{{!r}}'.format({e()}, {e()})",
                              f"'%s|%r|%5.1f' % ({e()}, {e()}, {e()})"])
        if r < 0.8:
            # Only variables are subscripted: Jinja2 folds constant subscripts at compile time.
            index = self.pick(["0", "-1", "1:", ":2", "::-1", "'k'", "x"])
            return f"{self.pick(['l', 's', 'ml', 'd', 'x', 'u', 'n', 'm'])}[{index}]"
        if r < 0.85:
            return f"{e()} if {e()} else {e()}"
        if r < 0.9:
            return f"not {e()}"
        if r < 0.95:
            return f"({e()})"
        return f"[{e()}, {e()}]"

    def statement(self, depth):
        b = lambda: self.block(depth + 1)  # noqa: E731
        return self.pick([
            "{% for i in l %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}"
            "{% if loop.index > 1 %}{% break %}{% endif %}{% endfor %}",
            "{% set q %}" + b() + "{% endset %}[{{ q }}]",
            "{% filter upper %}" + b() + "{% endfilter %}",
            "{% with w = " + self.expr() + " %}{{ w }}" + b() + "{% endwith %}",
            "{% macro cm(z) %}<{{ caller(z) }}>{% endmacro %}{% call(v) cm(" + self.expr() + ") %}{{ v }}" + b() +
            "{% endcall %}",
            "{% for i in m %}{{ loop.cycle('o', 'e') }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.revindex }}"
            "{% endfor %}",
            "{% set ns.a = ns.a + 1 %}{{ ns.a }}",
            "{% for a, b in d|dictsort %}{{ a }}{{ b }}{% else %}E{% endfor %}",
            "{% for i in l if i > 1 %}{{ loop.length }}{% else %}none{% endfor %}",
            "{{ " + self.expr() + " }}{% set z = " + self.expr() + " %}{% for i in ml %}{{ z }}{% set z = i %}"
            "{{ z }}{% endfor %}{{ z }}",
        ])

    def block(self, depth=0):
        parts = []
        for _ in range(self.rng.randint(1, 5)):
            r = self.rng.random()
            if self.mode == "stmt" and depth <= 2 and self.rng.random() < 0.35:
                parts.append(self.statement(depth))
                continue
            o, c = self.open_tag, self.close_tag
            if r < 0.35 or depth > 2:
                parts.append(self.pick(TEXT) + self.pick(TEXT))
            elif r < 0.55:
                parts.append(f"{self.pick(['{{', '{{-'])}{self.space()}{self.value()}{self.space()}"
                             f"{self.pick(['}}', '-}}'])}")
            elif r < 0.65:
                cond = self.expr() if self.mode != "ws" else self.pick(["true", "false", "x", "u"])
                parts.append(f"{o()} if {cond} {c()}{self.block(depth + 1)}{o()} else {c()}"
                             f"{self.block(depth + 1)}{o()} endif {c()}")
            elif r < 0.75:
                seq = self.pick(["l", "s", "d", "[]", "range(2)", "u", "ml"])
                tail = self.pick(["", "{{ loop.index }}", "{{ i }}", "{% if loop.last %}L{% endif %}"])
                parts.append(f"{o()} for i in {seq}{self.pick(['', ' if i'])} {c()}{self.block(depth + 1)}{tail}"
                             f"{o()} endfor {c()}")
            elif r < 0.82:
                parts.append(f"{o()} set {self.pick(['x', 'z', 'ns.a'])} = {self.value()} {c()}")
            elif r < 0.88:
                parts.append(self.pick(["{#", "{#-", "{#+"]) + self.pick([" c ", "", "\n"]) +
                             self.pick(["#}", "-#}", "+#}"]))
            elif r < 0.93:
                parts.append(f"{o()} raw {c()}{self.pick(TEXT)}{{{{ x }}}}{self.pick(TEXT)}{o()} endraw {c()}")
            else:
                parts.append(f"{o()} macro mac(a, b=2) {c()}{self.block(depth + 1)}{{{{ a }}}}{o()} endmacro {c()}"
                             f"{{{{ mac({self.value()}) }}}}")
        return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--renderer", required=True, help="path of loom-render-template")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--mode", choices=["ws", "expr", "stmt"], default="stmt",
                    help="ws: whitespace control; expr: expressions; stmt: statements and expressions")
    ap.add_argument("--messages", action="store_true", help="also list differing error messages")
    args = ap.parse_args()

    env = compare.make_env()
    gen = Generator(random.Random(args.seed), args.mode)
    outcomes, mismatches, messages = {}, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fuzz.jinja")
        for _ in range(args.count):
            source = "{% set ns = namespace(a=0) %}" + gen.block()
            case = {"messages": [], "add_generation_prompt": False, "bos_token": "", "eos_token": "",
                    "kwargs": VARS}
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(source)
            ref_kind, ref = compare.reference(env, source, case)
            got_kind, got = compare.loom(args.renderer, path, case)
            outcomes[ref_kind] = outcomes.get(ref_kind, 0) + 1
            ok = (got_kind == ref_kind and got == ref) if ref_kind != "error" else got_kind == "error"
            if not ok:
                mismatches += 1
                print(f"MISMATCH {source!r}\n  jinja2 {ref_kind}: {ref[:400]!r}\n  loom   {got_kind}: {got[:400]!r}")
            elif ref_kind == "error" and args.messages:
                want = ref.split(": ", 1)[-1]
                have = re.sub(r"^line \d+(, column \d+)?: ", "", got)
                if want != have:
                    messages += 1
                    print(f"MESSAGE {source!r}\n  jinja2: {ref[:300]}\n  loom:   {got[:300]}")
    print(f"{args.count} templates (seed {args.seed}, mode {args.mode}): {mismatches} mismatches; "
          f"jinja2 outcomes {outcomes}" + (f"; {messages} differing error messages" if args.messages else ""))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
