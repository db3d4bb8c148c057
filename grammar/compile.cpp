// Constraint entry points and their text form; see compile.hpp.
#include "grammar/compile.hpp"

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

}  // namespace

Grammar compile_json_schema(std::string_view schema_json, const JsonOptions& opts) {
    return build(json_schema_rules(schema_json, opts));
}

Grammar compile_json_object(const JsonOptions& opts) { return build(json_object_rules(opts)); }

Grammar compile_regex(std::string_view pattern) {
    Rules r;
    r.root = r.add("root");
    r.define(r.root, parse_regex(pattern, RegexMatch::Full));
    return build(r);
}

Grammar compile_choice(const std::vector<std::string>& choices) {
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
    return build(r);
}

Grammar compile_tagged_json(std::string_view begin, std::string_view schema_json, std::string_view end, bool repeat,
                            std::string_view separator, const JsonOptions& opts) {
    for (std::string_view tag : {begin, end, separator}) {
        size_t pos = 0;
        uint32_t cp;
        while (pos < tag.size())
            if (!next_utf8(tag, pos, cp)) throw GrammarError("tagged_json: a tag is not valid UTF-8");
    }
    Rules r = json_schema_rules(schema_json, opts);
    const int32_t value = r.root;
    const int32_t item = r.add("tagged_item");
    r.define(item, seq({lit(begin), ref(value), lit(end)}));
    r.root = r.add("tagged");
    r.define(r.root, repeat ? seq({ref(item), star(seq({lit(separator), ref(item)}))}) : ref(item));
    return build(r);
}

Grammar compile(const Constraint& c, const JsonOptions& opts) {
    switch (c.kind) {
        case Constraint::Kind::JsonObject: return compile_json_object(opts);
        case Constraint::Kind::JsonSchema: return compile_json_schema(c.text, opts);
        case Constraint::Kind::Regex: return compile_regex(c.text);
        case Constraint::Kind::Choice: return compile_choice(c.choices);
        case Constraint::Kind::TaggedJson:
            return compile_tagged_json(c.begin, c.text, c.end, c.repeat, c.separator, opts);
    }
    throw GrammarError("unknown constraint kind");
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
        case Kind::TaggedJson:
            return "tagged_json:" + percent_encode("{\"begin\":" + json::quote(begin) + ",\"end\":" + json::quote(end) +
                                                   ",\"separator\":" + json::quote(separator) + ",\"repeat\":" +
                                                   (repeat ? "true" : "false") + ",\"schema\":" + text + "}");
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
        rapidjson::Document d;
        d.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseIterativeFlag>(source.data(), source.size());
        const char* shape =
            "constraint: tagged_json: wants {\"begin\", \"end\", \"separator\": strings, \"repeat\": boolean, "
            "\"schema\": a JSON Schema}";
        if (d.HasParseError() || !d.IsObject()) throw GrammarError(shape);
        for (auto m = d.MemberBegin(); m != d.MemberEnd(); ++m) {
            const std::string_view k(m->name.GetString(), m->name.GetStringLength());
            const auto& v = m->value;
            if ((k == "begin" || k == "end" || k == "separator") && v.IsString()) {
                (k == "begin" ? c.begin
                 : k == "end" ? c.end
                              : c.separator) = std::string(v.GetString(), v.GetStringLength());
            } else if (k == "repeat" && v.IsBool()) {
                c.repeat = v.GetBool();
            } else if (k == "schema" && (v.IsObject() || v.IsBool())) {
                rapidjson::StringBuffer buf;
                rapidjson::Writer<rapidjson::StringBuffer> w(buf);
                v.Accept(w);
                c.text.assign(buf.GetString(), buf.GetSize());
            } else {
                throw GrammarError(shape);
            }
        }
        if (c.text.empty()) throw GrammarError(shape);
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
