// Property test: walking random allowed tokens until the end token always yields text that
// parses as JSON (RapidJSON) and validates against the schema (a validator for the supported
// subset written here, independent of the compiler), on byte-level BPE and SentencePiece
// vocabularies. The mask is never empty on the way.
#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <random>
#include <regex>

#include <rapidjson/document.h>
#include <rapidjson/pointer.h>

#include "grammar/compile.hpp"
#include "grammar/matcher.hpp"
#include "grammar_vocab.hpp"

using namespace loom::grammar;
using loom::test::load_test_vocab;
using loom::test::TestVocab;
using Value = rapidjson::Value;

namespace {

// ------------------------------------------------------------------------------------
// Validator for the subset of JSON Schema that loom compiles (see json_schema.hpp).

size_t code_points(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    return n;
}

bool digits(std::string_view s, size_t pos, size_t n) {
    if (pos + n > s.size()) return false;
    for (size_t k = pos; k < pos + n; ++k)
        if (s[k] < '0' || s[k] > '9') return false;
    return true;
}

int num(std::string_view s, size_t pos, size_t n) { return std::stoi(std::string(s.substr(pos, n))); }

bool valid_date(std::string_view s) {
    if (s.size() != 10 || !digits(s, 0, 4) || s[4] != '-' || !digits(s, 5, 2) || s[7] != '-' || !digits(s, 8, 2))
        return false;
    const int y = num(s, 0, 4), m = num(s, 5, 2), d = num(s, 8, 2);
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    const int dim[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return y >= 1 && m >= 1 && m <= 12 && d >= 1 && d <= dim[m - 1];
}

bool valid_time(std::string_view s) {
    if (s.size() < 9 || !digits(s, 0, 2) || s[2] != ':' || !digits(s, 3, 2) || s[5] != ':' || !digits(s, 6, 2))
        return false;
    if (num(s, 0, 2) > 23 || num(s, 3, 2) > 59 || num(s, 6, 2) > 59) return false;
    size_t p = 8;
    if (p < s.size() && s[p] == '.') {
        const size_t f = ++p;
        while (p < s.size() && s[p] >= '0' && s[p] <= '9') ++p;
        if (p == f) return false;
    }
    if (p < s.size() && s[p] == 'Z') return p + 1 == s.size();
    if (p + 6 != s.size() || (s[p] != '+' && s[p] != '-') || !digits(s, p + 1, 2) || s[p + 3] != ':' ||
        !digits(s, p + 4, 2))
        return false;
    return num(s, p + 1, 2) <= 23 && num(s, p + 4, 2) <= 59;
}

bool valid_hostname(std::string_view s) {
    if (s.empty()) return false;
    size_t start = 0;
    while (true) {
        size_t dot = s.find('.', start);
        std::string_view label = s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
        if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
        for (char c : label)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
        if (dot == std::string_view::npos) return true;
        start = dot + 1;
    }
}

bool valid_format(std::string_view f, const std::string& s) {
    if (f == "date") return valid_date(s);
    if (f == "time") return valid_time(s);
    if (f == "date-time")
        return s.size() > 11 && s[10] == 'T' && valid_date(s.substr(0, 10)) &&
               valid_time(std::string_view(s).substr(11));
    if (f == "hostname") return valid_hostname(s);
    if (f == "email") {
        const size_t at = s.find('@');
        if (at == std::string::npos || at == 0 || s.find('@', at + 1) != std::string::npos) return false;
        const std::string local = s.substr(0, at);
        static const std::regex atom("^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$");
        return std::regex_match(local, atom) && valid_hostname(std::string_view(s).substr(at + 1));
    }
    if (f == "ipv4") {
        in_addr a;
        return inet_pton(AF_INET, s.c_str(), &a) == 1;
    }
    if (f == "ipv6") {
        in6_addr a;
        return s.find('.') == std::string::npos && inet_pton(AF_INET6, s.c_str(), &a) == 1;
    }
    if (f == "uuid") {
        static const std::regex u("^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$");
        return std::regex_match(s, u);
    }
    if (f == "duration") {  // RFC 3339 appendix A, transcribed from the ABNF
        static const std::regex d(
            "^P((([0-9]+D)|([0-9]+M([0-9]+D)?)|([0-9]+Y([0-9]+M([0-9]+D)?)?))(T(([0-9]+H([0-9]+M([0-9]+S)?)?)|([0-9]+M("
            "[0-9]+S)?)|([0-9]+S)))?"
            "|T(([0-9]+H([0-9]+M([0-9]+S)?)?)|([0-9]+M([0-9]+S)?)|([0-9]+S))|[0-9]+W)$");
        return std::regex_match(s, d);
    }
    return false;
}

bool has_type(const Value& x, std::string_view t) {
    if (t == "null") return x.IsNull();
    if (t == "boolean") return x.IsBool();
    if (t == "string") return x.IsString();
    if (t == "array") return x.IsArray();
    if (t == "object") return x.IsObject();
    if (t == "number") return x.IsNumber();
    if (t == "integer")
        return x.IsInt64() || x.IsUint64() || (x.IsDouble() && std::trunc(x.GetDouble()) == x.GetDouble());
    return false;
}

struct Validator {
    const Value& root;
    std::string why;

    bool fail(const std::string& w) {
        why = w;
        return false;
    }

    bool check(const Value& s, const Value& x) {
        if (s.IsBool()) return s.GetBool() || fail("false schema");
        if (s.HasMember("$ref")) {
            const std::string r = s["$ref"].GetString();
            const Value* t = rapidjson::Pointer(r.substr(1).c_str()).Get(root);
            return t && check(*t, x);
        }
        if (s.HasMember("allOf")) return check(s["allOf"][0], x);
        if (s.HasMember("anyOf")) {
            for (const auto& b : s["anyOf"].GetArray())
                if (check(b, x)) return true;
            return fail("no anyOf branch");
        }
        if (s.HasMember("const") && !(s["const"] == x)) return fail("const");
        if (s.HasMember("enum")) {
            bool found = false;
            for (const auto& e : s["enum"].GetArray()) found = found || e == x;
            if (!found) return fail("enum");
        }
        if (s.HasMember("type")) {
            const Value& t = s["type"];
            bool ok = false;
            if (t.IsString()) ok = has_type(x, t.GetString());
            else
                for (const auto& u : t.GetArray()) ok = ok || has_type(x, u.GetString());
            if (!ok) return fail("type");
        }
        if (x.IsString()) {
            const std::string v(x.GetString(), x.GetStringLength());
            if (s.HasMember("minLength") && code_points(v) < s["minLength"].GetUint()) return fail("minLength");
            if (s.HasMember("maxLength") && code_points(v) > s["maxLength"].GetUint()) return fail("maxLength");
            if (s.HasMember("pattern") && !std::regex_search(v, std::regex(s["pattern"].GetString())))
                return fail("pattern " + v);
            if (s.HasMember("format") && !valid_format(s["format"].GetString(), v)) return fail("format " + v);
        }
        if (x.IsNumber()) {
            const double v = x.GetDouble();
            if (s.HasMember("minimum") && v < s["minimum"].GetDouble()) return fail("minimum");
            if (s.HasMember("maximum") && v > s["maximum"].GetDouble()) return fail("maximum");
            if (s.HasMember("exclusiveMinimum") && v <= s["exclusiveMinimum"].GetDouble())
                return fail("exclusiveMinimum");
            if (s.HasMember("exclusiveMaximum") && v >= s["exclusiveMaximum"].GetDouble())
                return fail("exclusiveMaximum");
            if (s.HasMember("multipleOf")) {
                const double q = v / s["multipleOf"].GetDouble();
                if (std::abs(q - std::round(q)) > 1e-9) return fail("multipleOf");
            }
        }
        if (x.IsObject()) return check_object(s, x);
        if (x.IsArray()) {
            const auto n = x.Size();
            if (s.HasMember("minItems") && n < s["minItems"].GetUint()) return fail("minItems");
            if (s.HasMember("maxItems") && n > s["maxItems"].GetUint()) return fail("maxItems");
            rapidjson::SizeType k = 0;
            if (s.HasMember("prefixItems"))
                for (; k < n && k < s["prefixItems"].Size(); ++k)
                    if (!check(s["prefixItems"][k], x[k])) return false;
            for (; k < n; ++k)
                if (s.HasMember("items") && !check(s["items"], x[k])) return false;
        }
        return true;
    }

    bool check_object(const Value& s, const Value& x) {
        std::vector<std::string> seen;
        size_t next_listed = 0;  // listed properties appear in schema order
        for (auto m = x.MemberBegin(); m != x.MemberEnd(); ++m) {
            const std::string k(m->name.GetString(), m->name.GetStringLength());
            if (std::find(seen.begin(), seen.end(), k) != seen.end()) return fail("duplicate key " + k);
            seen.push_back(k);
            const Value* ps = s.HasMember("properties") ? &s["properties"] : nullptr;
            if (ps && ps->HasMember(k.c_str())) {
                size_t idx = 0;
                for (auto p = ps->MemberBegin(); p != ps->MemberEnd(); ++p, ++idx)
                    if (k == p->name.GetString()) break;
                if (idx < next_listed) return fail("property order");
                next_listed = idx + 1;
                if (!check((*ps)[k.c_str()], m->value)) return false;
            } else if (s.HasMember("additionalProperties")) {
                const Value& a = s["additionalProperties"];
                if (a.IsBool() && !a.GetBool()) return fail("additional property " + k);
                if (a.IsObject() && !check(a, m->value)) return false;
            }
        }
        if (s.HasMember("required"))
            for (const auto& r : s["required"].GetArray())
                if (!x.HasMember(r)) return fail(std::string("required ") + r.GetString());
        return true;
    }
};

// ------------------------------------------------------------------------------------
// Random walk.

// Fewest bytes that complete each (rule, state): Bellman-Ford over byte and call edges.
std::vector<std::vector<int64_t>> completion_bytes(const Grammar& g) {
    constexpr int64_t kInf = 1 << 30;
    std::vector<std::vector<int64_t>> d(static_cast<size_t>(g.n_rules()));
    for (int32_t r = 0; r < g.n_rules(); ++r) {
        d[static_cast<size_t>(r)].assign(static_cast<size_t>(g.rule(r).n_states), kInf);
        for (int32_t s = 0; s < g.rule(r).n_states; ++s)
            if (g.rule(r).accept[static_cast<size_t>(s)]) d[static_cast<size_t>(r)][static_cast<size_t>(s)] = 0;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < g.n_rules(); ++r) {
            const RuleDfa& x = g.rule(r);
            auto& dr = d[static_cast<size_t>(r)];
            for (int32_t s = 0; s < x.n_states; ++s) {
                int64_t best = dr[static_cast<size_t>(s)];
                for (int c = 0; c < x.n_classes; ++c) {
                    const int32_t t = x.next[static_cast<size_t>(s * x.n_classes + c)];
                    if (t >= 0) best = std::min(best, 1 + dr[static_cast<size_t>(t)]);
                }
                for (uint32_t k = x.call_begin[static_cast<size_t>(s)]; k < x.call_begin[static_cast<size_t>(s) + 1];
                     ++k)
                    best = std::min(
                        best, d[static_cast<size_t>(x.calls[k].rule)][0] + dr[static_cast<size_t>(x.calls[k].ret)]);
                if (best < dr[static_cast<size_t>(s)]) dr[static_cast<size_t>(s)] = best, changed = true;
            }
        }
    }
    return d;
}

int64_t distance(const Matcher& m, const std::vector<std::vector<int64_t>>& d) {
    int64_t best = INT64_MAX;
    for (const auto& stack : m.stacks()) {
        int64_t sum = 0;
        for (auto [r, s] : stack) sum += d[static_cast<size_t>(r)][static_cast<size_t>(s)];
        best = std::min(best, sum);
    }
    return best;
}

// Random allowed tokens for `wander` steps, then the candidate (of 48 random allowed ones)
// that leaves the fewest bytes to completion, until an end token is taken.
std::string walk(const std::shared_ptr<const TokenAutomaton>& a, std::mt19937_64& rng, size_t wander,
                 const std::vector<std::vector<int64_t>>& d) {
    Matcher m(a);
    const VocabBytes& v = a->vocab();
    std::vector<uint32_t> mask(m.mask_words());
    std::vector<int32_t> allowed;
    std::string text;
    for (size_t step = 0; step < 4000; ++step) {
        m.fill_mask(mask);
        allowed.clear();
        for (size_t w = 0; w < mask.size(); ++w)
            for (uint32_t bits = mask[w]; bits; bits &= bits - 1)
                allowed.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits))));
        REQUIRE_FALSE(allowed.empty());  // never stuck
        const bool can_end = v.is_eog(allowed.back()) ||
                             std::any_of(allowed.begin(), allowed.end(), [&](int32_t t) { return v.is_eog(t); });
        int32_t pick;
        if (step < wander) {
            pick = allowed[rng() % allowed.size()];
        } else if (can_end) {
            pick = v.eog()[0];
        } else {
            int64_t best = INT64_MAX;
            pick = allowed[0];
            for (int k = 0; k < 48; ++k) {
                const int32_t t = allowed[rng() % allowed.size()];
                REQUIRE(m.advance(t));
                const int64_t dist = distance(m, d);
                m.rollback(1);
                if (dist < best) best = dist, pick = t;
            }
        }
        REQUIRE(m.advance(pick));
        if (v.is_eog(pick)) return text;
        text += v.bytes(pick);
    }
    FAIL("the walk did not finish: " << text);
    return text;
}

void property(const TestVocab& v, const Constraint& c, const char* schema, int walks, uint64_t seed) {
    const Grammar g = compile(c);
    auto a = std::make_shared<const TokenAutomaton>(g, v.bytes);
    const auto d = completion_bytes(g);
    rapidjson::Document sd;
    sd.Parse(schema);
    REQUIRE_FALSE(sd.HasParseError());
    std::mt19937_64 rng(seed);
    for (int k = 0; k < walks; ++k) {
        const std::string text = walk(a, rng, 8 + rng() % 64, d);
        INFO("walk " << k << ": " << text);
        rapidjson::Document doc;
        doc.Parse<rapidjson::kParseValidateEncodingFlag>(text.data(), text.size());
        REQUIRE_FALSE(doc.HasParseError());
        Validator val{sd, {}};
        INFO("invalid: " << val.why);
        REQUIRE(val.check(sd, doc));
    }
}

void property(const TestVocab& v, const char* schema, int walks, uint64_t seed) {
    Constraint c;
    c.kind = Constraint::Kind::JsonSchema;
    c.text = schema;
    property(v, c, schema, walks, seed);
}

const char* kFlat =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":130},
  "email":{"type":"string","format":"email"},"born":{"type":"string","format":"date"},"role":{"enum":["admin","user",null,3]},
  "score":{"type":"number","exclusiveMinimum":-2.5,"maximum":10},"ok":{"type":"boolean"}},
  "required":["name","age","role"],"additionalProperties":false})";
const char* kNested =
    R"({"$defs":{"item":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{2,4}$"},
  "qty":{"type":"integer","multipleOf":5,"exclusiveMaximum":100},"at":{"type":"string","format":"date-time"}},"required":["sku","qty"]}},
  "type":"object","properties":{"id":{"type":"string","format":"uuid"},"items":{"type":"array","items":{"$ref":"#/$defs/item"},"minItems":1,"maxItems":3},
  "pair":{"prefixItems":[{"type":"string","format":"ipv4"},{"type":"string","format":"ipv6"}],"items":false,"minItems":2},
  "wait":{"type":"string","format":"duration"},"note":{"anyOf":[{"type":"null"},{"type":"string","minLength":2,"maxLength":4}]}},
  "required":["id","items","pair"],"additionalProperties":false})";
const char* kTree =
    R"({"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"},"maxItems":3}},
  "required":["v","kids"],"additionalProperties":false})";
const char* kExtras =
    R"({"type":"object","properties":{"id":{"type":"integer"},"idx":{"type":"boolean"}},"required":["id"],
  "additionalProperties":{"type":"string","format":"hostname"}})";
const char* kAny = R"({"type":"object"})";

// The walks of both vocabulary kinds: each schema above, then a bare json_object, 25 walks
// each, with seeds seed0 + 1 .. seed0 + 5.
void walk_every_schema(const TestVocab& v, uint64_t seed0) {
    property(v, kFlat, 25, seed0 + 1);
    property(v, kNested, 25, seed0 + 2);
    property(v, kTree, 25, seed0 + 3);
    property(v, kExtras, 25, seed0 + 4);
    Constraint obj;
    obj.kind = Constraint::Kind::JsonObject;
    property(v, obj, kAny, 25, seed0 + 5);
}

}  // namespace

TEST_CASE("random walks yield valid JSON for the schema (byte-level BPE)", "[grammar]") {
    walk_every_schema(load_test_vocab("gpt-2"), 0);
}

TEST_CASE("random walks yield valid JSON for the schema (SentencePiece, byte fallback)", "[grammar]") {
    walk_every_schema(load_test_vocab("llama-spm"), 10);
}
