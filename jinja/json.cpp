// Python json.dumps emulation for the tojson filter (key order, separators, float repr).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/interp.hpp"
#include "jinja/pystr.hpp"
#include "jinja/value_impl.hpp"

namespace loom::jinja {

namespace {

void quote(const std::string& s, bool ensure_ascii, std::string& out) {
    out.push_back('"');
    char buf[16];
    auto u = [&](unsigned cp) {
        snprintf(buf, sizeof buf, "\\u%04x", cp);
        out += buf;
    };
    // Python's json escapes for '"', '\\' and the control characters it names; false for others.
    auto named = [&](char32_t c) {
        switch (c) {
            case '"': out += "\\\""; return true;
            case '\\': out += "\\\\"; return true;
            case '\n': out += "\\n"; return true;
            case '\r': out += "\\r"; return true;
            case '\t': out += "\\t"; return true;
            case '\b': out += "\\b"; return true;
            case '\f': out += "\\f"; return true;
            default: return false;
        }
    };
    if (!ensure_ascii) {
        for (char ch : s) {
            const auto c = static_cast<unsigned char>(ch);
            if (named(c)) continue;
            if (c < 0x20) u(c);
            else out.push_back(ch);
        }
    } else {
        for (char32_t c : py::decode(s)) {
            if (named(c)) continue;
            if (c > 0xFFFF) {
                const char32_t v = c - 0x10000;
                u(0xD800 + (v >> 10));
                u(0xDC00 + (v & 0x3FF));
            } else if (c < 0x20 || c > 0x7E) {
                u(c);
            } else {
                out.push_back(static_cast<char>(c));
            }
        }
    }
    out.push_back('"');
}

std::string float_json(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    return py::float_repr(d);
}

[[noreturn]] void not_serializable(const Value& v) {
    std::string t = v.type_name();
    if (v.is_callable()) t = v.fn().repr.rfind("<Macro", 0) == 0 ? "Macro" : "function";
    throw TemplateError("Object of type " + t + " is not JSON serializable");
}

class Dumper {
public:
    explicit Dumper(const JsonOptions& o) : o_(o) {}

    void dump(const Value& v, int level, std::string& out) {
        if (level > 500) throw TemplateError("Circular reference detected");
        if (out.size() > print_limit())
            throw TemplateError("JSON exceeds the size limit of " + std::to_string(print_limit()) + " bytes");
        switch (v.kind()) {
            case Value::Kind::None: out += "null"; return;
            case Value::Kind::Bool: out += v.get_bool() ? "true" : "false"; return;
            case Value::Kind::Int: out += std::to_string(v.get_int()); return;
            case Value::Kind::Float: out += float_json(v.get_float()); return;
            case Value::Kind::String: quote(v.str(), o_.ensure_ascii, out); return;
            case Value::Kind::List:
            case Value::Kind::Tuple: {
                const auto& items = v.items();
                if (items.empty()) {
                    out += "[]";
                    return;
                }
                out += '[';
                for (size_t i = 0; i < items.size(); ++i) {
                    if (i) out += o_.item_sep;
                    newline(level + 1, out);
                    dump(items[i], level + 1, out);
                }
                newline(level, out);
                out += ']';
                return;
            }
            case Value::Kind::Dict: {
                const Object& obj = v.obj();
                if (obj.empty()) {
                    out += "{}";
                    return;
                }
                std::vector<std::pair<std::string, const Value*>> entries;
                entries.reserve(obj.size());
                for (const auto& [k, x] : obj.entries()) entries.emplace_back(key(k), &x);
                if (o_.sort_keys) {
                    bool all_str = true, all_num = true;
                    for (const auto& [k, x] : obj.entries()) {
                        (void)x;
                        all_str &= k.is_string();
                        all_num &= k.is_number();
                    }
                    if (!all_str && !all_num)
                        throw TemplateError("'<' not supported between instances of 'int' and 'str'");
                    std::vector<size_t> idx(entries.size());
                    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
                    const auto& es = obj.entries();
                    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
                        return all_str ? es[a].first.str() < es[b].first.str()
                                       : es[a].first.number() < es[b].first.number();
                    });
                    std::vector<std::pair<std::string, const Value*>> sorted;
                    for (size_t i : idx) sorted.push_back(entries[i]);
                    entries = std::move(sorted);
                }
                out += '{';
                for (size_t i = 0; i < entries.size(); ++i) {
                    if (i) out += o_.item_sep;
                    newline(level + 1, out);
                    quote(entries[i].first, o_.ensure_ascii, out);
                    out += o_.key_sep;
                    dump(*entries[i].second, level + 1, out);
                }
                newline(level, out);
                out += '}';
                return;
            }
            default: not_serializable(v);
        }
    }

private:
    void newline(int level, std::string& out) const {
        if (!o_.pretty) return;
        out += '\n';
        for (int i = 0; i < level; ++i) {
            out += o_.indent;
            if (out.size() > print_limit())
                throw TemplateError("JSON exceeds the size limit of " + std::to_string(print_limit()) + " bytes");
        }
    }

    static std::string key(const Value& k) {
        switch (k.kind()) {
            case Value::Kind::String: return k.str();
            case Value::Kind::Bool: return k.get_bool() ? "true" : "false";
            case Value::Kind::Int: return std::to_string(k.get_int());
            case Value::Kind::Float: return float_json(k.get_float());
            case Value::Kind::None: return "null";
            default: throw TemplateError("keys must be str, int, float, bool or None, not " + k.type_name());
        }
    }

    const JsonOptions& o_;
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
    std::string out;
    Dumper(opts).dump(v, 0, out);
    if (out.size() > print_limit())
        throw TemplateError("JSON exceeds the size limit of " + std::to_string(print_limit()) + " bytes");
    return out;
}

}  // namespace loom::jinja
