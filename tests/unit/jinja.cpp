// loom_jinja: rendering, whitespace control, errors and limits (expected strings are
// what Python's Jinja2 3.1 renders in the reference configuration).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <rapidjson/document.h>

#include "gateway/chat_template.hpp"
#include "jinja/jinja.hpp"

using loom::jinja::Limits;
using loom::jinja::Template;
using loom::jinja::TemplateError;
using loom::jinja::Value;

namespace {

Value parse_json(const std::string& json) {
    rapidjson::Document d;
    d.Parse(json.c_str());
    REQUIRE_FALSE(d.HasParseError());
    return loom::jinja::from_json(d);
}

std::string render(const std::string& src, const std::string& json = "{}", const Limits& limits = Limits()) {
    return Template::parse(src).render(parse_json(json), limits);
}

// The message of the TemplateError that parsing or rendering throws ("" if none).
std::string error_of(const std::string& src, const std::string& json = "{}", const Limits& limits = Limits()) {
    try {
        render(src, json, limits);
    } catch (const TemplateError& e) { return e.what(); }
    return "";
}

}  // namespace

TEST_CASE("expressions follow Python semantics") {
    CHECK(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} "
                 "{{ 2 ** -1 }}") == "7 9 3 -4 2 3.5 1024 0.5");
    CHECK(
        render(
            "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 1.0 }} {{ 1 / 3 }} {{ 3 * 1.0 }} {{ true + 1 }}") ==
        "0.30000000000000004 1e+16 1000000000000000.0 1.5e-05 1.0 0.3333333333333333 3.0 2");
    CHECK(render("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 'x' + 'y' }}") ==
          "a1NoneTrue abab [1, 2] xy");
    CHECK(render("{{ 1 == 1.0 }} {{ 1 < 2 < 3 }} {{ [1, 2] < [1, 3] }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 'k' "
                 "in {'k': 1} }}") == "True True True True True True");
    CHECK(render("{{ 0 or 'x' }} {{ 1 and [] }} {{ not none }} {{ 'y' if false else 'n' }}|{{ 'y' if false }}|") ==
          "x [] True n||");
    CHECK(render("{{ [1, 'a', none, true, 1.5, {'k': (1,)}] }} {{ (1, 2) }} {{ \"it's\" ~ ['it\\'s'] }}") ==
          "[1, 'a', None, True, 1.5, {'k': (1,)}] (1, 2) it's[\"it's\"]");
    CHECK(render("{{ '%s=%05.1f' % ('pi', 3.14159) }} {{ '{}-{:>3}'.format('a', 'b') }}") == "pi=003.1 a-  b");
    CHECK(render("{{ x.a }} {{ x['b'][1] }} {{ x.b[-1] }} {{ x.missing }}|{{ x.b[1:] }} {{ 'héllo'[1:3] }} {{ "
                 "'abc'[::-1] }}",
                 "{\"x\": {\"a\": 1, \"b\": [1, 2, 3]}}") == "1 2 3 |[2, 3] él cba");
}

TEST_CASE("filters") {
    CHECK(render("{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'Hello World' | lower }}|{{ 'hello' | upper }}|{{ "
                 "'hello wORLD' | title }}|{{ 'hELLO' | capitalize }}") == "x|a|hello world|HELLO|Hello World|Hello");
    CHECK(
        render("{{ [1, 2, 3] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }} {{ undefined_var | length }}") ==
        "3 5 1 0");
    CHECK(
        render("{{ missing | default('d') }} {{ none | default('d') }} {{ '' | d('e', true) }} {{ 0 | default(1) }}") ==
        "d None e 0");
    CHECK(render("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'a'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ users | "
                 "sort(attribute='age') | map(attribute='name') | join(',') }}",
                 "{\"users\": [{\"name\": \"x\", \"age\": 30}, {\"name\": \"y\", \"age\": 20}]}") ==
          "[1, 2, 3] ['A', 'a', 'b'] [3, 2, 1] y,x");
    CHECK(render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | "
                 "rejectattr('role', 'eq', 'user') | list | length }}",
                 "{\"msgs\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"bot\", \"content\": \"b\"}, "
                 "{\"role\": \"user\", \"content\": \"c\"}]}") == "['a', 'c'] 1");
    CHECK(render("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('divisibleby', 2) | list }} {{ "
                 "['a', 'b'] | map('upper') | join('-') }}") == "[1, 3] [1, 3] A-B");
    CHECK(render("{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ [3, 1] | min }} {{ [3, 1] | max }} {{ [1, 2, 3] | "
                 "sum }} {{ [1, 1, 2] | unique | list }} {{ [1, 2] | reverse | list }}") == "1 3 1 3 6 [1, 2] [2, 1]");
    CHECK(render("{{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | items | list }} {{ 'ab' | list }}") ==
          "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)] ['a', 'b']");
    CHECK(render("{{ '42' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.5 | "
                 "round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(method='ceil') }}") == "42 7 3 2.5 3 2.0 3.14 3.0");
    CHECK(render("{{ 1 | string }} {{ [1] | string }} {{ 'a\\nb' | indent(2, true) }} {{ 'a b c' | wordcount }} {{ 'x' "
                 "| center(5) }}|") == "1 [1]   a\n  b 3   x  |");
    CHECK(render("{{ 'aaa' | replace('a', 'b', 2) }} {{ '<p>x</p>' | striptags }} {{ '<&>' | e }} {{ 'a b c d e f g' | "
                 "truncate(9) }}") == "bba x &lt;&amp;&gt; a b c d e f g");
    CHECK(render("{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3, 4, 5] | slice(2) | list }} {{ items | "
                 "groupby('t') | map(attribute='grouper') | list }}",
                 "{\"items\": [{\"t\": \"b\"}, {\"t\": \"a\"}, {\"t\": \"b\"}]}") ==
          "[[1, 2], [3, 4], [5]] [[1, 2, 3], [4, 5]] ['a', 'b']");
}

TEST_CASE("tojson matches json.dumps(ensure_ascii=False)") {
    CHECK(render("{{ v | tojson }}", "{\"v\": {\"b\": [1, 2.5, null, true], \"a\": \"é\\\"\\n<>&\"}}") ==
          "{\"b\": [1, 2.5, null, true], \"a\": \"é\\\"\\n<>&\"}");
    CHECK(render("{{ v | tojson(indent=2) }}", "{\"v\": {\"b\": [1, {}], \"a\": []}}") ==
          "{\n  \"b\": [\n    1,\n    {}\n  ],\n  \"a\": []\n}");
    CHECK(render("{{ v | tojson(indent=4) }}",
                 "{\"v\": {\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"x\": {\"type\": "
                 "\"integer\"}}}}}") ==
          "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        \"parameters\": {\n  "
          "          \"x\": {\n                \"type\": \"integer\"\n            }\n        }\n    }\n}");
    CHECK(render("{{ v | tojson(sort_keys=true) }} {{ 'é' | tojson(ensure_ascii=true) }} {{ 1e20 | tojson }} {{ 1.0 | "
                 "tojson }}",
                 "{\"v\": {\"b\": 1, \"a\": 2}}") == "{\"a\": 2, \"b\": 1} \"\\u00e9\" 1e+20 1.0");
}

TEST_CASE("tests") {
    CHECK(render("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ 'a' is string }} {{ "
                 "1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }}",
                 "{\"x\": 1}") == "True False True True True True True True True");
    CHECK(render("{{ {} is mapping }} {{ [] is iterable }} {{ 1 is iterable }} {{ 'a' is sequence }} {{ 3 is odd }} {{ "
                 "4 is even }} {{ 9 is divisibleby 3 }} {{ 'ab' is lower }} {{ 'AB' is upper }}") ==
          "True True False True True True True True True");
    CHECK(render("{{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is ge 3 }} {{ 2 is in [1, "
                 "2] }} {{ none is sameas none }} {{ true is true }} {{ 1 is true }} {{ range is callable }}") ==
          "True False True True False True True True False True");
    CHECK(render("{{ x is not none }} {{ not x is defined }} {{ 'upper' is filter }} {{ 'odd' is test }}",
                 "{\"x\": 0}") == "True False True True");
}

TEST_CASE("python string, list and dict methods") {
    CHECK(render("{{ '  a  '.strip() }}|{{ 'xax'.strip('x') }}|{{ '\\n\\nb'.lstrip('\\n') }}|{{ 'a  '.rstrip() }}|") ==
          "a|a|b|a|");
    CHECK(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', "
                 "1) }}") == "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c']");
    CHECK(render("{{ s.startswith('<tool') }} {{ s.endswith('>') }} {{ s.replace('tool', 'x') }} {{ s.find('_') }} {{ "
                 "s.count('o') }} {{ s.upper() }}",
                 "{\"s\": \"<tool_response>\"}") == "True True <x_response> 5 3 <TOOL_RESPONSE>");
    CHECK(render("{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ ', '.join(['a', 'b']) }} {{ "
                 "'a</think>b'.split('</think>')[-1] }}") == "Hello World Hello a, b b");
    CHECK(render("{{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} {% for k, v "
                 "in d.items() %}{{ k }}={{ v }};{% endfor %}",
                 "{\"d\": {\"a\": 1, \"b\": 2}}") == "1 dflt ['a', 'b'] [1, 2] a=1;b=2;");
    CHECK(render("{{ l.index(2) }} {{ l.count(2) }} {{ l.pop() }} {{ l }}", "{\"l\": [1, 2, 2]}") == "1 2 2 [1, 2]");
}

TEST_CASE("whitespace control like trim_blocks and lstrip_blocks") {
    CHECK(render("<ul>\n  {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n") ==
          "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");
    CHECK(render("a  {%- if true -%}  b  {%- endif -%}  c") == "abc");
    CHECK(render("a\n  {%+ if true %}b{% endif +%}\nc") == "a\n  b\nc");
    CHECK(render("x\n  {# comment #}\ny {#- trimmed -#} z") == "x\nyz");
    CHECK(render("{{- ' a ' -}}  \n  {{ 'b' }}  {{- 'c' }}") == " a bc");
    CHECK(render("  {% raw %}{{ not parsed }}{% endraw %}\n{%- raw -%}  {% x %}  {%- endraw %}") ==
          "{{ not parsed }}{% x %}");
    CHECK(render("line\r\nwindows\r\n{% if true %}\r\nyes\r\n{% endif %}\r\n") == "line\nwindows\nyes\n");
}

TEST_CASE("loops") {
    CHECK(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ "
                 "loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}") ==
          "1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 ");
    CHECK(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{{ loop.cycle('odd', 'even') "
                 "}} {% endfor %}") == "<1>2;odd 1<2>3;even 2<3>;odd ");
    CHECK(render("{% for x in range(10) if x is odd %}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}") ==
          "1,3,5,7,9");
    CHECK(render("{% for x in [] %}never{% else %}empty{% endfor %} {% for k, v in {'a': 1}.items() %}{{ k }}{{ v }}{% "
                 "endfor %}") == "empty a1");
    CHECK(render("{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif "
                 "%}{{ x }}{% endfor %}") == "023");
    CHECK(render("{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}") == "12");
    CHECK(render(
              "{% for n in tree recursive %}{{ n.name }}{% if n.kids %}({{ loop(n.kids) }}){% endif %}{% endfor %}",
              "{\"tree\": [{\"name\": \"a\", \"kids\": [{\"name\": \"b\"}, {\"name\": \"c\"}]}, {\"name\": \"d\"}]}") ==
          "a(bc)d");
    CHECK(render("{% for m in messages[::-1] %}{{ m }}{% endfor %} {% for m in messages %}{% set outer = loop %}{% for "
                 "c in 'xy' %}{{ outer.index }}{{ c }}{% endfor %}{% endfor %}",
                 "{\"messages\": [1, 2, 3]}") == "321 1x1y2x2y3x3y");
}

TEST_CASE("macros, call blocks, namespaces and scoping") {
    CHECK(render("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} "
                 "{{ greet('Bo', greeting='Hi') }}") == "Hello, Ann! Hi, Bo!");
    CHECK(render("{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}") ==
          "1|(2,)|{'k': 3}");
    CHECK(render("{% macro wrap(tag) %}<{{ tag }}>{{ caller('x') }}</{{ tag }}>{% endmacro %}{% call(v) wrap('b') "
                 "%}[{{ v }}]{% endcall %}") == "<b>[x]</b>");
    CHECK(render("{% set ns = namespace(n=0, seen=[]) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% set ns.seen "
                 "= ns.seen + [i] %}{% endfor %}{{ ns.n }} {{ ns.seen }}") == "3 [0, 1, 2]");
    CHECK(render("{% set x = 'outer' %}{% for i in [1] %}{% set x = 'inner' %}{{ x }}{% endfor %} {{ x }}") ==
          "inner outer");
    CHECK(render("{% for i in [1] %}[{{ x }}]{% endfor %}{% set x = 'late' %}{{ x }}", "{\"x\": \"context\"}") ==
          "[]late");
    CHECK(render("{% set block %}Hi {{ 1 + 1 }}{% endset %}{{ block | upper }} {% filter upper %}shout{% endfilter %} "
                 "{% with a = 2 %}{{ a * 3 }}{% endwith %}") == "HI 2 SHOUT 6");
    CHECK(render("{% set a, b = 1, 2 %}{{ a }}{{ b }} {{ dict(k=1) }} {% set c = cycler('x', 'y') %}{{ c.next() }}{{ "
                 "c.next() }}{{ c.next() }}") == "12 {'k': 1} xyx");
}
TEST_CASE("syntax errors say what and where") {
    CHECK(error_of("{{ 1 + }}") == "line 1, column 8: unexpected 'end of print statement'");
    CHECK(error_of("a\n{% for x in y %}\n{{ x }}") ==
          "line 3, column 8: Unexpected end of template. Jinja was looking for the following tags: 'endfor' or "
          "'else'. The innermost block that needs to be closed is 'for'.");
    CHECK(error_of("{% if x %}{% endfor %}") ==
          "line 1, column 14: Encountered unknown tag 'endfor'. Jinja was looking for the following tags: 'elif' or "
          "'else' or 'endif'. The innermost block that needs to be closed is 'if'.");
    CHECK(error_of("\n\n  {{ x | nosuch }}") == "line 3, column 10: No filter named 'nosuch'.");
    CHECK(error_of("{{ x is nosuch }}") == "line 1, column 9: No test named 'nosuch'.");
    CHECK(error_of("{% break %}") == "line 1, column 4: 'break' outside loop");
    CHECK(error_of("{{ 'open }}") == "line 1, column 4: unexpected char \"'\" at 3");
    CHECK(error_of("{# never closed") == "line 1, column 1: Missing end of comment tag");
    // Unknown filters inside an if are only an error when they run (as in Jinja2).
    CHECK(render("{% if false %}{{ x | nosuch }}{% endif %}ok") == "ok");
}

TEST_CASE("runtime errors carry the template line; raise_exception its message verbatim") {
    CHECK(error_of("ok\n{{ x.y }}") == "line 2: 'x' is undefined");
    CHECK(error_of("{{ d.a.b }}", R"({"d": {}})") == "line 1: 'dict object' has no attribute 'a'");
    CHECK(error_of("\n\n{{ 'a' + 1 }}") == "line 3: can only concatenate str (not \"int\") to str");
    CHECK(error_of("{{ 1 / 0 }}") == "line 1: division by zero");
    CHECK(error_of("{% for x in 5 %}{% endfor %}") == "line 1: 'int' object is not iterable");
    CHECK(error_of("{{ l.append(1) }}", R"({"l": []})") ==
          "line 1: access to attribute 'append' of 'list' object is unsafe.");
    CHECK(error_of("{% set x = 1 %}{% set x.a = 2 %}") == "line 1: cannot assign attribute on non-namespace object");
    CHECK(error_of("{% include 'other.jinja' %}").find("not supported") != std::string::npos);
    try {
        render("line one\n{{ raise_exception('System role not supported') }}");
        FAIL("no exception");
    } catch (const TemplateError& e) {
        CHECK(std::string(e.what()) == "System role not supported");
        CHECK(e.from_raise_exception());
    }
}

TEST_CASE("limits turn runaway templates into TemplateError") {
    Limits quick;  // a smaller step budget keeps the test fast; the default is 10M
    quick.max_steps = 1'000'000;
    // Unbounded macro recursion.
    CHECK(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("recursion") != std::string::npos);
    // Exponential work: each level calls the next twice.
    CHECK(error_of("{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
                   "{}", quick)
              .find("step budget") != std::string::npos);
    // Nested loops over the largest allowed range.
    CHECK(error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "{}", quick)
              .find("step budget") != std::string::npos);
    CHECK(error_of("{{ range(100001) | length }}") ==
          "line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    // Output and string sizes.
    Limits small;
    small.max_output_bytes = 1000;
    CHECK(error_of("{% for i in range(200) %}0123456789{% endfor %}", "{}", small).find("output exceeds") !=
          std::string::npos);
    CHECK(error_of("{{ 'x' * 100000000000 }}").find("size limit") != std::string::npos);
    CHECK(error_of("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
              .find("limit") != std::string::npos);
    // Pathological nesting is rejected while parsing, before anything recurses deeply.
    CHECK(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply") !=
          std::string::npos);
    std::string chain = "{{ 'a'";
    for (int i = 0; i < 3000; ++i) chain += " | upper";
    CHECK(error_of(chain + " }}").find("nested too deeply") != std::string::npos);
    std::string ifs;
    for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
    CHECK(error_of(ifs).find("nested too deeply") != std::string::npos);
    // Values nested a million levels deep are destroyed without deep recursion.
    CHECK(render("{% set ns = namespace(x=[]) %}{% for a in range(10) %}{% for i in range(100000) %}"
                 "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}done") == "done");
    CHECK(error_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                   "{{ ns.x }}")
              .find("recursion depth") != std::string::npos);
    // Containers cannot grow without bound either.
    CHECK(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}{% endfor %}")
              .find("container exceeds") != std::string::npos);
    // Format widths cannot allocate beyond the limits.
    CHECK(error_of("{{ '{:>99999999999}'.format('x') }}").find("size limit") != std::string::npos);
    CHECK(error_of("{{ '%999999999d' % 1 }}").find("too big") != std::string::npos);
    CHECK(error_of("{{ 'x' | center(2 ** 40) }}").find("size limit") != std::string::npos);
    // A reasonable limit still renders normal templates.
    CHECK(render("{% for i in range(1000) %}{% endfor %}done") == "done");
}

TEST_CASE("values convert like Python objects") {
    Value v = parse_json(R"({"a": [1, 2.5, "x", null, true, {"k": []}], "b": 1e100})");
    CHECK(v.to_str() == "{'a': [1, 2.5, 'x', None, True, {'k': []}], 'b': 1e+100}");
    CHECK(v.obj().find("a")->repr() == "[1, 2.5, 'x', None, True, {'k': []}]");
    CHECK(Value("it's").repr() == "\"it's\"");
    CHECK(Value(0.1).to_str() == "0.1");
    CHECK(Value(-0.0).to_str() == "-0.0");
    CHECK(Value().to_str().empty());
    CHECK_FALSE(Value().truthy());
    CHECK(Value::none().to_str() == "None");
    CHECK(loom::jinja::py_equal(Value(1), Value(1.0)));
    CHECK(loom::jinja::py_equal(Value(true), Value(1)));
    CHECK_FALSE(loom::jinja::py_equal(Value::list({Value(1)}), Value::list({Value(1)}, Value::Kind::Tuple)));
    loom::jinja::Object o;
    o.set(Value(1), Value("int"));
    o.set(Value(1.0), Value("float replaces int"));
    o.set(Value(true), Value("bool too"));
    CHECK(o.size() == 1);
    CHECK(o.find(Value(1))->str() == "bool too");
    CHECK(o.entries()[0].first.is_int());  // first key kept, as in Python
    CHECK_THROWS_AS(o.set(Value::list({}), Value(1)), TemplateError);
    // Duplicate JSON keys: last value, first position (json.load).
    CHECK(parse_json(R"({"a": 1, "b": 2, "a": 3})").to_str() == "{'a': 3, 'b': 2}");
}

TEST_CASE("render_chat_template passes transformers' variables") {
    rapidjson::Document in;
    in.Parse(R"({"messages": [{"role": "user", "content": "Hi"}],
                 "tools": [{"type": "function", "function": {"name": "f"}}],
                 "kwargs": {"enable_thinking": false, "bos_token": "ignored"}})");
    const char* tmpl =
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
        "{{ tools | map(attribute='function.name') | list if tools is defined else 'no tools' }}"
        "{{ enable_thinking }}{{ add_generation_prompt }}{{ eos_token }}";
    CHECK(loom::jinja::render_chat_template(tmpl, in["messages"], &in["tools"], true, "<s>", "</s>", &in["kwargs"]) ==
          "<s>[user:Hi]['f']FalseTrue</s>");
    CHECK(loom::jinja::render_chat_template(tmpl, in["messages"], nullptr, false, "", "", nullptr) ==
          "[user:Hi]no toolsFalse");
    // The input is not modified by templates that pop() from lists.
    Template t = Template::parse("{{ messages.pop() }}");
    CHECK(loom::jinja::render_chat_template(t, in["messages"], nullptr, false, "", "", nullptr) ==
          "{'role': 'user', 'content': 'Hi'}");
    CHECK(in["messages"].Size() == 1);
}

TEST_CASE("strftime_now honours the LOOM_FAKE_TIME test hook") {
    const char* old_tz = std::getenv("TZ");
    std::string saved_tz = old_tz ? old_tz : "";
    setenv("TZ", "UTC", 1);
    tzset();
    setenv("LOOM_FAKE_TIME", "1721952000", 1);
    CHECK(render("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }}") ==
          "26 Jul 2024 2024-07-26 00:00");
    unsetenv("LOOM_FAKE_TIME");
    CHECK(render("{{ strftime_now('%Y') | length }}") == "4");
    if (old_tz) setenv("TZ", saved_tz.c_str(), 1);
    else unsetenv("TZ");
    tzset();
}

TEST_CASE("a parsed template renders concurrently") {
    Template t = Template::parse(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m %}{% endfor %}{{ ns.n }}");
    const Value ctx = parse_json(R"({"messages": [1, 2, 3, 4]})");
    std::vector<std::thread> threads;
    std::vector<std::string> out(8);
    for (int i = 0; i < 8; ++i)
        threads.emplace_back([&, i] {
            for (int k = 0; k < 50; ++k) out[i] = t.render(ctx);
        });
    for (auto& th : threads) th.join();
    for (const auto& s : out) CHECK(s == "10");
}
