// Global functions: range, dict, namespace, cycler, joiner, raise_exception, strftime_now.
#include <cstdlib>
#include <ctime>

#include "jinja/interp.hpp"

namespace loom::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox MAX_RANGE

int64_t as_index(Interp& in, const Value& v) {
    if (v.is_undefined()) in.raise_undefined(v);
    if (v.is_int() || v.is_bool()) return v.int_like();
    throw TemplateError("'" + v.type_name() + "' object cannot be interpreted as an integer");
}

Value g_range(Interp& in, CallArgs& a) {
    if (!a.kw.empty()) throw TemplateError("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3)
        throw TemplateError("range expected at most 3 arguments, got " + std::to_string(a.pos.size()));
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
        stop = as_index(in, a.pos[0]);
    } else {
        start = as_index(in, a.pos[0]);
        stop = as_index(in, a.pos[1]);
        if (a.pos.size() == 3) step = as_index(in, a.pos[2]);
    }
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    __int128 n = 0;
    if (step > 0 && stop > start) n = ((__int128)stop - start + step - 1) / step;
    if (step < 0 && stop < start) n = ((__int128)start - stop - step - 1) / -step;
    if (n > kMaxRange) throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    in.charge(static_cast<uint64_t>(n) / 8);
    std::vector<Value> out;
    out.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) out.emplace_back(start + i * step);
    return Value::list(std::move(out));
}

// dict(mapping_or_pairs, **kw) / namespace(...): the attributes as an Object.
std::shared_ptr<Object> dict_from_args(Interp& in, CallArgs& a, const char* fname) {
    auto o = make_deferred<Object>();
    if (a.pos.size() > 1)
        throw TemplateError(std::string(fname) + " expected at most 1 argument, got " + std::to_string(a.pos.size()));
    if (a.pos.size() == 1) {
        const Value& src = a.pos[0];
        if (src.is_dict() || src.is_namespace()) {
            for (const auto& [k, v] : src.obj().entries()) o->set(k, v);
        } else {
            for (const Value& pair : in.iterate(src)) {
                std::vector<Value> kv = in.iterate(pair);
                if (kv.size() != 2)
                    throw TemplateError("dictionary update sequence element has length " + std::to_string(kv.size()) +
                                        "; 2 is required");
                o->set(kv[0], kv[1]);
            }
        }
    }
    for (auto& [k, v] : a.kw) o->set(k, v);
    return o;
}

Value g_dict(Interp& in, CallArgs& a) { return Value::dict(dict_from_args(in, a, "dict")); }

Value g_namespace(Interp& in, CallArgs& a) { return in.new_namespace(dict_from_args(in, a, "namespace")); }

Value g_cycler(Interp& in, CallArgs& a) {
    if (a.pos.empty()) throw TemplateError("at least one item has to be provided");
    auto attrs = make_deferred<Object>();
    auto items = make_deferred<std::vector<Value>>(a.pos);
    auto pos = std::make_shared<size_t>(0);
    std::weak_ptr<Object> w = attrs;
    attrs->set("current", (*items)[0]);
    attrs->set("next", Value::function("next", [items, pos, w](Interp&, CallArgs&) -> Value {
                   Value rv = (*items)[*pos];
                   *pos = (*pos + 1) % items->size();
                   if (auto o = w.lock()) o->set("current", (*items)[*pos]);
                   return rv;
               }));
    attrs->set("reset", Value::function("reset", [items, pos, w](Interp&, CallArgs&) -> Value {
                   *pos = 0;
                   if (auto o = w.lock()) o->set("current", (*items)[0]);
                   return Value::none();
               }));
    return in.new_namespace(attrs);
}

Value g_joiner(Interp&, CallArgs& a) {
    ArgBinder b("joiner", a, {"sep"});
    std::string sep = b.get(0) ? b.get(0)->to_str() : ", ";
    auto used = std::make_shared<bool>(false);
    return Value::function("joiner", [sep, used](Interp&, CallArgs&) -> Value {
        if (!*used) {
            *used = true;
            return Value("");
        }
        return Value(sep);
    });
}

Value g_raise_exception(Interp&, CallArgs& a) {
    std::string msg = a.pos.empty() ? (a.kw.empty() ? "" : a.kw[0].second.to_str()) : a.pos[0].to_str();
    throw TemplateError(msg, true);
}

// Test hook: LOOM_FAKE_TIME=<unix seconds> pins the clock so renders are reproducible.
Value g_strftime_now(Interp&, CallArgs& a) {
    ArgBinder b("strftime_now", a, {"format"});
    if (!b.get(0) || !b.get(0)->is_string()) throw TemplateError("strftime_now() argument must be str");
    const std::string& fmt = b.get(0)->str();
    std::time_t now = std::time(nullptr);
    if (const char* fake = std::getenv("LOOM_FAKE_TIME"); fake && *fake) now = std::strtoll(fake, nullptr, 10);
    std::tm tm{};
    localtime_r(&now, &tm);
    if (fmt.empty()) return Value("");
    std::string buf(fmt.size() * 4 + 64, '\0');
    for (int tries = 0; tries < 8; ++tries) {
        size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
        if (n > 0) {
            buf.resize(n);
            return Value(std::move(buf));
        }
        buf.resize(buf.size() * 4);
    }
    return Value("");
}

}  // namespace

const std::unordered_map<std::string, Value>& builtin_globals() {
    static const std::unordered_map<std::string, Value> g = {
        {"range", Value::function("range", g_range, "<function safe_range>")},
        {"dict", Value::function("dict", g_dict, "<class 'dict'>")},
        {"namespace", Value::function("namespace", g_namespace, "<class 'jinja2.utils.Namespace'>")},
        {"cycler", Value::function("cycler", g_cycler, "<class 'jinja2.utils.Cycler'>")},
        {"joiner", Value::function("joiner", g_joiner, "<class 'jinja2.utils.Joiner'>")},
        {"raise_exception", Value::function("raise_exception", g_raise_exception, "<function raise_exception>")},
        {"strftime_now", Value::function("strftime_now", g_strftime_now, "<function strftime_now>")},
    };
    return g;
}

}  // namespace loom::jinja
