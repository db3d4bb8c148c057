// Python string formatting for templates: `fmt % args` and str.format(...).
#include <cmath>
#include <cstdio>

#include "jinja/interp.hpp"
#include "jinja/pystr.hpp"

namespace loom::jinja {

namespace {

// snprintf into a heap buffer of the right size (`fmt` comes from validated pieces).
template <class T>
std::string c_format(const std::string& fmt, T value) {
    int n = std::snprintf(nullptr, 0, fmt.c_str(), value);
    if (n < 0) throw TemplateError("invalid format");
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), fmt.c_str(), value);
    out.resize(static_cast<size_t>(n));
    return out;
}

// Renders one replacement field's value with a (subset of the) format-spec mini-language.
std::string format_field(Interp& in, const Value& v, const std::string& spec) {
    if (spec.empty()) return v.to_str();
    size_t i = 0;
    char32_t fill = ' ';
    char align = 0;
    std::u32string sp = py::decode(spec);
    auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    if (sp.size() >= 2 && is_align(sp[1])) {
        fill = sp[0];
        align = static_cast<char>(sp[1]);
        i = 2;
    } else if (!sp.empty() && is_align(sp[0])) {
        align = static_cast<char>(sp[0]);
        i = 1;
    }
    char sign = 0;
    if (i < sp.size() && (sp[i] == '+' || sp[i] == '-' || sp[i] == ' ')) sign = static_cast<char>(sp[i++]);
    if (i < sp.size() && sp[i] == '#') ++i;
    if (i < sp.size() && sp[i] == '0') {
        if (!align) {
            fill = '0';
            align = '=';
        }
        ++i;
    }
    int64_t width = 0;
    while (i < sp.size() && sp[i] >= '0' && sp[i] <= '9') {
        width = width * 10 + (sp[i++] - '0');
        in.check_size(static_cast<size_t>(width));
    }
    int precision = -1;
    if (i < sp.size() && sp[i] == '.') {
        precision = 0;
        ++i;
        while (i < sp.size() && sp[i] >= '0' && sp[i] <= '9') {
            precision = precision * 10 + (sp[i++] - '0');
            if (precision > 400) throw TemplateError("precision too big");
        }
    }
    char type = i < sp.size() ? static_cast<char>(sp[i++]) : 0;
    if (i != sp.size()) throw TemplateError("Invalid format specifier");
    std::string body;
    if (v.is_string() || (!v.is_number() && !type)) {
        body = v.to_str();
        if (precision >= 0) body = py::slice(body, 0, precision, 1);
        if (!align) align = '<';
    } else if (v.is_number()) {
        char buf[1024];
        char t = type ? type : (v.is_float() ? 'r' : 'd');
        std::string sg = sign == '+' ? "+" : sign == ' ' ? " " : "";
        if (t == 'd' || t == 'x' || t == 'X' || t == 'o' || t == 'b') {
            if (v.is_float()) throw TemplateError("Unknown format code 'd' for object of type 'float'");
            int64_t x = v.int_like();
            unsigned long long ux =
                x < 0 ? 0ULL - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
            if (t == 'b') {
                std::string bits;
                do bits.insert(bits.begin(), static_cast<char>('0' + (ux & 1)));
                while (ux >>= 1);
                snprintf(buf, sizeof buf, "%s", bits.c_str());
            } else {
                snprintf(buf, sizeof buf, t == 'd' ? "%llu" : t == 'x' ? "%llx" : t == 'X' ? "%llX" : "%llo", ux);
            }
            body = (x < 0 ? "-" : sg) + buf;
        } else if (t == 'r') {
            body = (v.number() >= 0 && !std::signbit(v.number()) ? sg : "") + py::float_repr(v.number());
        } else {
            if (std::string("eEfFgG%").find(t) == std::string::npos)
                throw TemplateError(std::string("Unknown format code '") + t + "' for object of type '" +
                                    v.type_name() + "'");
            double d = v.number();
            std::string f = "%" + sg + "." + std::to_string(precision < 0 ? 6 : precision);
            if (t == '%') {
                d *= 100;
                f += "f";
            } else {
                f += std::string(1, t == 'F' ? 'f' : t);
            }
            body = c_format(f, d);
            if (t == '%') body += "%";
        }
        if (!align) align = '>';
    } else {
        body = v.to_str();
        if (!align) align = '<';
    }
    auto len = static_cast<int64_t>(py::length(body));
    if (width <= len) return body;
    std::string f;
    py::append_utf8(f, fill);
    int64_t pad = width - len, left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    std::string out;
    if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
        out += body[0];
        body.erase(0, 1);
    }
    for (int64_t k = 0; k < left; ++k) out += f;
    out += body;
    for (int64_t k = left; k < pad; ++k) out += f;
    return out;
}

}  // namespace

std::string str_format(Interp& in, const std::string& fmt, CallArgs& a) {
    std::string out;
    size_t auto_idx = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
        char c = fmt[i];
        if (c == '}') {
            if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
            else throw TemplateError("Single '}' encountered in format string");
            out += '}';
            continue;
        }
        if (c != '{') {
            out += c;
            continue;
        }
        if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out += '{';
            ++i;
            continue;
        }
        size_t e = fmt.find('}', i);
        if (e == std::string::npos) throw TemplateError("Single '{' encountered in format string");
        std::string field = fmt.substr(i + 1, e - i - 1);
        i = e;
        std::string spec, conv;
        if (size_t k = field.find(':'); k != std::string::npos) {
            spec = field.substr(k + 1);
            field.resize(k);
        }
        if (size_t k = field.find('!'); k != std::string::npos) {
            conv = field.substr(k + 1);
            field.resize(k);
        }
        size_t p = 0;
        while (p < field.size() && field[p] != '.' && field[p] != '[') ++p;
        std::string first = field.substr(0, p);
        Value v;
        if (first.empty() || std::isdigit(static_cast<unsigned char>(first[0]))) {
            size_t idx = first.empty() ? auto_idx++ : std::stoul(first);
            if (idx >= a.pos.size()) throw TemplateError("Replacement index " + std::to_string(idx) + " out of range");
            v = a.pos[idx];
        } else {
            bool found = false;
            for (auto& [k, x] : a.kw)
                if (k == first) {
                    v = x;
                    found = true;
                }
            if (!found) throw TemplateError(py::repr(first));  // Python's KeyError text
        }
        while (p < field.size()) {
            if (field[p] == '.') {
                size_t q = p + 1;
                while (q < field.size() && field[q] != '.' && field[q] != '[') ++q;
                v = in.get_attr(v, field.substr(p + 1, q - p - 1));
                p = q;
            } else {
                size_t q = field.find(']', p);
                if (q == std::string::npos) throw TemplateError("Missing ']' in format string");
                std::string key = field.substr(p + 1, q - p - 1);
                bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
                v = in.get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
                p = q + 1;
            }
        }
        if (v.is_undefined() && conv.empty() && !spec.empty())
            throw TemplateError("unsupported format string passed to Undefined.__format__");
        if (conv == "r" || conv == "a") v = Value(v.repr());
        else if (conv == "s") v = Value(v.to_str());
        out += format_field(in, v, spec);
        in.check_size(out.size());
    }
    return out;
}

std::string percent_format(Interp& in, const std::string& fmt, const Value& args) {
    std::vector<Value> pos;
    // Python treats any subscriptable non-tuple, non-str argument as a possible mapping.
    bool mapping = args.is_dict() || args.kind() == Value::Kind::List || args.is_undefined();
    if (args.kind() == Value::Kind::Tuple) pos = args.items();
    else pos.push_back(args);
    size_t next = 0;
    bool used_mapping = false;
    std::string out;
    auto take = [&]() -> Value {
        if (next >= pos.size()) throw TemplateError("not enough arguments for format string");
        return pos[next++];
    };
    for (size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out += fmt[i];
            continue;
        }
        if (++i >= fmt.size()) throw TemplateError("incomplete format");
        Value v;
        bool have = false;
        if (fmt[i] == '(') {
            size_t e = fmt.find(')', i);
            if (e == std::string::npos) throw TemplateError("incomplete format key");
            if (args.is_undefined()) in.raise_undefined(args);
            if (!args.is_dict()) throw TemplateError("format requires a mapping");
            const Value* x = args.obj().find(fmt.substr(i + 1, e - i - 1));
            if (!x) throw TemplateError("'" + fmt.substr(i + 1, e - i - 1) + "'");
            v = *x;
            have = used_mapping = true;
            i = e + 1;
        }
        std::string flags;
        while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) flags += fmt[i++];
        std::string width, prec;
        if (i < fmt.size() && fmt[i] == '*') {
            width = std::to_string(std::max<int64_t>(0, take().int_like()));
            ++i;
        }
        while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width += fmt[i++];
        if (i < fmt.size() && fmt[i] == '.') {
            prec = ".";
            ++i;
            if (i < fmt.size() && fmt[i] == '*') {
                prec += std::to_string(std::max<int64_t>(0, take().int_like()));
                ++i;
            }
            while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) prec += fmt[i++];
        }
        if (i >= fmt.size()) throw TemplateError("incomplete format");
        char t = fmt[i];
        if (t == '%') {
            out += '%';
            continue;
        }
        if (!have) v = take();
        if (width.size() > 8 || (!width.empty() && std::stoull(width) > 100000)) throw TemplateError("width too big");
        if (prec.size() > 4) throw TemplateError("precision too big");
        std::string spec = "%" + flags + width + prec;
        if (t == 's' || t == 'r' || t == 'a') {
            std::string s = t == 's' ? v.to_str() : v.repr();
            if (prec.size() > 1) s = py::slice(s, 0, std::stoll(prec.substr(1)), 1);
            int64_t w = width.empty() ? 0 : std::stoll(width);
            auto len = static_cast<int64_t>(py::length(s));
            if (len < w) {
                std::string pad(static_cast<size_t>(w - len), ' ');
                s = flags.find('-') != std::string::npos ? s + pad : pad + s;
            }
            out += s;
        } else if (t == 'd' || t == 'i' || t == 'u' || t == 'x' || t == 'X' || t == 'o' || t == 'c') {
            if (v.is_undefined()) in.raise_undefined(v);
            if (!v.is_number())
                throw TemplateError(std::string("%") + t + " format: a real number is required, not " + v.type_name());
            if (t == 'c') {
                if (v.is_float() || v.int_like() < 0 || v.int_like() > 0x10FFFF)
                    throw TemplateError("%c arg not in range(0x110000)");
                std::string ch;
                py::append_utf8(ch, static_cast<char32_t>(v.int_like()));
                out += ch;
                continue;
            }
            if (v.is_float() && !(std::fabs(v.get_float()) < 9.2e18))
                throw TemplateError("cannot convert float to a 64-bit integer");
            long long x = v.is_float() ? static_cast<long long>(std::trunc(v.get_float())) : v.int_like();
            std::string conv = t == 'x' || t == 'X' || t == 'o' ? std::string("ll") + t : "lld";
            out += c_format(spec + conv, x);
        } else if (t == 'f' || t == 'F' || t == 'e' || t == 'E' || t == 'g' || t == 'G') {
            if (v.is_undefined()) in.raise_undefined(v);
            if (!v.is_number()) throw TemplateError("must be real number, not " + v.type_name());
            out += c_format(spec + t, v.number());
        } else {
            throw TemplateError(std::string("unsupported format character '") + t + "'");
        }
        in.check_size(out.size());
    }
    if (!used_mapping && next < pos.size() && !(mapping && next == 0))
        throw TemplateError("not all arguments converted during string formatting");
    return out;
}

}  // namespace loom::jinja
