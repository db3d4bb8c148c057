// JSON Schema to grammar rules; the supported subset and the output it allows are in json_schema.hpp.
#include "grammar/json_schema.hpp"

#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>
#include <set>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/pointer.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "grammar/json_text.hpp"
#include "grammar/numeric.hpp"
#include "grammar/regex.hpp"

namespace loom::grammar {
namespace {

using Value = rapidjson::Value;

constexpr int kMaxDepth = 128;
constexpr size_t kMaxExcludedKey = 256;
constexpr size_t kMaxOptionalRun = 256;

const std::set<std::string_view> kAnnotations = {"title",     "description", "default",    "examples",   "$comment",
                                                 "$schema",   "$id",         "$anchor",    "deprecated", "readOnly",
                                                 "writeOnly", "$defs",       "definitions"};
const std::set<std::string_view> kObjectWords = {"properties", "required", "additionalProperties"};
const std::set<std::string_view> kArrayWords = {"items", "prefixItems", "minItems", "maxItems"};
const std::set<std::string_view> kStringWords = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string_view> kNumberWords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                                 "multipleOf"};
const std::set<std::string_view> kOtherWords = {"type", "enum", "const", "anyOf", "allOf", "$ref"};

std::string_view sv(const Value& v) { return {v.GetString(), v.GetStringLength()}; }

std::string quoted(std::string_view w) {
    std::string out(1, '\'');
    out.append(w);
    out += '\'';
    return out;
}

std::string pointer_token(std::string_view name) {
    std::string out;
    for (char c : name) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

// Compact JSON text of a value; strings in json::quote's spelling.
void write_json(const Value& v, std::string& out, int depth = 0) {
    if (depth > kMaxDepth) throw SchemaError("", "enum", "values nested deeper than " + std::to_string(kMaxDepth));
    if (v.IsString()) {
        out += json::quote(sv(v));
    } else if (v.IsArray()) {
        out += '[';
        for (rapidjson::SizeType k = 0; k < v.Size(); ++k) {
            if (k) out += ',';
            write_json(v[k], out, depth + 1);
        }
        out += ']';
    } else if (v.IsObject()) {
        out += '{';
        bool first = true;
        for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m) {
            if (!first) out += ',';
            first = false;
            out += json::quote(sv(m->name));
            out += ':';
            write_json(m->value, out, depth + 1);
        }
        out += '}';
    } else {
        rapidjson::StringBuffer buf;
        rapidjson::Writer<rapidjson::StringBuffer> w(buf);
        v.Accept(w);
        out.append(buf.GetString(), buf.GetSize());
    }
}

std::string json_text(const Value& v) {
    std::string s;
    write_json(v, s);
    return s;
}

bool value_has_type(const Value& v, std::string_view t) {
    if (t == "null") return v.IsNull();
    if (t == "boolean") return v.IsBool();
    if (t == "string") return v.IsString();
    if (t == "array") return v.IsArray();
    if (t == "object") return v.IsObject();
    if (t == "number") return v.IsNumber();
    if (t == "integer") {
        if (v.IsInt64() || v.IsUint64()) return true;
        if (!v.IsDouble()) return false;
        const double d = v.GetDouble();
        return std::isfinite(d) && std::trunc(d) == d;
    }
    return false;
}

class Compiler {
public:
    Compiler(const rapidjson::Document& doc, const JsonOptions& o) : doc_(doc) {
        // Nothing, one space, or a line break and an indentation.
        const ExprPtr indent = repeat(chars(CharSet({{'\t', '\t'}, {' ', ' '}})), 0, o.max_indent);
        ws_ = o.compact ? empty() : opt(alt({lit(" "), seq({opt(lit("\r")), lit("\n"), indent})}));
        sep_ = seq({lit(","), ws_});
        colon_ = seq({lit(":"), ws_});
        string_ = seq({lit("\""), star(json::any_char()), lit("\"")});
    }

    Rules rules;

    void compile_root() {
        const int32_t root = rules.add("root");
        ref_rule_["#"] = root;
        rules.root = root;
        rules.define(root, schema(doc_, "", 0));
    }

    void compile_any_object() {
        const int32_t root = rules.add("root");
        rules.root = root;
        rules.define(root, object_any());
    }

private:
    [[noreturn]] static void fail(const std::string& ptr, const std::string& kw, const std::string& msg) {
        throw SchemaError(ptr, kw, msg);
    }

    // Any JSON value: one recursive rule.
    ExprPtr any_value() {
        if (value_rule_ < 0) {
            value_rule_ = rules.add("value");
            const ExprPtr v = ref(value_rule_);
            const ExprPtr member = seq({string_, colon_, v});
            const ExprPtr object = seq({lit("{"), ws_, opt(seq({member, star(seq({sep_, member})), ws_})), lit("}")});
            const ExprPtr array = seq({lit("["), ws_, opt(seq({v, star(seq({sep_, v})), ws_})), lit("]")});
            rules.define(value_rule_,
                         alt({object, array, string_, number_expr({}), lit("true"), lit("false"), lit("null")}));
        }
        return ref(value_rule_);
    }

    ExprPtr object_any() {
        const ExprPtr member = seq({string_, colon_, any_value()});
        return seq({lit("{"), ws_, opt(seq({member, star(seq({sep_, member})), ws_})), lit("}")});
    }

    ExprPtr schema(const Value& v, const std::string& ptr, int depth) {
        if (depth > kMaxDepth) fail(ptr, "", "schemas nested deeper than " + std::to_string(kMaxDepth));
        if (v.IsBool()) return v.GetBool() ? any_value() : nothing();
        if (!v.IsObject()) fail(ptr, "", "a schema must be an object or a boolean");
        std::set<std::string_view> words;
        for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m) {
            const std::string_view k = sv(m->name);
            if (kAnnotations.count(k)) continue;
            if (!kObjectWords.count(k) && !kArrayWords.count(k) && !kStringWords.count(k) && !kNumberWords.count(k) &&
                !kOtherWords.count(k))
                fail(ptr, std::string(k), "keyword '" + std::string(k) + "' is not supported");
            words.insert(k);
        }
        auto only = [&](std::string_view kw) {
            for (std::string_view w : words)
                if (w != kw) fail(ptr, std::string(w), quoted(w) + " next to " + quoted(kw) + " is not supported");
        };
        if (words.count("$ref")) {
            only("$ref");
            return reference(v["$ref"], ptr, depth);
        }
        if (words.count("allOf")) {
            only("allOf");
            const Value& a = v["allOf"];
            if (!a.IsArray() || a.Size() != 1) fail(ptr, "allOf", "allOf is supported with exactly one subschema");
            return schema(a[0], ptr + "/allOf/0", depth + 1);
        }
        if (words.count("anyOf")) {
            only("anyOf");
            const Value& a = v["anyOf"];
            if (!a.IsArray() || a.Empty()) fail(ptr, "anyOf", "anyOf must be a non-empty array");
            std::vector<ExprPtr> branches;
            for (rapidjson::SizeType k = 0; k < a.Size(); ++k)
                branches.push_back(schema(a[k], ptr + "/anyOf/" + std::to_string(k), depth + 1));
            return alt(std::move(branches));
        }
        std::vector<std::string> types = type_list(v, ptr, words);
        if (words.count("const") || words.count("enum")) return enumeration(v, ptr, words, types);
        std::vector<ExprPtr> branches;
        for (const std::string& t : types) {
            if (t == "null") branches.push_back(lit("null"));
            else if (t == "boolean") branches.push_back(alt({lit("true"), lit("false")}));
            else if (t == "integer" || t == "number") branches.push_back(number(v, ptr, t == "integer"));
            else if (t == "string") branches.push_back(string(v, ptr));
            else if (t == "array") branches.push_back(array(v, ptr, depth));
            else if (t == "object") branches.push_back(object(v, ptr, depth));
        }
        if (branches.empty()) return any_value();
        return alt(std::move(branches));
    }

    std::vector<std::string> type_list(const Value& v, const std::string& ptr,
                                       const std::set<std::string_view>& words) {
        static const std::set<std::string_view> kTypes = {"null",   "boolean", "integer", "number",
                                                          "string", "array",   "object"};
        std::vector<std::string> out;
        if (v.HasMember("type")) {
            const Value& t = v["type"];
            auto add = [&](const Value& x) {
                if (!x.IsString() || !kTypes.count(sv(x)))
                    fail(ptr, "type", "type must be one of null, boolean, integer, number, string, array, object");
                out.emplace_back(sv(x));
            };
            if (t.IsArray()) {
                if (t.Empty()) fail(ptr, "type", "type must not be an empty array");
                for (rapidjson::SizeType k = 0; k < t.Size(); ++k) add(t[k]);
            } else {
                add(t);
            }
            return out;
        }
        if (words.count("const") || words.count("enum")) return out;
        auto any_of = [&](const std::set<std::string_view>& family) {
            for (std::string_view w : words)
                if (family.count(w)) return true;
            return false;
        };
        if (any_of(kObjectWords)) out.emplace_back("object");
        if (any_of(kArrayWords)) out.emplace_back("array");
        if (any_of(kStringWords)) out.emplace_back("string");
        if (any_of(kNumberWords)) out.emplace_back("number");
        return out;  // empty: any value
    }

    ExprPtr enumeration(const Value& v, const std::string& ptr, const std::set<std::string_view>& words,
                        const std::vector<std::string>& types) {
        for (std::string_view w : words)
            if (w != "const" && w != "enum" && w != "type")
                fail(ptr, std::string(w), quoted(w) + " next to enum/const is not supported");
        std::vector<const Value*> values;
        if (v.HasMember("enum")) {
            const Value& e = v["enum"];
            if (!e.IsArray() || e.Empty()) fail(ptr, "enum", "enum must be a non-empty array");
            for (rapidjson::SizeType k = 0; k < e.Size(); ++k) values.push_back(&e[k]);
        }
        if (v.HasMember("const")) {  // with enum too, the const must be one of its values
            const std::string c = json_text(v["const"]);
            bool in_enum = values.empty();
            for (const Value* x : values) in_enum = in_enum || json_text(*x) == c;
            values.assign(in_enum ? 1 : 0, &v["const"]);
        }
        std::vector<ExprPtr> out;
        for (const Value* x : values) {
            bool ok = types.empty();
            for (const auto& t : types) ok = ok || value_has_type(*x, t);
            if (ok) out.push_back(lit(json_text(*x)));
        }
        return alt(std::move(out));
    }

    // A chain of references counts as nesting, so a long chain cannot exhaust the stack.
    ExprPtr reference(const Value& r, const std::string& ptr, int depth) {
        if (!r.IsString()) fail(ptr, "$ref", "$ref must be a string");
        const std::string target(sv(r));
        if (target.empty() || target[0] != '#')
            fail(ptr, "$ref", "only references inside the schema ('#...') are supported");
        if (auto it = ref_rule_.find(target); it != ref_rule_.end()) return ref(it->second);
        // A URI fragment: percent-decode it, then read it as a JSON pointer (RFC 6901 6).
        std::string path;
        for (size_t k = 1; k < target.size(); ++k) {
            if (target[k] == '%' && k + 2 < target.size() && std::isxdigit(static_cast<unsigned char>(target[k + 1])) &&
                std::isxdigit(static_cast<unsigned char>(target[k + 2]))) {
                path += static_cast<char>(std::stoi(target.substr(k + 1, 2), nullptr, 16));
                k += 2;
            } else {
                path += target[k];
            }
        }
        const rapidjson::Pointer p(path.c_str(), path.size());
        if (!p.IsValid()) fail(ptr, "$ref", quoted(target) + " is not a JSON pointer (anchors are not supported)");
        const Value* t = p.Get(doc_);
        if (!t) fail(ptr, "$ref", "'" + target + "' does not exist in the schema");
        const int32_t id = rules.add("ref " + target);
        ref_rule_[target] = id;
        rules.define(id, schema(*t, path, depth + 1));
        return ref(id);
    }

    static std::optional<uint32_t> count(const Value& v, const char* kw, const std::string& ptr) {
        if (!v.HasMember(kw)) return std::nullopt;
        const Value& n = v[kw];
        if (!n.IsUint64() && !(n.IsDouble() && n.GetDouble() >= 0 &&
                               n.GetDouble() == static_cast<double>(static_cast<uint64_t>(n.GetDouble()))))
            fail(ptr, kw, std::string(kw) + " must be a non-negative integer");
        const uint64_t x = n.IsUint64() ? n.GetUint64() : static_cast<uint64_t>(n.GetDouble());
        if (x > 10000) fail(ptr, kw, std::string(kw) + " above 10000 is not supported");
        return static_cast<uint32_t>(x);
    }

    std::optional<Decimal> decimal(const Value& v, const char* kw, const std::string& ptr) {
        if (!v.HasMember(kw)) return std::nullopt;
        const Value& n = v[kw];
        if (!n.IsNumber()) fail(ptr, kw, std::string(kw) + " must be a number");
        auto d = parse_decimal(json_text(n));
        if (!d) fail(ptr, kw, std::string(kw) + " is out of range");
        return d;
    }

    ExprPtr number(const Value& v, const std::string& ptr, bool integer) {
        NumberConstraint c;
        c.integer = integer;
        c.min = decimal(v, "minimum", ptr);
        c.max = decimal(v, "maximum", ptr);
        c.multiple_of = decimal(v, "multipleOf", ptr);
        // exclusiveMinimum: a number (draft 6+) or a flag on minimum (draft 4).
        for (auto [kw, bound, flag] : {std::tuple{"exclusiveMinimum", &c.min, &c.min_exclusive},
                                       std::tuple{"exclusiveMaximum", &c.max, &c.max_exclusive}}) {
            if (!v.HasMember(kw)) continue;
            if (v[kw].IsBool()) {
                *flag = v[kw].GetBool();
                continue;
            }
            auto d = decimal(v, kw, ptr);
            // Both minimum and exclusiveMinimum: keep the tighter one.
            const bool is_min = std::string_view(kw) == "exclusiveMinimum";
            if (*bound && !tighter(*d, **bound, is_min)) continue;
            *bound = d;
            *flag = true;
        }
        try {
            return number_expr(c);
        } catch (const SchemaError&) { throw; } catch (const GrammarError& e) {
            fail(ptr, c.multiple_of ? "multipleOf" : "minimum", e.what());
        }
    }

    // True when `a` is a strictly tighter bound than `b` (greater for a minimum), or equal.
    static bool tighter(const Decimal& a, const Decimal& b, bool is_min) {
        auto key = [](const Decimal& d) { return std::pair(d.int_digits.size(), d.int_digits + d.frac_digits); };
        int c;  // compare a with b as values
        if (a.neg != b.neg) c = a.neg ? -1 : 1;
        else {
            auto ka = key(a), kb = key(b);
            int m = ka.first != kb.first ? (ka.first < kb.first ? -1 : 1) : 0;
            if (m == 0) {
                std::string x = a.int_digits + a.frac_digits, y = b.int_digits + b.frac_digits;
                x.resize(std::max(x.size(), y.size()), '0');
                y.resize(x.size(), '0');
                m = x < y ? -1 : x > y ? 1 : 0;
            }
            c = a.neg ? -m : m;
        }
        return is_min ? c >= 0 : c <= 0;
    }

    ExprPtr string(const Value& v, const std::string& ptr) {
        const bool has_len = v.HasMember("minLength") || v.HasMember("maxLength");
        if (v.HasMember("format") && v.HasMember("pattern"))
            fail(ptr, "pattern", "pattern together with format is not supported");
        if (has_len && (v.HasMember("format") || v.HasMember("pattern")))
            fail(ptr, v.HasMember("minLength") ? "minLength" : "maxLength",
                 "string length bounds together with pattern or format are not supported");
        ExprPtr content;
        if (v.HasMember("format")) {
            const Value& f = v["format"];
            if (!f.IsString()) fail(ptr, "format", "format must be a string");
            ExprPtr text = json::format_text(sv(f));
            if (!text) fail(ptr, "format", "format '" + std::string(sv(f)) + "' is not supported");
            content = json::as_content(text);
        } else if (v.HasMember("pattern")) {
            const Value& p = v["pattern"];
            if (!p.IsString()) fail(ptr, "pattern", "pattern must be a string");
            try {
                content = json::as_content(parse_regex(sv(p), RegexMatch::Search));
            } catch (const GrammarError& e) { fail(ptr, "pattern", e.what()); }
        } else {
            const uint32_t lo = count(v, "minLength", ptr).value_or(0);
            const uint32_t hi = count(v, "maxLength", ptr).value_or(kUnbounded);
            if (lo > hi) fail(ptr, "minLength", "minLength is greater than maxLength");
            content = repeat(json::any_char(), lo, hi);
        }
        return seq({lit("\""), content, lit("\"")});
    }

    ExprPtr array(const Value& v, const std::string& ptr, int depth) {
        std::vector<ExprPtr> prefix;
        if (v.HasMember("prefixItems")) {
            const Value& p = v["prefixItems"];
            if (!p.IsArray()) fail(ptr, "prefixItems", "prefixItems must be an array of schemas");
            for (rapidjson::SizeType k = 0; k < p.Size(); ++k)
                prefix.push_back(schema(p[k], ptr + "/prefixItems/" + std::to_string(k), depth + 1));
        }
        ExprPtr rest = any_value();
        if (v.HasMember("items")) {
            const Value& it = v["items"];
            if (it.IsArray())
                fail(ptr, "items", "items as an array (draft 4 tuples) is not supported; use prefixItems");
            rest = (it.IsBool() && !it.GetBool()) ? nullptr : schema(it, ptr + "/items", depth + 1);
        }
        const uint32_t lo = count(v, "minItems", ptr).value_or(0);
        uint32_t hi = count(v, "maxItems", ptr).value_or(kUnbounded);
        if (!rest) hi = std::min<uint32_t>(hi, static_cast<uint32_t>(prefix.size()));
        if (lo > hi) fail(ptr, "minItems", "no array length satisfies minItems, maxItems and items");
        if (hi == 0) return seq({lit("["), ws_, lit("]")});
        // Element j (1-based) is prefix[j-1] for j <= p, else `rest`. tail(i): what may follow
        // once i elements are written.
        const auto p = static_cast<uint32_t>(prefix.size());
        auto rest_tail = [&](uint32_t i) -> ExprPtr {  // i >= p: only `rest` repeats
            if (!rest) return empty();
            return repeat(seq({sep_, rest}), lo > i ? lo - i : 0, hi == kUnbounded ? kUnbounded : hi - i);
        };
        ExprPtr list;
        if (p == 0) {
            list = seq({rest, rest_tail(1)});
        } else {
            const uint32_t used = std::min(p, hi);
            ExprPtr tail = hi <= p ? empty() : rest_tail(p);
            for (uint32_t i = used; i-- > 1;) {  // tail(i) from tail(i + 1)
                const ExprPtr more = seq({sep_, prefix[i], tail});
                tail = i >= lo ? alt({more, empty()}) : more;
            }
            list = seq({prefix[0], tail});
        }
        if (lo == 0) return seq({lit("["), ws_, opt(seq({list, ws_})), lit("]")});
        return seq({lit("["), ws_, list, ws_, lit("]")});
    }

    ExprPtr object(const Value& v, const std::string& ptr, int depth);
    ExprPtr key_not_in(const std::vector<std::string>& names);

    const rapidjson::Document& doc_;
    ExprPtr ws_, sep_, colon_, string_;
    int32_t value_rule_ = -1;
    std::map<std::string, int32_t> ref_rule_;
};

ExprPtr Compiler::object(const Value& v, const std::string& ptr, int depth) {
    std::vector<std::string> names;
    std::vector<ExprPtr> members;
    if (v.HasMember("properties")) {
        const Value& ps = v["properties"];
        if (!ps.IsObject()) fail(ptr, "properties", "properties must be an object");
        for (auto m = ps.MemberBegin(); m != ps.MemberEnd(); ++m) {
            names.emplace_back(sv(m->name));
            const ExprPtr val = schema(m->value, ptr + "/properties/" + pointer_token(sv(m->name)), depth + 1);
            members.push_back(seq({lit(json::quote(sv(m->name)).substr(1)), colon_, val}));  // after its opening quote
        }
    }
    std::vector<uint8_t> req(names.size(), 0);
    if (v.HasMember("required")) {
        const Value& r = v["required"];
        if (!r.IsArray()) fail(ptr, "required", "required must be an array of strings");
        for (rapidjson::SizeType k = 0; k < r.Size(); ++k) {
            if (!r[k].IsString()) fail(ptr, "required", "required must be an array of strings");
            auto it = std::find(names.begin(), names.end(), sv(r[k]));
            if (it == names.end())
                fail(ptr, "required", "required property '" + std::string(sv(r[k])) + "' is not in properties");
            req[static_cast<size_t>(it - names.begin())] = 1;
        }
    }
    ExprPtr extra;  // one additional member, or null when none are allowed
    const Value* addl = v.HasMember("additionalProperties") ? &v["additionalProperties"] : nullptr;
    if (addl && !addl->IsBool() && !addl->IsObject())
        fail(ptr, "additionalProperties", "additionalProperties must be a boolean or a schema");
    const bool closed = addl ? (addl->IsBool() && !addl->GetBool()) : v.HasMember("properties");
    if (!closed) {
        const ExprPtr val =
            (addl && addl->IsObject()) ? schema(*addl, ptr + "/additionalProperties", depth + 1) : any_value();
        const ExprPtr key =
            names.empty() ? seq({star(json::any_char()), lit("\"")}) : seq({key_not_in(names), lit("\"")});
        extra = seq({key, colon_, val});  // after its opening quote
    }
    // A run of k optional properties costs about k^2 automaton work (the set of members
    // that may come next is tracked); long runs are refused.
    size_t run = 0;
    for (size_t i = 0; i < req.size(); ++i) {
        run = req[i] ? 0 : run + 1;
        if (run > kMaxOptionalRun)
            fail(ptr, "required",
                 "more than " + std::to_string(kMaxOptionalRun) +
                     " optional properties in a row are not supported (list some in required)");
    }
    // Members in schema order, optional ones skippable, then any additional members.
    // choice[i]: the next member written is one of i, i+1, ... up to the first required
    // one (or an additional one when all that remain are optional), followed by rest[k+1];
    // rest[i]: what follows once members before i were written. The separator and the
    // key's opening quote come before the choice, so the automaton does not carry one
    // copy of them per candidate member (members and `extra` start after that quote).
    const size_t n = members.size();
    const ExprPtr quote = lit("\"");
    const ExprPtr extra_tail = extra ? star(seq({sep_, quote, extra})) : empty();
    std::vector<ExprPtr> choice(n + 1), rest(n + 1);
    std::vector<uint8_t> all_opt(n + 1, 1);  // members i.. are all optional
    choice[n] = extra ? seq({extra, extra_tail}) : nothing();
    rest[n] = extra_tail;
    for (size_t i = n; i-- > 0;) {
        all_opt[i] = all_opt[i + 1] && !req[i];
        const ExprPtr here = seq({members[i], rest[i + 1]});
        choice[i] = req[i] ? here : alt({here, choice[i + 1]});
        rest[i] = all_opt[i] ? opt(seq({sep_, quote, choice[i]})) : seq({sep_, quote, choice[i]});
    }
    choice[0] = seq({quote, choice[0]});
    const ExprPtr first = choice[0];
    const bool all_optional = all_opt[0];
    if (all_optional) return seq({lit("{"), ws_, opt(seq({first, ws_})), lit("}")});
    return seq({lit("{"), ws_, first, ws_, lit("}")});
}

// String content (canonical spelling) of every key that is not one of `names`.
ExprPtr Compiler::key_not_in(const std::vector<std::string>& names) {
    struct Node {
        bool is_name = false;
        std::map<uint32_t, size_t> next;
    };
    std::vector<Node> trie(1);
    for (const std::string& s : names) {
        if (s.size() > kMaxExcludedKey)
            throw SchemaError("", "additionalProperties",
                              "additional properties next to a property name longer than " +
                                  std::to_string(kMaxExcludedKey) + " bytes are not supported");
        size_t node = 0, pos = 0;
        uint32_t cp;
        while (pos < s.size()) {
            if (!next_utf8(s, pos, cp)) throw SchemaError("", "properties", "property name is not valid UTF-8");
            auto [it, fresh] = trie[node].next.try_emplace(cp, trie.size());
            if (fresh) trie.emplace_back();
            node = it->second;
        }
        trie[node].is_name = true;
    }
    const ExprPtr any = star(json::as_content(chars(CharSet::all())));
    std::vector<ExprPtr> done(trie.size());
    // Children have larger indices than their parents: build from the last node back.
    for (size_t k = trie.size(); k-- > 0;) {
        std::vector<ExprPtr> parts;
        if (!trie[k].is_name) parts.push_back(empty());
        std::vector<CharSet::Range> used;
        for (auto [cp, child] : trie[k].next) {
            used.emplace_back(cp, cp);
            parts.push_back(seq({json::as_content(chars(CharSet::single(cp))), done[child]}));
        }
        parts.push_back(seq({json::as_content(chars(CharSet(used).complement())), any}));
        done[k] = alt(std::move(parts));
    }
    return done[0];
}

rapidjson::Document parse_schema(std::string_view text) {
    rapidjson::Document doc;
    doc.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag>(text.data(), text.size());
    if (doc.HasParseError())
        throw SchemaError("", "",
                          std::string("not valid JSON: ") + rapidjson::GetParseError_En(doc.GetParseError()) +
                              " at offset " + std::to_string(doc.GetErrorOffset()));
    return doc;
}

}  // namespace

Rules json_schema_rules(std::string_view schema_json, const JsonOptions& opts) {
    const rapidjson::Document doc = parse_schema(schema_json);
    Compiler c(doc, opts);
    c.compile_root();
    return std::move(c.rules);
}

Rules json_object_rules(const JsonOptions& opts) {
    rapidjson::Document doc;
    doc.SetObject();
    Compiler c(doc, opts);
    c.compile_any_object();
    return std::move(c.rules);
}

}  // namespace loom::grammar
