// JSON Schema compiler: every supported keyword accepts the JSON it should and rejects the
// JSON it should not (whole-text acceptance of byte strings); refusals name the keyword and
// its JSON pointer.
#include <catch2/catch.hpp>

#include <string>

#include "grammar/compile.hpp"

using namespace loom::grammar;

namespace {

struct Case {
    Grammar g;
    explicit Case(const std::string& schema, JsonOptions o = {}) : g(compile_json_schema(schema, o)) {}
    bool operator()(const std::string& text) const { return g.accepts(text); }
};

void refused(const std::string& schema, const std::string& pointer, const std::string& keyword) {
    try {
        compile_json_schema(schema);
        FAIL("accepted " << schema);
    } catch (const SchemaError& e) {
        INFO(e.what());
        CHECK(e.pointer() == pointer);
        CHECK(e.keyword() == keyword);
        CHECK(std::string(e.what()).find(keyword) != std::string::npos);
    }
}

}  // namespace

TEST_CASE("json schema: primitive types and type lists", "[grammar]") {
    Case s(R"({"type": "string"})");
    CHECK(s(R"("hello")"));
    CHECK(s(R"("esc \" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00")"));
    CHECK(s("\"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\""));
    CHECK_FALSE(s("\"a\nb\""));          // raw control character
    CHECK_FALSE(s(R"("\x")"));           // bad escape
    CHECK_FALSE(s(R"("\ud83d")"));       // lone surrogate escape
    CHECK_FALSE(s("\"\xC3\""));          // truncated UTF-8
    CHECK_FALSE(s("\"\xED\xA0\x80\""));  // encoded surrogate
    CHECK_FALSE(s("hello"));

    Case n(R"({"type": "number"})");
    for (const char* ok : {"0", "-0", "12", "-3.25", "1e10", "2E-3", "0.5e+2"}) CHECK(n(ok));
    for (const char* bad : {"01", "+1", ".5", "1.", "1e", "--1", "NaN", "1e100"}) CHECK_FALSE(n(bad));

    Case i(R"({"type": "integer"})");
    CHECK(i("-42"));
    CHECK_FALSE(i("4.0"));
    CHECK_FALSE(i("1e3"));

    Case b(R"({"type": "boolean"})");
    CHECK(b("true"));
    CHECK(b("false"));
    CHECK_FALSE(b("True"));
    CHECK(Case(R"({"type": "null"})")("null"));

    Case opt(R"({"type": ["string", "null"]})");
    CHECK(opt(R"("x")"));
    CHECK(opt("null"));
    CHECK_FALSE(opt("1"));

    Case any("{}");
    for (const char* ok : {"1", "\"s\"", "[1,{\"a\":[null]}]", "{}", "true"}) CHECK(any(ok));
    CHECK(Case("true")("[false]"));
    CHECK_THROWS_AS(compile_json_schema("false"), GrammarError);  // matches no text
}

TEST_CASE("json schema: properties in order, required, optional, additionalProperties", "[grammar]") {
    Case p(R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
              "tag": {"type": "string"}}, "required": ["name", "age"]})");
    CHECK(p(R"({"name":"a","age":3})"));
    CHECK(p(R"({"name":"a","age":3,"tag":"t"})"));
    CHECK(p("{\n  \"name\": \"a\",\n  \"age\": 3\n}"));
    CHECK_FALSE(p(R"({"age":3,"name":"a"})"));        // schema order
    CHECK_FALSE(p(R"({"name":"a"})"));                // required missing
    CHECK_FALSE(p(R"({"name":"a","age":3,"x":1})"));  // properties given: no other keys
    CHECK_FALSE(p(R"({"name":"a","age":3,})"));
    CHECK_FALSE(p(R"({"name":"a","age":"3"})"));

    Case all_opt(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}})");
    for (const char* ok :
         {"{}", R"({"a":1})", R"({"b":1})", R"({"c":1})", R"({"a":1,"c":2})", R"({"a":1,"b":2,"c":3})"})
        CHECK(all_opt(ok));
    CHECK_FALSE(all_opt(R"({,"a":1})"));
    CHECK_FALSE(all_opt(R"({"b":1,"a":2})"));

    Case closed(R"({"type": "object", "additionalProperties": false})");
    CHECK(closed("{}"));
    CHECK_FALSE(closed(R"({"a":1})"));

    Case open(R"({"type": "object"})");
    CHECK(open(R"({"a":{"b":[1,"x",null]},"c":true})"));

    Case extra(R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                  "additionalProperties": {"type": "string"}})");
    CHECK(extra(R"({"id":1})"));
    CHECK(extra(R"({"id":1,"name":"x","i":"y","idx":"z"})"));
    CHECK_FALSE(extra(R"({"id":1,"name":2})"));  // additional values follow the schema
    CHECK_FALSE(extra(R"({"id":1,"id":"x"})"));  // an additional key is never a listed one

    Case anykey(R"({"properties": {"a": {"type": "null"}}, "additionalProperties": true})");
    CHECK(anykey(R"({"a":null,"b":[1]})"));
    CHECK(anykey(R"({"b":[1]})"));
    CHECK_FALSE(anykey(R"({"b":[1],"a":null})"));  // listed properties come first

    Case strict(R"({"type": "object", "properties": {"k\"ey": {"type": "boolean"}}, "required": ["k\"ey"],
                   "additionalProperties": false})");
    CHECK(strict(R"({"k\"ey":true})"));
}

TEST_CASE("json schema: enum, const and anyOf", "[grammar]") {
    Case e(R"({"enum": ["red", "green", 3, null, {"a": [1, 2.5]}, "é\n"]})");
    CHECK(e(R"("red")"));
    CHECK(e("3"));
    CHECK(e("null"));
    CHECK(e(R"({"a":[1,2.5]})"));
    CHECK(e("\"\xC3\xA9\\n\""));
    CHECK_FALSE(e(R"("blue")"));
    CHECK_FALSE(e("4"));

    Case typed(R"({"type": "string", "enum": ["a", 1]})");
    CHECK(typed(R"("a")"));
    CHECK_FALSE(typed("1"));

    Case c(R"({"const": "fixed"})");
    CHECK(c(R"("fixed")"));
    CHECK_FALSE(c(R"("other")"));

    Case a(R"({"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 2}], "title": "t"})");
    CHECK(a("12"));
    CHECK(a(R"("ab")"));
    CHECK_FALSE(a("9"));
    CHECK_FALSE(a(R"("abc")"));
}

TEST_CASE("json schema: arrays with items, prefixItems, minItems, maxItems", "[grammar]") {
    Case a(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
    CHECK(a("[1,2]"));
    CHECK(a("[1, 2, 3]"));
    CHECK_FALSE(a("[1]"));
    CHECK_FALSE(a("[1,2,3,4]"));
    CHECK_FALSE(a("[1,\"2\"]"));
    CHECK_FALSE(a("[1,2,]"));

    Case any(R"({"type": "array"})");
    CHECK(any("[]"));
    CHECK(any("[ 1, [ ], { } ]"));

    Case t(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})");
    CHECK(t("[]"));
    CHECK(t(R"(["a"])"));
    CHECK(t(R"(["a",1])"));
    CHECK_FALSE(t(R"(["a",1,2])"));
    CHECK_FALSE(t("[1]"));

    Case tr(R"({"prefixItems": [{"const": 0}], "items": {"type": "boolean"}, "minItems": 2})");
    CHECK(tr("[0,true]"));
    CHECK(tr("[0,true,false]"));
    CHECK_FALSE(tr("[0]"));
    CHECK_FALSE(tr("[true,true]"));

    Case none(R"({"type": "array", "maxItems": 0})");
    CHECK(none("[]"));
    CHECK_FALSE(none("[1]"));
}

TEST_CASE("json schema: $ref, $defs and recursion", "[grammar]") {
    Case d(R"({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
              "type": "array", "items": {"$ref": "#/$defs/pt"}})");
    CHECK(d(R"([{"x":1},{"x":2.5}])"));
    CHECK_FALSE(d(R"([{"y":1}])"));

    Case tree(R"({"type": "object", "properties": {"v": {"type": "integer"},
                 "kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["v", "kids"]})");
    CHECK(tree(R"({"v":1,"kids":[]})"));
    CHECK(tree(R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4,"kids":[]}]})"));
    CHECK_FALSE(tree(R"({"v":1,"kids":[{"v":2}]})"));

    Case list(
        R"({"definitions": {"node": {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/definitions/node"}, {"type": "null"}]}},
                 "required": ["next"]}}, "$ref": "#/definitions/node"})");
    CHECK(list(R"({"next":{"next":{"next":null}}})"));
    CHECK_FALSE(list(R"({"next":{}})"));

    refused(R"({"$ref": "http://example.com/s.json"})", "", "$ref");
    refused(R"({"$ref": "#/$defs/missing"})", "", "$ref");
    refused(R"({"$ref": "#/$defs/a", "type": "string", "$defs": {"a": {}}})", "", "type");
}

TEST_CASE("json schema: string length, pattern and formats", "[grammar]") {
    Case len(R"({"type": "string", "minLength": 2, "maxLength": 3})");
    CHECK(len(R"("ab")"));
    CHECK(len("\"\xC3\xA9\xC3\xA9\xC3\xA9\""));  // three characters, six bytes
    CHECK(len(R"("a\nb")"));                     // an escape is one character
    CHECK(len(R"("\ud83d\ude00x")"));            // a surrogate pair is one character
    CHECK_FALSE(len(R"("a")"));
    CHECK_FALSE(len(R"("abcd")"));

    Case pat(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"})");
    CHECK(pat(R"("AB-12")"));
    CHECK_FALSE(pat(R"("AB-")"));
    CHECK_FALSE(pat(R"("xAB-1")"));
    Case search(R"({"type": "string", "pattern": "a\"b"})");
    CHECK(search(R"("xx a\"b yy")"));  // unanchored: a search; the quote is escaped
    CHECK_FALSE(search(R"("ab")"));

    struct F {
        const char* name;
        std::vector<const char*> ok, bad;
    };
    const std::vector<F> formats = {
        {"date",
         {"2024-02-29", "2023-12-31", "0001-01-01"},
         {"2023-02-29", "2024-13-01", "2024-04-31", "0000-01-01", "24-01-01"}},
        {"time", {"23:59:59Z", "00:00:00.123+05:30"}, {"24:00:00Z", "12:00:00", "12:60:00Z"}},
        {"date-time",
         {"2024-05-06T07:08:09Z", "1999-12-31T23:59:59.5-08:00"},
         {"2024-05-06 07:08:09Z", "2024-05-06T07:08Z"}},
        {"duration", {"P1D", "PT1H30M", "P1Y2M3DT4H5M6S", "P3W"}, {"P", "PT", "1D", "P1H", "P1W2D"}},
        {"email", {"a.b+c@example.com", "x@y"}, {"@example.com", "a..b@x.com", "a@", "a b@x.com"}},
        {"hostname", {"example.com", "a-b.c1", "localhost"}, {"-a.com", "a-.com", "a..b", ""}},
        {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "01.2.3.4", "1.2.3"}},
        {"ipv6",
         {"::", "::1", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "fe80::", "1::2:3"},
         {"1:2:3:4:5:6:7:8:9", "1::2::3", ":1", "12345::"}},
        {"uuid",
         {"123e4567-e89b-12d3-a456-426614174000"},
         {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
    };
    for (const F& f : formats) {
        Case c(std::string(R"({"type": "string", "format": ")") + f.name + "\"}");
        for (const char* ok : f.ok) {
            INFO(f.name << " accepts " << ok);
            CHECK(c(std::string(1, '"').append(ok).append(1, '"')));
        }
        for (const char* bad : f.bad) {
            INFO(f.name << " rejects " << bad);
            CHECK_FALSE(c(std::string(1, '"').append(bad).append(1, '"')));
        }
    }
    refused(R"({"type": "string", "format": "uri"})", "", "format");
    refused(R"({"type": "string", "pattern": "(a)\\1"})", "", "pattern");
    refused(R"({"type": "string", "pattern": "a", "maxLength": 3})", "", "maxLength");
}

TEST_CASE("json schema: numeric bounds and multipleOf are exact", "[grammar]") {
    Case r(R"({"type": "integer", "minimum": -5, "maximum": 120})");
    for (int v = -30; v <= 300; ++v) {
        INFO(v);
        CHECK(r(std::to_string(v)) == (v >= -5 && v <= 120));
    }
    CHECK_FALSE(r("-0"));
    CHECK_FALSE(r("007"));

    Case ex(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10, "multipleOf": 3})");
    for (int v = -10; v <= 20; ++v) {
        INFO(v);
        CHECK(ex(std::to_string(v)) == (v > 0 && v < 10 && v % 3 == 0));
    }

    Case d(R"({"type": "number", "minimum": -1.5, "exclusiveMaximum": 2.25})");
    for (const char* ok : {"-1.5", "-1.49", "0", "2.249999", "2.2", "-1", "1.50"}) {
        INFO(ok);
        CHECK(d(ok));
    }
    for (const char* bad : {"-1.51", "-2", "2.25", "2.250", "3", "1e0"}) {
        INFO(bad);
        CHECK_FALSE(d(bad));
    }

    Case cents(R"({"type": "number", "multipleOf": 0.25, "minimum": 0, "maximum": 1})");
    for (const char* ok : {"0", "0.25", "0.5", "0.75", "1", "1.00"}) CHECK(cents(ok));
    for (const char* bad : {"0.1", "1.25", "-0.25", "0.255"}) CHECK_FALSE(cents(bad));

    Case draft4(R"({"type": "number", "minimum": 0, "exclusiveMinimum": true})");
    CHECK_FALSE(draft4("0"));
    CHECK(draft4("0.001"));

    CHECK_THROWS_AS(compile_json_schema(R"({"type": "integer", "minimum": 5, "maximum": 3})"), SchemaError);
    refused(R"({"type": "number", "multipleOf": 0})", "", "multipleOf");
    refused(R"({"type": "number", "minimum": "1"})", "", "minimum");
}

TEST_CASE("json schema: whitespace is one space or one line break and an indentation", "[grammar]") {
    Case s(R"({"type": "object", "properties": {"a": {"type": "array"}, "b": {"type": "integer"}}})");
    // Compact, one space, and pretty-printed (two- and four-space indents, tabs, CRLF) all fit.
    CHECK(s(R"({"a":[1,2],"b":3})"));
    CHECK(s(R"({ "a": [ 1, 2 ], "b": 3 })"));
    CHECK(s("{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": 3\n}"));
    CHECK(s("{\r\n\t\"a\": [\r\n\t\t1]}"));
    const std::string i16(16, ' '), i17(17, ' ');
    CHECK(s("{\n" + i16 + "\"a\": []}"));
    CHECK_FALSE(s("{\n" + i17 + "\"a\": []}"));  // at most 16 spaces or tabs of indentation
    // What a small model writes when whitespace is free: a space then a line break, runs
    // of line breaks, two spaces; all refused, so the JSON goes on.
    CHECK_FALSE(s("{ \n\"a\": []}"));
    CHECK_FALSE(s("{\"a\": \n[]}"));
    CHECK_FALSE(s("{\"a\":\n\n[]}"));
    CHECK_FALSE(s("{\"a\":  []}"));
    CHECK_FALSE(s("{\"a\":[1,\t2]}"));  // a tab only as indentation
    CHECK_FALSE(s("{\"a\":[]}\n"));     // none before or after the top-level value
    CHECK_FALSE(s(" {\"a\":[]}"));
    CHECK_FALSE(s(R"({"a" :[]})"));     // none before ':' ...
    CHECK_FALSE(s(R"({"a":[1 ,2]})"));  // ... or ','
    CHECK(s.g.accepts_prefix("{\"a\": "));
    CHECK_FALSE(s.g.accepts_prefix("{\"a\":  "));
    // The same holds for json_object.
    const Grammar o = compile_json_object();
    CHECK(o.accepts("{\n  \"x\": {\"y\": [1, 2]}\n}"));
    CHECK_FALSE(o.accepts("{ \n\"x\": 1}"));
    CHECK_FALSE(o.accepts_prefix("{\"x\":\n\n"));

    JsonOptions compact;
    compact.compact = true;
    Case c(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})", compact);
    CHECK(c(R"({"a":1})"));
    CHECK_FALSE(c(R"({"a": 1})"));
}

TEST_CASE("json_object accepts any object and nothing else", "[grammar]") {
    const Grammar g = compile_json_object();
    CHECK(g.accepts("{}"));
    CHECK(g.accepts(R"({"a":{"b":{"c":[1,2,{"d":null}]}},"e":"\u0041"})"));
    CHECK_FALSE(g.accepts("[]"));
    CHECK_FALSE(g.accepts("\"x\""));
    CHECK_FALSE(g.accepts(R"({"a":})"));
    CHECK_FALSE(g.accepts(R"({"a":1,})"));
    CHECK(g.accepts_prefix(R"({"a":[[[[[[)"));
}

TEST_CASE("json schema: keywords outside the subset are refused by name and pointer", "[grammar]") {
    refused(R"({"oneOf": [{"type": "string"}]})", "", "oneOf");
    refused(R"({"not": {"type": "string"}})", "", "not");
    refused(R"({"type": "object", "properties": {"a": {"if": {}}}})", "/properties/a", "if");
    refused(R"({"type": "object", "patternProperties": {"^a": {}}})", "", "patternProperties");
    refused(R"({"type": "array", "uniqueItems": true})", "", "uniqueItems");
    refused(R"({"type": "array", "items": {"contains": {}}})", "/items", "contains");
    refused(R"({"allOf": [{}, {}]})", "", "allOf");
    refused(R"({"anyOf": [{"type": "string"}], "type": "string"})", "", "type");
    refused(R"({"type": "object", "properties": {"a/b": {"minProperties": 1}}})", "/properties/a~1b", "minProperties");
    refused(R"({"type": "object", "properties": {}, "required": ["x"]})", "", "required");
    refused(R"({"type": "strings"})", "", "type");
    refused(R"({"type": "string", "nullable": true})", "", "nullable");
    refused(R"({"$defs": {"a": {"type": "integer", "maximum": {}}}, "$ref": "#/$defs/a"})", "/$defs/a", "maximum");
    // Not JSON at all: no keyword, the offset in the message.
    try {
        compile_json_schema("{\"type\": ");
        FAIL("accepted");
    } catch (const SchemaError& e) {
        CHECK(e.keyword().empty());
        CHECK(std::string(e.what()).find("not valid JSON") != std::string::npos);
    }
    // Annotations are fine.
    CHECK(
        Case(R"({"title": "T", "description": "d", "default": 1, "examples": [1], "$schema": "x", "type": "integer"})")(
            "1"));
}

TEST_CASE("json schema: hostile sizes are refused or handled without deep recursion", "[grammar]") {
    // 200 optional properties: the member tails are shared, not copied per member; 2000
    // required ones are linear; runs of more than 256 optional ones are refused.
    auto props = [](int n, bool required) {
        std::string p = "{\"type\":\"object\",\"properties\":{", r;
        for (int k = 0; k < n; ++k) {
            if (k) p += ',', r += ',';
            p.append("\"p").append(std::to_string(k)).append("\":{\"type\":\"integer\"}");
            r.append("\"p").append(std::to_string(k)).append("\"");
        }
        p += '}';
        if (required) p.append(",\"required\":[").append(r).append("]");
        return p + '}';
    };
    Case many(props(200, false));
    CHECK(many("{}"));
    CHECK(many(R"({"p7":1,"p199":2})"));
    CHECK_FALSE(many(R"({"p199":2,"p7":1})"));
    Case all(props(2000, true));
    std::string doc = "{";
    for (int k = 0; k < 2000; ++k)
        doc.append(k ? ",\"p" : "\"p").append(std::to_string(k)).append("\":").append(std::to_string(k));
    CHECK(all(doc + "}"));
    CHECK_FALSE(all(doc + ",\"p0\":1}"));
    refused(props(300, false), "", "required");

    // A chain of 300 references counts as nesting.
    std::string defs;
    for (int k = 0; k < 300; ++k) {
        if (k) defs += ',';
        defs.append("\"d")
            .append(std::to_string(k))
            .append("\":{\"$ref\":\"#/$defs/d")
            .append(std::to_string(k + 1))
            .append("\"}");
    }
    defs += ",\"d300\":{\"type\":\"null\"}";
    try {
        compile_json_schema(std::string("{\"$defs\":{").append(defs).append("},\"$ref\":\"#/$defs/d0\"}"));
        FAIL("accepted");
    } catch (const SchemaError& e) { CHECK(std::string(e.what()).find("nested deeper") != std::string::npos); }
    const std::string deep = std::string(1000, '[') + std::string(1000, ']');
    CHECK_THROWS_AS(compile_json_schema(std::string("{\"enum\":[").append(deep).append("]}")), SchemaError);
    CHECK_THROWS_WITH(compile_regex(std::string(200, '(').append("a").append(200, ')')),
                      Catch::Contains("nested deeper"));
    refused(std::string("{\"type\":\"object\",\"properties\":{\"")
                .append(300, 'k')
                .append("\":{}},\"additionalProperties\":true}"),
            "", "additionalProperties");
}
