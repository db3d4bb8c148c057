// Jinja2's builtin filters on strings and scalars (plus transformers' tojson); the lookup of all filters.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/interp.hpp"
#include "jinja/pystr.hpp"

namespace loom::jinja {

namespace {

using Fn = detail::FilterFn;

Value f_abs(Interp&, const Value& v, CallArgs&) {
    if (v.is_float()) return Value(std::fabs(v.get_float()));
    if (v.is_int() || v.is_bool()) {
        if (v.int_like() == INT64_MIN) throw TemplateError("integer overflow");
        return Value(static_cast<int64_t>(std::llabs(v.int_like())));
    }
    throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_attr(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("attr", a, {"name"});
    if (!b.get(0) || !b.get(0)->is_string()) throw TemplateError("attribute name must be string");
    const std::string& name = b.get(0)->str();
    if (v.is_undefined()) in.raise_undefined(v);
    if (v.is_namespace() || v.kind() == Value::Kind::Loop) return in.get_attr(v, name);
    bool unsafe = false;
    Value m = bound_method(v, name, unsafe);
    if (unsafe) return Value::undefined_member(v, Value(name), true);
    return m.is_undefined() ? Value::undefined_member(v, Value(name)) : m;
}

Value f_capitalize(Interp&, const Value& v, CallArgs&) { return Value(py::capitalize(soft_str(v))); }
Value f_lower(Interp&, const Value& v, CallArgs&) { return Value(py::lower(soft_str(v))); }
Value f_upper(Interp&, const Value& v, CallArgs&) { return Value(py::upper(soft_str(v))); }
Value f_title(Interp&, const Value& v, CallArgs&) { return Value(py::jinja_title(soft_str(v))); }
Value f_string(Interp&, const Value& v, CallArgs&) { return v.is_string() ? v : Value(soft_str(v)); }
Value f_safe(Interp&, const Value& v, CallArgs&) { return v.is_string() ? v : Value(soft_str(v)); }

Value f_center(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("center", a, {"width"});
    int64_t w = b.get(0) ? b.get(0)->int_like() : 80;
    in.check_size(static_cast<size_t>(std::max<int64_t>(0, w)));
    return Value(py::pad(soft_str(v), w, ' ', 0));
}

Value f_length(Interp& in, const Value& v, CallArgs&) { return Value(in.length(v)); }

Value f_default(Interp&, const Value& v, CallArgs& a) {
    ArgBinder b("default", a, {"default_value", "boolean"});
    bool boolean = b.get(1) && b.get(1)->truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return b.get_or(0, Value(""));
    return v;
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}
Value f_escape(Interp&, const Value& v, CallArgs&) { return Value(html_escape(soft_str(v))); }

std::optional<double> parse_float(std::string s) {
    s = py::strip(s, std::nullopt, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return std::nullopt;
    std::string low = py::lower(s);
    std::string body = low[0] == '+' || low[0] == '-' ? low.substr(1) : low;
    if (body == "inf" || body == "infinity" || body == "nan") {
        double d = body == "nan" ? NAN : INFINITY;
        return low[0] == '-' ? -d : d;
    }
    if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return d;
}

Value f_float(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("float", a, {"default"});
    if (v.is_undefined()) in.raise_undefined(v);
    if (v.is_number()) return Value(v.number());
    if (v.is_string())
        if (auto d = parse_float(v.str())) return Value(*d);
    return b.get_or(0, Value(0.0));
}

Value f_int(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("int", a, {"default", "base"});
    Value def = b.get_or(0, Value(0));
    int64_t base = b.get(1) ? b.get(1)->int_like() : 10;
    if (v.is_undefined()) in.raise_undefined(v);
    if (v.is_int() || v.is_bool()) return Value(v.int_like());
    if (v.is_float()) {
        double d = v.get_float();
        if (std::isnan(d)) return def;  // int(nan) raises ValueError, which the filter catches
        // Python would return a big int (int(inf) raises OverflowError, not caught).
        if (std::fabs(d) >= 9.2e18) throw TemplateError("integer overflow (templates use 64-bit integers)");
        return Value(static_cast<int64_t>(d));
    }
    if (v.is_string()) {
        std::string s = py::strip(v.str(), std::nullopt, true, true);
        s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
        std::string digits = s;
        if (base == 16 || base == 8 || base == 2 || base == 0) {
            std::string l = py::lower(s);
            size_t k = (!l.empty() && (l[0] == '-' || l[0] == '+')) ? 1 : 0;
            if (l.compare(k, 2, "0x") == 0 && (base == 16 || base == 0))
                base = 16, digits = s.substr(0, k) + s.substr(k + 2);
            else if (l.compare(k, 2, "0o") == 0 && (base == 8 || base == 0))
                base = 8, digits = s.substr(0, k) + s.substr(k + 2);
            else if (l.compare(k, 2, "0b") == 0 && (base == 2 || base == 0))
                base = 2, digits = s.substr(0, k) + s.substr(k + 2);
            else if (base == 0) base = 10;
        }
        if (!digits.empty() && base >= 2 && base <= 36) {
            char* end = nullptr;
            errno = 0;
            long long x = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
            if (end == digits.c_str() + digits.size() && errno == 0 &&
                std::isalnum(static_cast<unsigned char>(digits.back())))
                return Value(static_cast<int64_t>(x));
        }
        if (auto d = parse_float(v.str()); d && !std::isnan(*d)) {
            if (std::fabs(*d) >= 9.2e18) throw TemplateError("integer overflow (templates use 64-bit integers)");
            return Value(static_cast<int64_t>(*d));
        }
    }
    return def;
}

Value f_format(Interp& in, const Value& v, CallArgs& a) {
    if (!a.pos.empty() && !a.kw.empty())
        throw TemplateError("can't handle positional and keyword arguments at the same time");
    if (!a.kw.empty()) {
        auto o = make_deferred<Object>();
        for (auto& [k, x] : a.kw) o->set(k, x);
        return Value(percent_format(in, soft_str(v), Value::dict(o)));
    }
    return Value(percent_format(in, soft_str(v), Value::list(a.pos, Value::Kind::Tuple)));
}

Value f_indent(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("indent", a, {"width", "first", "blank"});
    std::string ind = "    ";
    if (b.get(0) && b.get(0)->is_string()) {
        ind = b.get(0)->str();
    } else if (b.get(0)) {
        int64_t w = std::max<int64_t>(0, b.get(0)->int_like());
        in.check_size(static_cast<size_t>(w));
        ind.assign(static_cast<size_t>(w), ' ');
    }
    bool first = b.get(1) && b.get(1)->truthy(), blank = b.get(2) && b.get(2)->truthy();
    if (v.is_undefined()) in.raise_undefined(v);
    if (v.kind() == Value::Kind::List) throw TemplateError("'list' object has no attribute 'splitlines'");
    if (v.kind() == Value::Kind::Tuple) throw TemplateError("can only concatenate tuple (not \"str\") to tuple");
    if (!v.is_string()) throw TemplateError(operand_error("+=", v, Value("")));
    std::vector<std::string> lines = py::splitlines(v.str() + "\n", false);
    std::string rv;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i) rv += "\n";
        if (i && (blank || !lines[i].empty())) rv += ind;
        rv += lines[i];
        in.check_size(rv.size());
    }
    if (first) rv = ind + rv;
    return Value(std::move(rv));
}

Value f_replace(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("replace", a, {"old", "new", "count"});
    if (!b.get(0) || !b.get(1)) throw TemplateError("replace() missing required arguments");
    int64_t count = b.get(2) && !b.get(2)->is_none() ? b.get(2)->int_like() : -1;
    std::string out = py::replace(soft_str(v), soft_str(*b.get(0)), soft_str(*b.get(1)), count);
    in.check_size(out.size());
    return Value(std::move(out));
}

double round_half_even(double x, int64_t digits) {
    if (!std::isfinite(x)) return x;
    if (digits >= 0) {
        if (digits > 330) return x;  // finer than any double
        std::string buf(700, '\0');
        snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(digits), x);
        return std::strtod(buf.c_str(), nullptr);
    }
    if (digits < -308) return std::copysign(0.0, x);
    double p = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(x / p) * p;
}

Value f_round(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("round", a, {"precision", "method"});
    int64_t prec = b.get(0) ? b.get(0)->int_like() : 0;
    std::string method = b.get(1) ? soft_str(*b.get(1)) : "common";
    if (method != "common" && method != "ceil" && method != "floor")
        throw TemplateError("method must be common, ceil or floor");
    if (v.is_undefined()) in.raise_undefined(v);
    if (method != "common" && !v.is_number()) {
        // Jinja2 computes value * 10**precision first, then math.ceil/floor of it.
        Value scaled = in.binary(detail::BinOp::Mul, v,
                                 Value(prec >= 0 && prec < 19 ? static_cast<int64_t>(std::pow(10, prec)) : 1));
        throw TemplateError("must be real number, not " + scaled.type_name());
    }
    if (!v.is_number()) throw TemplateError("type " + v.type_name() + " doesn't define __round__ method");
    if (method == "common") {
        if (!v.is_float()) {
            if (prec >= 0) return Value(v.int_like());
            double r = round_half_even(static_cast<double>(v.int_like()), prec);
            return Value(std::fabs(r) < 9.2e18 ? static_cast<int64_t>(r) : int64_t{0});
        }
        return Value(round_half_even(v.get_float(), prec));
    }
    double p = std::pow(10.0, static_cast<double>(prec));
    double x = v.number() * p;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value f_striptags(Interp&, const Value& v, CallArgs&) {
    std::string s = soft_str(v), out;
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, 4, "<!--") == 0) {
            size_t e = s.find("-->", i + 4);
            if (e != std::string::npos) {
                i = e + 3;
                continue;
            }
        }
        if (s[i] == '<') {
            size_t e = s.find('>', i + 1);
            if (e != std::string::npos) {
                i = e + 1;
                continue;
            }
        }
        out += s[i++];
    }
    std::string joined;
    for (auto& w : py::split(out, std::nullopt, -1, false)) joined += (joined.empty() ? "" : " ") + w;
    static const std::pair<const char*, const char*> ents[] = {{"&amp;", "&"},        {"&lt;", "<"},   {"&gt;", ">"},
                                                               {"&quot;", "\""},      {"&#34;", "\""}, {"&#39;", "'"},
                                                               {"&nbsp;", "\xC2\xA0"}};
    for (auto& [e, r] : ents) joined = py::replace(joined, e, r, -1);
    return Value(joined);
}

Value f_tojson(Interp&, const Value& v, CallArgs& a) {
    ArgBinder b("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions o;
    o.ensure_ascii = b.get(0) && b.get(0)->truthy();
    if (const Value* ind = b.get(1); ind && !ind->is_none()) {
        o.pretty = true;
        o.item_sep = ",";
        if (ind->is_string()) o.indent = ind->str();
        else if (ind->is_int() || ind->is_bool())
            o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(ind->int_like(), 0, 1 << 24)), ' ');
        else throw TemplateError("indent must be an int or a string");
    }
    if (const Value* sep = b.get(2); sep && !sep->is_none()) {
        std::vector<Value> parts = sep->is_sequence() ? sep->items() : std::vector<Value>{};
        if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
            throw TemplateError("separators must be a pair of strings");
        o.item_sep = parts[0].str();
        o.key_sep = parts[1].str();
    }
    o.sort_keys = b.get(3) && b.get(3)->truthy();
    return Value(to_json(v, o));
}

Value f_trim(Interp&, const Value& v, CallArgs& a) {
    ArgBinder b("trim", a, {"chars"});
    std::optional<std::string> chars;
    if (b.get(0) && !b.get(0)->is_none()) chars = soft_str(*b.get(0));
    return Value(py::strip(soft_str(v), chars, true, true));
}

Value f_truncate(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("truncate", a, {"length", "killwords", "end", "leeway"});
    int64_t length = b.get(0) ? b.get(0)->int_like() : 255;
    bool kill = b.get(1) && b.get(1)->truthy();
    std::string end = b.get(2) ? soft_str(*b.get(2)) : "...";
    int64_t leeway = b.get(3) && !b.get(3)->is_none() ? b.get(3)->int_like() : 5;
    auto end_len = static_cast<int64_t>(py::length(end));
    if (length < end_len) throw TemplateError("expected length >= " + std::to_string(end_len));
    if (v.is_undefined()) return v;
    if (!v.is_string()) {
        if (in.length(v) <= length + leeway) return v;
        throw TemplateError(operand_error("+", v, Value("")));
    }
    const std::string& s = v.str();
    if (static_cast<int64_t>(py::length(s)) <= length + leeway) return v;
    std::string head = py::slice(s, 0, length - end_len, 1);
    if (kill) return Value(head + end);
    auto parts = py::split(head, std::string(" "), 1, true);
    return Value(parts[0] + end);
}

Value f_wordcount(Interp&, const Value& v, CallArgs&) {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : py::decode(soft_str(v))) {
        bool w = py::is_word(c);
        if (w && !in_word) ++n;
        in_word = w;
    }
    return Value(n);
}

Value f_filesizeformat(Interp&, const Value& v, CallArgs& a) {
    ArgBinder b("filesizeformat", a, {"binary"});
    bool binary = b.get(0) && b.get(0)->truthy();
    double bytes = v.is_number() ? v.number() : parse_float(soft_str(v)).value_or(NAN);
    if (std::isnan(bytes)) throw TemplateError("could not convert string to float");
    double base = binary ? 1024 : 1000;
    static const char* dec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    static const char* bin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
    if (bytes == 1) return Value("1 Byte");
    if (bytes < base) return Value(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
    char buf[64];
    double unit = base;
    int i = 0;
    for (; i < 8; ++i) {
        unit = std::pow(base, i + 2);
        if (bytes < unit) break;
    }
    if (i == 8) i = 7;
    snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, binary ? bin[i] : dec[i]);
    return Value(buf);
}

const detail::NamedFn<detail::FilterFn> kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"e", f_escape},
    {"escape", f_escape},
    {"filesizeformat", f_filesizeformat},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"length", f_length},
    {"lower", f_lower},
    {"replace", f_replace},
    {"round", f_round},
    {"safe", f_safe},
    {"string", f_string},
    {"striptags", f_striptags},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

}  // namespace

namespace detail {

FilterFn find_filter(std::string_view name) {
    if (FilterFn f = find_named(kFilters, name)) return f;
    return find_sequence_filter(name);
}

}  // namespace detail

}  // namespace loom::jinja
