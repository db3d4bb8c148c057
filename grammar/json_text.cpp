// JSON string spelling, escapes and the JSON Schema string formats; see json_text.hpp.
#include "grammar/json_text.hpp"

#include <cstdio>
#include <unordered_map>

#include "grammar/regex.hpp"

namespace loom::grammar::json {
namespace {

// Code points that JSON string content cannot hold unescaped.
CharSet special_set() { return CharSet({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}}); }

void escape_cp(std::string& out, uint32_t cp) {
    switch (cp) {
        case '"': out += "\\\""; return;
        case '\\': out += "\\\\"; return;
        case '\b': out += "\\b"; return;
        case '\f': out += "\\f"; return;
        case '\n': out += "\\n"; return;
        case '\r': out += "\\r"; return;
        case '\t': out += "\\t"; return;
        default: {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            out += buf;
        }
    }
}

ExprPtr content_chars(const CharSet& set) {
    std::vector<ExprPtr> parts{chars(set - special_set())};
    const CharSet specials = set & special_set();
    for (auto [lo, hi] : specials.ranges())
        for (uint32_t cp = lo; cp <= hi; ++cp) {
            std::string s;
            escape_cp(s, cp);
            parts.push_back(lit(s));
        }
    return alt(std::move(parts));
}

ExprPtr map_content(const ExprPtr& e, std::unordered_map<const Expr*, ExprPtr>& memo) {
    if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
    ExprPtr out;
    switch (e->kind) {
        case ExprKind::Empty:
        case ExprKind::Nothing: out = e; break;
        case ExprKind::Chars: out = content_chars(e->chars); break;
        case ExprKind::Literal: {
            std::vector<ExprPtr> parts;
            size_t pos = 0;
            uint32_t cp;
            while (pos < e->text.size()) {
                if (!next_utf8(e->text, pos, cp)) throw GrammarError("string content is not valid UTF-8");
                parts.push_back(content_chars(CharSet::single(cp)));
            }
            out = seq(std::move(parts));
            break;
        }
        case ExprKind::Seq:
        case ExprKind::Alt: {
            std::vector<ExprPtr> items;
            for (const auto& it : e->items) items.push_back(map_content(it, memo));
            out = e->kind == ExprKind::Seq ? seq(std::move(items)) : alt(std::move(items));
            break;
        }
        case ExprKind::Repeat: out = repeat(map_content(e->items[0], memo), e->min, e->max); break;
        case ExprKind::Ref:
        case ExprKind::Dfa: throw GrammarError("a rule or byte automaton cannot be string content");
    }
    memo.emplace(e.get(), out);
    return out;
}

// RFC 3339 full-date with the days of each month, February 29 only in leap years, and no
// year 0000 (which many date libraries cannot represent).
constexpr const char* kDate =
    "(?:(?:000[1-9]|00[1-9]\\d|0[1-9]\\d\\d|[1-9]\\d{3})-"
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))"
    "|(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
// RFC 3339 full-time: a fraction of at most 9 digits, an offset always; no leap second.
constexpr const char* kTime =
    "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
// RFC 3339 appendix A duration.
constexpr const char* kDuration =
    "P(?:(?:\\d+D|\\d+M(?:\\d+D)?|\\d+Y(?:\\d+M(?:\\d+D)?)?)(?:T(?:\\d+H(?:\\d+M(?:\\d+S)?)?|\\d+M(?:\\d+S)?|\\d+S))?"
    "|T(?:\\d+H(?:\\d+M(?:\\d+S)?)?|\\d+M(?:\\d+S)?|\\d+S)|\\d+W)";
constexpr const char* kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
constexpr const char* kAtom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
constexpr const char* kOctet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
constexpr const char* kH16 = "[0-9A-Fa-f]{1,4}";

std::string ipv6_pattern() {
    const std::string h = kH16;
    // RFC 4291 2.2 form 1 (eight groups) and form 2: L groups, "::" for at least one zero
    // group, then R <= 7 - L groups.
    std::string p = "(?:(?:" + h + ":){7}" + h;
    for (int left = 0; left <= 7; ++left) {
        const int right_max = 7 - left;
        p += '|';
        if (left == 0) p += "::";
        else p += "(?:" + h + ":){" + std::to_string(left) + "}:";
        if (right_max > 0) p += "(?:" + h + "(?::" + h + "){0," + std::to_string(right_max - 1) + "})?";
    }
    return p + ")";
}

}  // namespace

std::string quote(std::string_view s) {
    std::string out = "\"";
    size_t pos = 0;
    uint32_t cp;
    while (pos < s.size()) {
        const size_t start = pos;
        if (!next_utf8(s, pos, cp)) throw GrammarError("string is not valid UTF-8");
        if (cp < 0x20 || cp == '"' || cp == '\\') escape_cp(out, cp);
        else out.append(s.substr(start, pos - start));
    }
    out += '"';
    return out;
}

ExprPtr any_char() {
    static const ExprPtr e = [] {
        const ExprPtr hex = chars(CharSet({{'0', '9'}, {'A', 'F'}, {'a', 'f'}}));
        const ExprPtr d = chars(CharSet({{'D', 'D'}, {'d', 'd'}}));
        // \uXXXX outside the surrogates, or a high surrogate followed by a low one.
        const ExprPtr bmp = alt({seq({chars(CharSet({{'0', '9'}, {'A', 'C'}, {'a', 'c'}})), hex, hex, hex}),
                                 seq({d, chars(CharSet::range('0', '7')), hex, hex}),
                                 seq({chars(CharSet({{'E', 'F'}, {'e', 'f'}})), hex, hex, hex})});
        const ExprPtr pair = seq({d, chars(CharSet({{'8', '9'}, {'A', 'B'}, {'a', 'b'}})), hex, hex, lit("\\u"), d,
                                  chars(CharSet({{'C', 'F'}, {'c', 'f'}})), hex, hex});
        const ExprPtr esc = seq({lit("\\"), alt({chars(CharSet({{'"', '"'},
                                                                {'/', '/'},
                                                                {'\\', '\\'},
                                                                {'b', 'b'},
                                                                {'f', 'f'},
                                                                {'n', 'n'},
                                                                {'r', 'r'},
                                                                {'t', 't'}})),
                                                 seq({lit("u"), alt({bmp, pair})})})});
        return alt({chars(CharSet::all() - special_set()), esc});
    }();
    return e;
}

ExprPtr as_content(const ExprPtr& e) {
    std::unordered_map<const Expr*, ExprPtr> memo;
    return map_content(e, memo);
}

ExprPtr format_text(std::string_view name) {
    std::string p;
    const std::string host = std::string(kLabel) + "(?:\\." + kLabel + ")*";
    if (name == "date") p = kDate;
    else if (name == "time") p = kTime;
    else if (name == "date-time") p = std::string(kDate) + "T" + kTime;
    else if (name == "duration") p = kDuration;
    else if (name == "hostname") p = host;
    else if (name == "email") p = std::string(kAtom) + "(?:\\." + kAtom + ")*@" + host;
    else if (name == "ipv4") p = std::string("(?:") + kOctet + "\\.){3}" + kOctet;
    else if (name == "ipv6") p = ipv6_pattern();
    else if (name == "uuid") p = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";
    else return nullptr;
    return parse_regex(p, RegexMatch::Full);
}

}  // namespace loom::grammar::json
