// Python methods that templates call on str, list and dict values.
#include <unordered_set>

#include "jinja/interp.hpp"
#include "jinja/pystr.hpp"

namespace loom::jinja {

namespace {

std::optional<std::string> opt_str(const Value* v, const char* fname) {
    if (!v || v->is_none()) return std::nullopt;
    if (!v->is_string()) throw TemplateError(std::string(fname) + " arg must be None or str, not " + v->type_name());
    return v->str();
}

int64_t int_arg(const Value* v, int64_t def, const char* what) {
    if (!v || v->is_none()) return def;
    if (v->is_int() || v->is_bool()) return v->int_like();
    throw TemplateError(std::string("'") + v->type_name() + "' object cannot be interpreted as an integer (" + what +
                        ")");
}

const std::string& str_arg(const Value* v, const char* fname) {
    if (!v) throw TemplateError(std::string(fname) + "() missing required argument");
    if (!v->is_string()) throw TemplateError("must be str, not " + v->type_name());
    return v->str();
}

std::optional<int64_t> opt_index(const Value* v) {
    if (!v || v->is_none()) return std::nullopt;
    return int_arg(v, 0, "slice index");
}

bool str_predicate(const std::string& s, const std::string& name) {
    std::u32string cps = py::decode(s);
    if (name == "isupper" || name == "islower") {
        bool cased = false;
        for (char32_t c : cps) {
            if (name == "isupper" ? py::is_lower(c) : py::is_upper(c)) return false;
            cased |= py::is_upper(c) || py::is_lower(c);
        }
        return cased;
    }
    if (name == "istitle") {
        bool prev_cased = false, any = false;
        for (char32_t c : cps) {
            bool up = py::is_upper(c), low = py::is_lower(c);
            if (up && prev_cased) return false;
            if (low && !prev_cased) return false;
            prev_cased = up || low;
            any |= up;
        }
        return any;
    }
    if (cps.empty()) return false;
    for (char32_t c : cps) {
        bool ok = name == "isdigit" || name == "isdecimal" || name == "isnumeric" ? py::is_digit(c)
                  : name == "isalpha"                                             ? py::is_alpha(c)
                  : name == "isalnum"                                             ? py::is_alnum(c)
                  : name == "isspace"                                             ? py::is_space(c)
                  : name == "isascii"                                             ? c < 0x80
                                                                                  : py::is_word(c);
        if (!ok) return false;
    }
    if (name == "isidentifier") return !py::is_digit(cps[0]);
    return true;
}

bool affix_match(Interp& in, const std::string& s, CallArgs& a, bool prefix) {
    const char* fname = prefix ? "startswith" : "endswith";
    ArgBinder b(fname, a, {"prefix", "start", "end"});
    if (!b.get(0)) throw TemplateError(std::string(fname) + "() takes at least 1 argument (0 given)");
    std::string sub = py::slice(s, opt_index(b.get(1)), opt_index(b.get(2)), 1);
    auto test = [&](const Value& p) {
        if (!p.is_string())
            throw TemplateError(std::string(fname) + " first arg must be str or a tuple of str, not " + p.type_name());
        const std::string& x = p.str();
        return sub.size() >= x.size() &&
               (prefix ? sub.compare(0, x.size(), x) == 0 : sub.compare(sub.size() - x.size(), x.size(), x) == 0);
    };
    const Value& p = *b.get(0);
    if (p.kind() == Value::Kind::Tuple) {
        for (const Value& x : p.items())
            if (test(x)) return true;
        return false;
    }
    (void)in;
    return test(p);
}

Value str_method(Interp& in, const Value& self, const std::string& name, CallArgs& a) {
    const std::string& s = self.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        ArgBinder b(name.c_str(), a, {"chars"});
        return Value(py::strip(s, opt_str(b.get(0), name.c_str()), name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        ArgBinder b(name.c_str(), a, {"sep", "maxsplit"});
        auto sep = opt_str(b.get(0), name.c_str());
        if (sep && sep->empty()) throw TemplateError("empty separator");
        std::vector<Value> out;
        in.charge(s.size() / 16);
        for (auto& part : py::split(s, sep, int_arg(b.get(1), -1, "maxsplit"), name == "rsplit"))
            out.emplace_back(std::move(part));
        in.check_items(out.size());
        return Value::list(std::move(out));
    }
    if (name == "splitlines") {
        ArgBinder b("splitlines", a, {"keepends"});
        std::vector<Value> out;
        in.charge(s.size() / 16);
        for (auto& part : py::splitlines(s, b.get(0) && b.get(0)->truthy())) out.emplace_back(std::move(part));
        in.check_items(out.size());
        return Value::list(std::move(out));
    }
    if (name == "startswith" || name == "endswith") return Value(affix_match(in, s, a, name == "startswith"));
    if (name == "replace") {
        ArgBinder b("replace", a, {"old", "new", "count"});
        const std::string& old = str_arg(b.get(0), "replace");
        const std::string& repl = str_arg(b.get(1), "replace");
        int64_t count = int_arg(b.get(2), -1, "count");
        std::string out = py::replace(s, old, repl, count);
        in.check_size(out.size());
        return Value(std::move(out));
    }
    if (name == "upper") return Value(py::upper(s));
    if (name == "lower" || name == "casefold") return Value(py::lower(s));
    if (name == "title") return Value(py::title(s));
    if (name == "capitalize") return Value(py::capitalize(s));
    if (name == "swapcase") return Value(py::swapcase(s));
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
        ArgBinder b(name.c_str(), a, {"sub", "start", "end"});
        int64_t r =
            py::find(s, str_arg(b.get(0), name.c_str()), opt_index(b.get(1)), opt_index(b.get(2)), name[0] == 'r');
        if (r < 0 && name.find("index") != std::string::npos) throw TemplateError("substring not found");
        return Value(r);
    }
    if (name == "count") {
        ArgBinder b("count", a, {"sub", "start", "end"});
        return Value(py::count(py::slice(s, opt_index(b.get(1)), opt_index(b.get(2)), 1), str_arg(b.get(0), "count")));
    }
    if (name == "join") {
        ArgBinder b("join", a, {"iterable"});
        if (!b.get(0)) throw TemplateError("join() takes exactly one argument (0 given)");
        std::vector<Value> items = in.iterate(*b.get(0));
        std::string out;
        for (size_t i = 0; i < items.size(); ++i) {
            if (!items[i].is_string())
                throw TemplateError("sequence item " + std::to_string(i) + ": expected str instance, " +
                                    items[i].type_name() + " found");
            if (i) out += s;
            out += items[i].str();
            in.check_size(out.size());
        }
        return Value(std::move(out));
    }
    if (name == "center" || name == "ljust" || name == "rjust") {
        ArgBinder b(name.c_str(), a, {"width", "fillchar"});
        char32_t fill = ' ';
        if (b.get(1)) {
            std::u32string f = py::decode(str_arg(b.get(1), name.c_str()));
            if (f.size() != 1) throw TemplateError("The fill character must be exactly one character long");
            fill = f[0];
        }
        int64_t width = int_arg(b.get(0), 0, "width");
        in.check_size(static_cast<size_t>(std::max<int64_t>(0, width)));
        return Value(py::pad(s, width, fill, name == "center" ? 0 : name == "ljust" ? -1 : 1));
    }
    if (name == "zfill") {
        ArgBinder b("zfill", a, {"width"});
        int64_t width = int_arg(b.get(0), 0, "width");
        in.check_size(static_cast<size_t>(std::max<int64_t>(0, width)));
        auto len = static_cast<int64_t>(py::length(s));
        if (width <= len) return self;
        std::string pad(static_cast<size_t>(width - len), '0');
        if (!s.empty() && (s[0] == '+' || s[0] == '-')) return Value(s.substr(0, 1) + pad + s.substr(1));
        return Value(pad + s);
    }
    if (name == "partition" || name == "rpartition") {
        ArgBinder b(name.c_str(), a, {"sep"});
        const std::string& sep = str_arg(b.get(0), name.c_str());
        if (sep.empty()) throw TemplateError("empty separator");
        size_t k = name == "partition" ? s.find(sep) : s.rfind(sep);
        std::vector<Value> out;
        if (k == std::string::npos) {
            if (name == "partition") out = {Value(s), Value(""), Value("")};
            else out = {Value(""), Value(""), Value(s)};
        } else {
            out = {Value(s.substr(0, k)), Value(sep), Value(s.substr(k + sep.size()))};
        }
        return Value::list(std::move(out), Value::Kind::Tuple);
    }
    if (name == "removeprefix" || name == "removesuffix") {
        ArgBinder b(name.c_str(), a, {"affix"});
        const std::string& x = str_arg(b.get(0), name.c_str());
        if (name == "removeprefix") return Value(s.rfind(x, 0) == 0 ? s.substr(x.size()) : s);
        bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
        return Value(ends ? s.substr(0, s.size() - x.size()) : s);
    }
    if (name == "format") return Value(str_format(in, s, a));
    if (name == "format_map") {
        if (a.pos.size() != 1 || !a.kw.empty()) throw TemplateError("format_map() takes exactly one argument");
        CallArgs m;
        if (!a.pos[0].is_dict()) throw TemplateError("format_map() argument must be a mapping");
        for (const auto& [k, v] : a.pos[0].obj().entries())
            if (k.is_string()) m.kw.emplace_back(k.str(), v);
        return Value(str_format(in, s, m));
    }
    return Value(str_predicate(s, name));
}

Value list_method(Interp& in, const Value& self, const std::string& name, CallArgs& a) {
    std::vector<Value>& items = self.items_mut();
    if (name == "index" || name == "count") {
        ArgBinder b(name.c_str(), a, {"value"});
        if (!b.get(0)) throw TemplateError(name + "() takes at least 1 argument (0 given)");
        int64_t n = 0;
        for (size_t i = 0; i < items.size(); ++i)
            if (py_equal(items[i], *b.get(0))) {
                if (name == "index") return Value(static_cast<int64_t>(i));
                ++n;
            }
        if (name == "index") throw TemplateError(b.get(0)->repr() + " is not in list");
        return Value(n);
    }
    if (name == "copy") return Value::list(items);
    if (name == "clear") {
        items.clear();
        return Value::none();
    }
    // pop
    ArgBinder b("pop", a, {"index"});
    if (items.empty()) throw TemplateError("pop from empty list");
    int64_t i = int_arg(b.get(0), -1, "index");
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) throw TemplateError("pop index out of range");
    Value v = items[static_cast<size_t>(i)];
    items.erase(items.begin() + i);
    (void)in;
    return v;
}

Value dict_method(Interp&, const Value& self, const std::string& name, CallArgs& a) {
    const Object& o = self.obj();
    if (name == "get") {
        ArgBinder b("get", a, {"key", "default"});
        if (!b.get(0)) throw TemplateError("get expected at least 1 argument, got 0");
        const Value* v = o.find(*b.get(0));
        return v ? *v : b.get_or(1, Value::none());
    }
    if (name == "copy") {
        auto c = make_deferred<Object>(o);
        return Value::dict(std::move(c));
    }
    if (!a.pos.empty() || !a.kw.empty()) throw TemplateError(name + "() takes no arguments");
    std::vector<Value> out;
    out.reserve(o.size());
    for (const auto& [k, v] : o.entries()) {
        if (name == "keys") out.push_back(k);
        else if (name == "values") out.push_back(v);
        else out.push_back(Value::list({k, v}, Value::Kind::Tuple));
    }
    return Value::list(std::move(out), name == "keys"     ? Value::Kind::KeysView
                                       : name == "values" ? Value::Kind::ValuesView
                                                          : Value::Kind::ItemsView);
}

}  // namespace

ArgBinder::ArgBinder(const char* fname, CallArgs& args, std::initializer_list<const char*> names)
    : bound_(names.size(), nullptr) {
    if (args.pos.size() > names.size())
        throw TemplateError(std::string(fname) + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
                            std::to_string(args.pos.size()) + " given)");
    for (size_t i = 0; i < args.pos.size(); ++i) bound_[i] = &args.pos[i];
    for (auto& [k, v] : args.kw) {
        size_t i = 0;
        for (const char* n : names) {
            if (k == n) break;
            ++i;
        }
        if (i == names.size())
            throw TemplateError(std::string(fname) + "() got an unexpected keyword argument '" + k + "'");
        if (bound_[i]) throw TemplateError(std::string(fname) + "() got multiple values for argument '" + k + "'");
        bound_[i] = &v;
    }
}

Value bound_method(const Value& self, const std::string& name, bool& unsafe) {
    static const std::unordered_set<std::string> str_methods = {
        "strip",        "lstrip",  "rstrip",     "split",   "rsplit",    "splitlines", "startswith",
        "endswith",     "replace", "upper",      "lower",   "casefold",  "title",      "capitalize",
        "swapcase",     "find",    "rfind",      "index",   "rindex",    "count",      "join",
        "center",       "ljust",   "rjust",      "zfill",   "partition", "rpartition", "removeprefix",
        "removesuffix", "format",  "format_map", "isdigit", "isdecimal", "isnumeric",  "isalpha",
        "isalnum",      "isspace", "isupper",    "islower", "istitle",   "isascii",    "isidentifier"};
    unsafe = false;
    Value keep = self;
    switch (self.kind()) {
        case Value::Kind::String:
            if (!str_methods.count(name)) return Value();
            return Value::function(
                name, [keep, name](Interp& in, CallArgs& a) { return str_method(in, keep, name, a); },
                "<built-in method " + name + " of str object>");
        case Value::Kind::List:
        case Value::Kind::Tuple:
            if (self.kind() == Value::Kind::List && (name == "append" || name == "extend" || name == "insert" ||
                                                     name == "remove" || name == "reverse" || name == "sort")) {
                unsafe = true;
                return Value();
            }
            if (name == "index" || name == "count" ||
                (self.kind() == Value::Kind::List && (name == "copy" || name == "pop" || name == "clear")))
                return Value::function(
                    name, [keep, name](Interp& in, CallArgs& a) { return list_method(in, keep, name, a); },
                    "<built-in method " + name + " of " + self.type_name() + " object>");
            return Value();
        case Value::Kind::Dict:
            if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear") {
                unsafe = true;
                return Value();
            }
            if (name == "keys" || name == "values" || name == "items" || name == "get" || name == "copy")
                return Value::function(
                    name, [keep, name](Interp& in, CallArgs& a) { return dict_method(in, keep, name, a); },
                    "<built-in method " + name + " of dict object>");
            return Value();
        default: return Value();
    }
}

}  // namespace loom::jinja
