// Grammar core: code point sets, UTF-8 ranges, regex syntax, choices, and the rule compiler
// (recursion, left recursion, empty languages), checked by whole-text acceptance.
#include <catch2/catch.hpp>

#include <string>

#include "grammar/compile.hpp"
#include "grammar/regex.hpp"

using namespace loom::grammar;

namespace {

std::string utf8(uint32_t cp) {
    std::string s;
    append_utf8(s, cp);
    return s;
}

bool full(const std::string& re, const std::string& text) { return compile_regex(re).accepts(text); }

}  // namespace

TEST_CASE("CharSet keeps disjoint sorted ranges and never holds surrogates", "[grammar]") {
    CharSet s({{'a', 'c'}, {'b', 'f'}, {'x', 'x'}, {0xD000, 0xE000}});
    // Ranges that meet across the surrogate gap are one range; the gap stays out of it.
    REQUIRE(s.ranges() == std::vector<CharSet::Range>{{'a', 'f'}, {'x', 'x'}, {0xD000, 0xE000}});
    CHECK(s.contains('d'));
    CHECK_FALSE(s.contains('g'));
    CHECK_FALSE(s.contains(0xD800));
    CHECK(s.size() == 6 + 1 + 0x800 + 1);
    CHECK(CharSet::all().size() == 0x110000 - 0x800);
    CHECK((CharSet::all() - s).size() == CharSet::all().size() - s.size());
    CHECK((s & CharSet::range('e', 'z')).ranges() == std::vector<CharSet::Range>{{'e', 'f'}, {'x', 'x'}});
}

TEST_CASE("utf8_sequences covers exactly the encodings of a code point range", "[grammar]") {
    // Every code point of a range spanning all four lengths: the sequences accept its
    // encoding, and no sequence accepts the encoding of a point outside the range.
    const uint32_t lo = 0x70, hi = 0x10400;
    std::vector<ByteRangeSeq> seqs;
    utf8_sequences(lo, hi, [&](const ByteRangeSeq& s) { seqs.push_back(s); });
    auto matches = [&](const std::string& b) {
        int n = 0;
        for (const auto& s : seqs) {
            if (s.size() != b.size()) continue;
            bool ok = true;
            for (size_t k = 0; k < s.size(); ++k)
                ok = ok && static_cast<uint8_t>(b[k]) >= s[k].first && static_cast<uint8_t>(b[k]) <= s[k].second;
            n += ok;
        }
        return n;
    };
    for (uint32_t cp = 0; cp < 0x11000; ++cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        const int n = matches(utf8(cp));
        INFO("cp " << cp);
        REQUIRE(n == (cp >= lo && cp <= hi ? 1 : 0));
    }
    // Surrogates are never produced: ED A0 80 (U+D800) is not matched.
    CHECK(matches("\xED\xA0\x80") == 0);
}

TEST_CASE("regex literals, classes, escapes and quantifiers", "[grammar]") {
    CHECK(full("abc", "abc"));
    CHECK_FALSE(full("abc", "abcd"));
    CHECK_FALSE(full("abc", "ab"));
    CHECK(full("a|bc|", ""));
    CHECK(full("[a-c]x", "bx"));
    CHECK_FALSE(full("[a-c]x", "dx"));
    CHECK(full("[^a-c]", "d"));
    CHECK(full("[^a-c]", utf8(0x4E2D)));      // a negated class takes any code point, multi-byte too
    CHECK_FALSE(full("[^a-c]", "\xE4\xB8"));  // ... but only whole characters
    CHECK(full("\\d{3}-\\d{2,}", "123-45678"));
    CHECK_FALSE(full("\\d{3}-\\d{2,}", "123-4"));
    CHECK(full("a{2,4}", "aaaa"));
    CHECK_FALSE(full("a{2,4}", "aaaaa"));
    CHECK_FALSE(full("a{2,4}", "a"));
    CHECK(full("a{3}", "aaa"));
    CHECK(full("x{,2}", "x{,2}"));  // not a quantifier: literal braces (Annex B)
    CHECK(full("(ab)+c", "ababc"));
    CHECK(full("(?:ab)*?c", "c"));  // lazy: same language
    CHECK(full("(?<year>\\d{4})-(?P<m>\\d\\d)", "2024-05"));
    CHECK(full("\\w+\\s\\W", "a_9\t!"));
    CHECK_FALSE(full("\\w", "-"));
    CHECK(full("\\x41\\u00e9\\u{1F600}", "A" + utf8(0xE9) + utf8(0x1F600)));
    CHECK(full("[\\d.]+", "3.14"));
    CHECK(full("a.c", "a" + utf8(0x10FFFF) + "c"));
    CHECK_FALSE(full("a.c", "a\nc"));
    CHECK(full("\\.\\*\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/", ".*()[]{}|^$\\/"));
    CHECK(full("[\\]\\-a]+", "]-a"));
    CHECK(full("[-a]", "-"));
    CHECK(full("[a-]", "-"));
    CHECK(full("^ab$", "ab"));
    CHECK(full("^a|b$", "b"));
    CHECK(full("é+", "ééé"));
}

TEST_CASE("regex constructs outside the supported syntax are refused by name", "[grammar]") {
    auto refused = [](const std::string& re, const std::string& what) {
        try {
            compile_regex(re);
            FAIL("accepted " << re);
        } catch (const GrammarError& e) {
            INFO(e.what());
            CHECK(std::string(e.what()).find(what) != std::string::npos);
        }
    };
    refused("(a)\\1", "backreferences");
    refused("a(?=b)", "lookahead");
    refused("(?<!a)b", "lookbehind");
    refused("\\bword", "word boundaries");
    refused("(?i)abc", "inline flags");
    refused("a^b", "anchor ^");
    refused("a$b", "anchor $");
    refused("\\p{L}", "Unicode property");
    refused("a{20000}", "repetition count");
    refused("a{3,2}", "min > max");
    refused("(ab", "missing ')'");
    refused("ab)", "unbalanced");
    refused("[ab", "missing ']'");
    refused("*a", "nothing to repeat");
    refused("[z-a]", "out of order");
    refused("\\q", "unknown escape");
    refused("(a{1000}b){1000}", "MiB to compile");  // a million copies: past GrammarLimits' memory
    refused("(a|b)*a(a|b){24}", "to compile");      // 2^24 DFA states: past its steps or memory
}

TEST_CASE("GrammarLimits bound the steps, the memory and the states of a construction", "[grammar]") {
    Rules r;
    r.root = r.add("root");
    r.define(r.root, parse_regex("(a|b)*a(a|b){8}"));      // 512 DFA states: fine by default
    CHECK(Grammar::from_rules(r).accepts("bbabbbbbbbb"));  // the a 9th from the end
    CHECK_FALSE(Grammar::from_rules(r).accepts("babbbbbbbbb"));
    auto error_with = [&](const GrammarLimits& l) {
        try {
            (void)Grammar::from_rules(r, l);
        } catch (const GrammarError& e) { return std::string(e.what()); }
        return std::string("accepted");
    };
    GrammarLimits l;
    l.max_work = 2000;
    CHECK(error_with(l) == "the constraint needs more than 2000 steps to compile (nested or overlapping repetitions?)");
    l = GrammarLimits{};
    l.max_memory = 65536;  // less than the 512 states' sets
    CHECK(error_with(l) ==
          "the constraint needs more than 65536 bytes to compile (nested or overlapping repetitions?)");
    l = GrammarLimits{};
    l.max_dfa_states = 100;
    CHECK(error_with(l) == "the constraint's automaton has too many states");
}

TEST_CASE("search mode (JSON Schema pattern) allows text around an unanchored match", "[grammar]") {
    Rules r;
    r.root = r.add("root");
    r.define(r.root, parse_regex("ab|^c$|^d", RegexMatch::Search));
    const Grammar g = Grammar::from_rules(r);
    CHECK(g.accepts("xxabyy"));
    CHECK(g.accepts("c"));
    CHECK_FALSE(g.accepts("xc"));
    CHECK(g.accepts("dzz"));
    CHECK_FALSE(g.accepts("zd"));
}

TEST_CASE("choices match one string exactly", "[grammar]") {
    const Grammar g = compile_choice({"yes", "no", "yes, please", "中文"});
    CHECK(g.accepts("yes"));
    CHECK(g.accepts("yes, please"));
    CHECK(g.accepts("中文"));
    CHECK(g.accepts_prefix("yes,"));
    CHECK_FALSE(g.accepts("ye"));
    CHECK_FALSE(g.accepts("noo"));
    CHECK_THROWS_AS(compile_choice({}), GrammarError);
    CHECK_THROWS_AS(compile_choice({"\xFF"}), GrammarError);
}

TEST_CASE("recursive rules become calls; non-recursive ones are inlined", "[grammar]") {
    // list ::= "(" (list ("," list)*)? ")"   -- balanced nested lists
    Rules r;
    const int32_t list = r.add("list");
    r.root = list;
    r.define(list, seq({lit("("), opt(seq({ref(list), star(seq({lit(","), ref(list)}))})), lit(")")}));
    const Grammar g = Grammar::from_rules(r);
    REQUIRE(g.n_rules() == 1);
    CHECK(g.accepts("()"));
    CHECK(g.accepts("((),(()),())"));
    CHECK_FALSE(g.accepts("(()"));
    CHECK_FALSE(g.accepts("(),()"));
    CHECK(g.accepts_prefix("(((((("));
    std::string deep(5000, '(');
    deep += std::string(5000, ')');
    CHECK(g.accepts(deep));

    // A chain of non-recursive rules is one DFA.
    Rules flat;
    const int32_t a = flat.add("a"), b = flat.add("b");
    flat.root = a;
    flat.define(a, seq({ref(b), ref(b)}));
    flat.define(b, alt({lit("x"), lit("yz")}));
    const Grammar f = Grammar::from_rules(flat);
    CHECK(f.n_rules() == 1);
    CHECK(f.accepts("xyz"));
    CHECK_FALSE(f.accepts("xy"));
}

TEST_CASE("left recursion, empty languages and undefined rules are errors", "[grammar]") {
    Rules left;
    const int32_t e = left.add("expr");
    left.root = e;
    left.define(e, alt({seq({ref(e), lit("+x")}), lit("x")}));
    CHECK_THROWS_WITH(Grammar::from_rules(left), Catch::Contains("left-recursive"));

    Rules none;
    const int32_t n = none.add("n");
    none.root = n;
    none.define(n, seq({lit("a"), ref(n)}));  // no finite string
    CHECK_THROWS_WITH(Grammar::from_rules(none), Catch::Contains("matches no text"));

    Rules undefined;
    undefined.root = undefined.add("x");
    CHECK_THROWS_AS(Grammar::from_rules(undefined), GrammarError);

    // Dead alternatives are trimmed, the rest still works.
    Rules part;
    const int32_t p = part.add("p"), dead = part.add("dead");
    part.root = p;
    part.define(p, alt({lit("ok"), seq({lit("o"), ref(dead)})}));
    part.define(dead, seq({lit("k"), ref(dead)}));
    const Grammar g = Grammar::from_rules(part);
    CHECK(g.accepts("ok"));
    CHECK_FALSE(g.accepts_prefix("okk"));
}

TEST_CASE("constraint text form round-trips and is line-safe", "[grammar]") {
    Constraint c;
    c.kind = Constraint::Kind::JsonSchema;
    c.text = "{\"type\": \"object\",\n \"properties\": {\"a%\": {\"type\": \"string\"}}}";
    const std::string t = c.to_text();
    CHECK(t == "json_schema:{\"type\":%20\"object\",%0A%20\"properties\":%20{\"a%25\":%20{\"type\":%20\"string\"}}}");
    CHECK(Constraint::from_text(t).text == c.text);

    Constraint ch;
    ch.kind = Constraint::Kind::Choice;
    ch.choices = {"a b", "c\"d", "é"};
    CHECK(ch.to_text() == "choice:[\"a%20b\",\"c\\\"d\",\"é\"]");
    const Constraint back = Constraint::from_text(ch.to_text());
    CHECK(back.kind == Constraint::Kind::Choice);
    CHECK(back.choices == ch.choices);

    CHECK(Constraint::from_text("json_object").kind == Constraint::Kind::JsonObject);
    CHECK(Constraint::from_text("regex:a%20b").text == "a b");
    CHECK_THROWS_AS(Constraint::from_text("grammar:x"), GrammarError);
    CHECK_THROWS_AS(Constraint::from_text("regex:a%2"), GrammarError);
    CHECK_THROWS_AS(Constraint::from_text("choice:{}"), GrammarError);
    CHECK(compile(Constraint::from_text("regex:[0-9]+")).accepts("42"));
}
