// Constraint entry points and their text form; see compile.hpp.
#include "grammar/compile.hpp"

#include <functional>
#include <unordered_map>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "grammar/json_text.hpp"
#include "grammar/regex.hpp"

namespace loom::grammar {
namespace {

Grammar build(const Rules& rules) { return Grammar::from_rules(rules); }

std::string percent_encode(std::string_view s) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (char ch : s) {
        const auto c = static_cast<uint8_t>(ch);
        if (c <= 0x20 || c == 0x7F || c == '%') {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += ch;
        }
    }
    return out;
}

std::string percent_decode(std::string_view s) {
    auto val = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        return -1;
    };
    std::string out;
    for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] != '%') {
            out += s[k];
            continue;
        }
        if (k + 2 >= s.size()) throw GrammarError("constraint: '%' without two hex digits at the end");
        const int a = val(s[k + 1]), b = val(s[k + 2]);
        if (a < 0 || b < 0) throw GrammarError("constraint: bad percent escape");
        out += static_cast<char>(a * 16 + b);
        k += 2;
    }
    return out;
}

// Copies the rules of `from` into `into`, their Refs renumbered (shared sub-expressions stay
// shared); returns the id `from.root` has in `into`.
int32_t absorb(Rules& into, const Rules& from) {
    const int32_t base = into.size();
    for (int32_t id = 0; id < from.size(); ++id) into.add(from.name(id));
    std::unordered_map<const Expr*, ExprPtr> done;
    std::function<ExprPtr(const ExprPtr&)> move = [&](const ExprPtr& e) -> ExprPtr {
        if (e->kind == ExprKind::Ref) return ref(e->rule + base);
        if (e->items.empty()) return e;
        if (auto it = done.find(e.get()); it != done.end()) return it->second;
        auto copy = std::make_shared<Expr>(*e);
        for (ExprPtr& x : copy->items) x = move(x);
        ExprPtr out = copy;
        done.emplace(e.get(), out);
        return out;
    };
    for (int32_t id = 0; id < from.size(); ++id) into.define(base + id, move(from.body(id)));
    return from.root + base;
}

TaggedJson parse_tagged(std::string_view source) {
    const char* shape =
        "constraint: tagged_json: wants {\"prefix\", \"suffix\", \"separator\": strings, \"repeat\": boolean, "
        "\"alternatives\": a non-empty array of non-empty arrays of strings and JSON Schemas}";
    rapidjson::Document d;
    d.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseIterativeFlag>(source.data(), source.size());
    if (d.HasParseError() || !d.IsObject()) throw GrammarError(shape);
    TaggedJson t;
    bool have_alts = false;
    for (auto m = d.MemberBegin(); m != d.MemberEnd(); ++m) {
        const std::string_view k(m->name.GetString(), m->name.GetStringLength());
        const auto& v = m->value;
        if ((k == "prefix" || k == "suffix" || k == "separator") && v.IsString()) {
            (k == "prefix"   ? t.prefix
             : k == "suffix" ? t.suffix
                             : t.separator) = std::string(v.GetString(), v.GetStringLength());
        } else if (k == "repeat" && v.IsBool()) {
            t.repeat = v.GetBool();
        } else if (k == "alternatives" && v.IsArray() && !v.Empty()) {
            have_alts = true;
            for (const auto& a : v.GetArray()) {
                if (!a.IsArray() || a.Empty()) throw GrammarError(shape);
                auto& pieces = t.alternatives.emplace_back();
                for (const auto& x : a.GetArray()) {
                    if (x.IsString()) {
                        pieces.push_back({false, std::string(x.GetString(), x.GetStringLength())});
                    } else if (x.IsObject() || x.IsBool()) {
                        rapidjson::StringBuffer buf;
                        rapidjson::Writer<rapidjson::StringBuffer> w(buf);
                        x.Accept(w);
                        pieces.push_back({true, std::string(buf.GetString(), buf.GetSize())});
                    } else {
                        throw GrammarError(shape);
                    }
                }
            }
        } else {
            throw GrammarError(shape);
        }
    }
    if (!have_alts) throw GrammarError(shape);
    return t;
}

}  // namespace

Grammar compile_json_schema(std::string_view schema_json, const JsonOptions& opts) {
    return build(json_schema_rules(schema_json, opts));
}

Grammar compile_json_object(const JsonOptions& opts) { return build(json_object_rules(opts)); }

namespace {

Rules tagged_rules(const TaggedJson& t, const JsonOptions& opts) {
    auto utf8 = [](std::string_view text) {
        size_t pos = 0;
        uint32_t cp;
        while (pos < text.size())
            if (!next_utf8(text, pos, cp)) throw GrammarError("tagged_json: a literal is not valid UTF-8");
    };
    for (std::string_view tag : {t.prefix, t.suffix, t.separator}) utf8(tag);
    if (t.alternatives.empty()) throw GrammarError("tagged_json: no alternatives");
    Rules r;
    std::vector<ExprPtr> alts;
    for (const auto& pieces : t.alternatives) {
        if (pieces.empty()) throw GrammarError("tagged_json: an alternative has no pieces");
        std::vector<ExprPtr> items;
        for (const TaggedPiece& p : pieces) {
            if (p.schema) {
                items.push_back(ref(absorb(r, json_schema_rules(p.text, opts))));
            } else {
                utf8(p.text);
                items.push_back(lit(p.text));
            }
        }
        alts.push_back(seq(std::move(items)));
    }
    const int32_t item = r.add("tagged_item");
    r.define(item, alt(std::move(alts)));
    r.root = r.add("tagged");
    ExprPtr body = t.repeat ? seq({ref(item), star(seq({lit(t.separator), ref(item)}))}) : ref(item);
    r.define(r.root, seq({lit(t.prefix), std::move(body), lit(t.suffix)}));
    return r;
}

Rules regex_rules(std::string_view pattern) {
    Rules r;
    r.root = r.add("root");
    r.define(r.root, parse_regex(pattern, RegexMatch::Full));
    return r;
}

Rules choice_rules(const std::vector<std::string>& choices) {
    if (choices.empty()) throw GrammarError("choice: the list of choices is empty");
    std::vector<ExprPtr> alts;
    for (const std::string& c : choices) {
        size_t pos = 0;
        uint32_t cp;
        while (pos < c.size())
            if (!next_utf8(c, pos, cp)) throw GrammarError("choice: a choice is not valid UTF-8");
        alts.push_back(lit(c));
    }
    Rules r;
    r.root = r.add("root");
    r.define(r.root, alt(std::move(alts)));
    return r;
}

Rules rules_of(const Constraint& c, const JsonOptions& opts) {
    switch (c.kind) {
        case Constraint::Kind::JsonObject: return json_object_rules(opts);
        case Constraint::Kind::JsonSchema: return json_schema_rules(c.text, opts);
        case Constraint::Kind::Regex: return regex_rules(c.text);
        case Constraint::Kind::Choice: return choice_rules(c.choices);
        case Constraint::Kind::TaggedJson: return tagged_rules(c.tagged, opts);
    }
    throw GrammarError("unknown constraint kind");
}

}  // namespace

Grammar compile_regex(std::string_view pattern) { return build(regex_rules(pattern)); }

Grammar compile_choice(const std::vector<std::string>& choices) { return build(choice_rules(choices)); }

Grammar compile_tagged_json(const TaggedJson& t, const JsonOptions& opts) { return build(tagged_rules(t, opts)); }

std::string tagged_json_source(const TaggedJson& t) {
    std::string out = "{";
    for (const auto& [key, val] : {std::pair{"prefix", &t.prefix}, {"suffix", &t.suffix}, {"separator", &t.separator}})
        if (!val->empty()) {
            out += '"';
            out += key;
            out += "\":" + json::quote(*val) + ",";
        }
    out += std::string("\"repeat\":") + (t.repeat ? "true" : "false") + ",\"alternatives\":[";
    for (size_t a = 0; a < t.alternatives.size(); ++a) {
        out += a ? ",[" : "[";
        for (size_t k = 0; k < t.alternatives[a].size(); ++k) {
            if (k) out += ',';
            const TaggedPiece& p = t.alternatives[a][k];
            out += p.schema ? p.text : json::quote(p.text);
        }
        out += ']';
    }
    return out + "]}";
}

Grammar compile(const Constraint& c, const JsonOptions& opts) {
    return build(after_reasoning(rules_of(c, opts), c.reasoning));
}

std::string Constraint::to_text() const {
    switch (kind) {
        case Kind::JsonObject: return "json_object";
        case Kind::JsonSchema: return "json_schema:" + percent_encode(text);
        case Kind::Regex: return "regex:" + percent_encode(text);
        case Kind::Choice: {
            std::string arr = "[";
            for (size_t k = 0; k < choices.size(); ++k) {
                if (k) arr += ',';
                arr += json::quote(choices[k]);
            }
            return "choice:" + percent_encode(arr + "]");
        }
        case Kind::TaggedJson: return "tagged_json:" + percent_encode(tagged_json_source(tagged));
    }
    return "";
}

Constraint Constraint::from_source(std::string_view kind, std::string_view source) {
    Constraint c;
    if (kind == "json_object") {
        if (!source.empty()) throw GrammarError("constraint: json_object takes no source");
        c.kind = Kind::JsonObject;
    } else if (kind == "json_schema") {
        c.kind = Kind::JsonSchema;
        c.text = std::string(source);
    } else if (kind == "regex") {
        c.kind = Kind::Regex;
        c.text = std::string(source);
    } else if (kind == "choice") {
        c.kind = Kind::Choice;
        rapidjson::Document d;
        d.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseIterativeFlag>(source.data(), source.size());
        if (d.HasParseError() || !d.IsArray()) throw GrammarError("constraint: choice: wants a JSON array of strings");
        for (const auto& x : d.GetArray()) {
            if (!x.IsString()) throw GrammarError("constraint: choice: wants a JSON array of strings");
            c.choices.emplace_back(x.GetString(), x.GetStringLength());
        }
    } else if (kind == "tagged_json") {
        c.kind = Kind::TaggedJson;
        c.tagged = parse_tagged(source);
    } else {
        throw GrammarError("constraint: unknown kind '" + std::string(kind) +
                           "' (want json_object, json_schema, regex, choice or tagged_json)");
    }
    return c;
}

Constraint Constraint::from_text(std::string_view t) {
    if (t == "json_object") return from_source(t, "");
    const size_t colon = t.find(':');
    if (colon == std::string_view::npos || t.substr(0, colon) == "json_object")
        throw GrammarError("constraint: unknown kind (want json_object, json_schema:, regex: or choice:)");
    try {
        return from_source(t.substr(0, colon), percent_decode(t.substr(colon + 1)));
    } catch (const GrammarError& e) {
        if (std::string_view(e.what()).starts_with("constraint: unknown kind"))
            throw GrammarError("constraint: unknown kind (want json_object, json_schema:, regex: or choice:)");
        throw;
    }
}

}  // namespace loom::grammar
