// Value and Object: construction, Python truthiness, str()/repr(), ==, hashing, from_json.
#include <cmath>
#include <cstdio>

#include "jinja/jinja.hpp"
#include "jinja/pystr.hpp"
#include "jinja/value_impl.hpp"

namespace loom::jinja {

namespace {

constexpr int kMaxReprDepth = 200;

void check_depth(int depth) {
    if (depth > kMaxReprDepth) throw TemplateError("maximum recursion depth exceeded while converting a value");
}

void print(const Value& v, bool repr, int depth, std::string& out);

void check_room(const std::string& out) {
    if (out.size() > print_limit())
        throw TemplateError("value exceeds the size limit of " + std::to_string(print_limit()) + " bytes");
}

// `open`, the repr()s of `items` joined by ", ", then `close`: Python's list, tuple and view reprs.
void print_items(const std::vector<Value>& items, int depth, std::string& out, std::string_view open,
                 std::string_view close) {
    out += open;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        print(items[i], true, depth + 1, out);
        check_room(out);
    }
    out += close;
}

// A dict's repr, {k: v, ...}, between `before` and `after` (a Namespace wraps it in <Namespace ...>).
void print_dict(const Object& o, int depth, std::string& out, std::string_view before = {},
                std::string_view after = {}) {
    out += before;
    out += '{';
    bool first = true;
    for (const auto& [k, v] : o.entries()) {
        if (!first) out += ", ";
        first = false;
        print(k, true, depth + 1, out);
        out += ": ";
        print(v, true, depth + 1, out);
        check_room(out);
    }
    out += '}';
    out += after;
}

// Python str() (repr=false) or repr() of `v`, appended to `out`.
void print(const Value& v, bool repr, int depth, std::string& out) {
    check_depth(depth);
    switch (v.kind()) {
        case Value::Kind::Undefined: out += repr ? "Undefined" : ""; return;
        case Value::Kind::None: out += "None"; return;
        case Value::Kind::Bool: out += v.get_bool() ? "True" : "False"; return;
        case Value::Kind::Int: out += std::to_string(v.get_int()); return;
        case Value::Kind::Float: out += py::float_repr(v.get_float()); return;
        case Value::Kind::String: out += repr ? py::repr(v.str()) : v.str(); return;
        case Value::Kind::List: print_items(v.items(), depth, out, "[", "]"); return;
        case Value::Kind::Tuple: print_items(v.items(), depth, out, "(", v.items().size() == 1 ? ",)" : ")"); return;
        case Value::Kind::KeysView:
        case Value::Kind::ValuesView:
        case Value::Kind::ItemsView: print_items(v.items(), depth, out, v.type_name() + "([", "])"); return;
        case Value::Kind::Dict: print_dict(v.obj(), depth, out); return;
        case Value::Kind::Namespace: print_dict(v.obj(), depth, out, "<Namespace ", ">"); return;
        case Value::Kind::Callable:
            out += v.fn().repr.empty() ? "<built-in function " + v.fn().name + ">" : v.fn().repr;
            return;
        case Value::Kind::Iterator: out += "<" + v.iter().type_name + " object>"; return;
        case Value::Kind::Loop: {
            const LoopState& l = v.loop_state();
            out += "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.items.size()) + ">";
            return;
        }
    }
}

// Canonical hash key: equal Python values (1 == 1.0 == True) give equal keys.
bool hash_key(const Value& v, std::string& out, int depth) {
    check_depth(depth);
    switch (v.kind()) {
        case Value::Kind::String:
            out += 's';
            out += v.str();
            out += '\0';
            return true;
        case Value::Kind::Bool:
        case Value::Kind::Int:
            out += 'i';
            out += std::to_string(v.int_like());
            out += '\0';
            return true;
        case Value::Kind::Float: {
            double d = v.get_float();
            if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
                out += 'i';
                out += std::to_string(static_cast<int64_t>(d));
            } else {
                out += 'f';
                out += py::float_repr(d);
            }
            out += '\0';
            return true;
        }
        case Value::Kind::None: out += 'n'; return true;
        case Value::Kind::Undefined: out += 'u'; return true;
        case Value::Kind::Tuple:
            out += '(';
            for (const Value& x : v.items())
                if (!hash_key(x, out, depth + 1)) return false;
            out += ')';
            return true;
        case Value::Kind::Callable:
        case Value::Kind::Namespace:
        case Value::Kind::Iterator:
        case Value::Kind::Loop: {
            char buf[32];
            const void* p = v.is_callable()                     ? static_cast<const void*>(&v.fn())
                            : v.is_namespace()                  ? static_cast<const void*>(&v.obj())
                            : v.kind() == Value::Kind::Iterator ? static_cast<const void*>(&v.iter())
                                                                : static_cast<const void*>(&v.loop_state());
            snprintf(buf, sizeof buf, "p%p", p);
            out += buf;
            out += '\0';
            return true;
        }
        default: return false;
    }
}

std::string hash_key_or_throw(const Value& key) {
    std::string k;
    if (!hash_key(key, k, 0)) throw TemplateError("unhashable type: '" + key.type_name() + "'");
    return k;
}

bool equal_impl(const Value& a, const Value& b, int depth) {
    check_depth(depth);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.number() == b.number();
        return a.int_like() == b.int_like();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::Undefined:
        case Value::Kind::None: return true;
        case Value::Kind::String: return a.str() == b.str();
        case Value::Kind::List:
        case Value::Kind::Tuple:
        case Value::Kind::ValuesView: {
            if (a.kind() == Value::Kind::ValuesView) return a.same_as(b);
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!equal_impl(x[i], y[i], depth + 1)) return false;
            return true;
        }
        case Value::Kind::KeysView:
        case Value::Kind::ItemsView: {
            const auto &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (const Value& i : x) {
                bool found = false;
                for (const Value& j : y)
                    if (equal_impl(i, j, depth + 1)) {
                        found = true;
                        break;
                    }
                if (!found) return false;
            }
            return true;
        }
        case Value::Kind::Dict: {
            const Object &x = a.obj(), &y = b.obj();
            if (x.size() != y.size()) return false;
            for (const auto& [k, v] : x.entries()) {
                const Value* w = y.find(k);
                if (!w || !equal_impl(v, *w, depth + 1)) return false;
            }
            return true;
        }
        default: return a.same_as(b);
    }
}

// The queue of deferred deletions of this thread. The pointer is plain data so it stays
// usable while thread_local and static objects are being destroyed.
struct PendingDeletes {
    std::vector<std::pair<void*, void (*)(void*)>> items;
    bool draining = false;
};
thread_local PendingDeletes* t_pending = nullptr;
thread_local bool t_exiting = false;
struct PendingOwner {
    ~PendingOwner() {
        delete t_pending;
        t_pending = nullptr;
        t_exiting = true;
    }
};
thread_local PendingOwner t_owner;

}  // namespace

void deferred_delete(void* p, void (*fn)(void*)) noexcept {
    if (t_exiting) {
        fn(p);
        return;
    }
    if (!t_pending) {
        (void)&t_owner;
        t_pending = new PendingDeletes;
    }
    PendingDeletes& q = *t_pending;
    if (q.draining) {
        q.items.emplace_back(p, fn);
        return;
    }
    q.draining = true;
    fn(p);
    while (!q.items.empty()) {
        auto [ptr, del] = q.items.back();
        q.items.pop_back();
        del(ptr);
    }
    q.draining = false;
}

Value::Value(std::string s) : kind_(Kind::String), data_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::none() { return Value(Kind::None, std::monostate{}); }

Value Value::undefined(std::string hint) {
    if (hint.empty()) return Value();
    auto info = make_deferred<UndefinedInfo>();
    info->hint = std::move(hint);
    return Value(Kind::Undefined, std::shared_ptr<const UndefinedInfo>(std::move(info)));
}

Value Value::undefined_variable(std::string_view name) {
    auto info = make_deferred<UndefinedInfo>();
    info->name = Value(name);
    return Value(Kind::Undefined, std::shared_ptr<const UndefinedInfo>(std::move(info)));
}

Value Value::undefined_member(const Value& obj, const Value& name, bool security) {
    auto info = make_deferred<UndefinedInfo>();
    info->has_obj = true;
    info->name = name;
    info->security = security;
    if (obj.is_none()) {
        info->obj_type = "None";
    } else if (obj.is_namespace()) {
        info->obj_type = "jinja2.utils.Namespace object";
    } else if (obj.kind() == Kind::Loop) {
        info->obj_type = "jinja2.runtime.LoopContext object";
    } else if (obj.is_callable() && obj.fn().repr.rfind("<Macro", 0) == 0) {
        info->obj_type = "jinja2.runtime.Macro object";
    } else {
        info->obj_type = obj.type_name() + " object";
    }
    if (security) info->hint = "access to attribute " + name.repr() + " of '" + obj.type_name() + "' object is unsafe.";
    return Value(Kind::Undefined, std::shared_ptr<const UndefinedInfo>(std::move(info)));
}

Value Value::list(std::vector<Value> items, Kind kind) {
    return Value(kind, make_deferred<std::vector<Value>>(std::move(items)));
}

Value Value::dict(std::shared_ptr<Object> obj) { return Value(Kind::Dict, std::move(obj)); }

Value Value::dict() { return dict(make_deferred<Object>()); }

Value Value::ns(std::shared_ptr<Object> obj) { return Value(Kind::Namespace, std::move(obj)); }

Value Value::function(std::string name, std::function<Value(Interp&, CallArgs&)> fn, std::string repr) {
    auto c = make_deferred<Callable>();
    c->name = std::move(name);
    c->fn = std::move(fn);
    c->repr = std::move(repr);
    return Value(Kind::Callable, std::move(c));
}

Value Value::iterator(std::vector<Value> items, std::string type_name) {
    auto it = make_deferred<IterState>();
    it->items = std::move(items);
    it->type_name = std::move(type_name);
    return Value(Kind::Iterator, std::move(it));
}

Value Value::loop(std::shared_ptr<LoopState> state) { return Value(Kind::Loop, std::move(state)); }

bool Value::is_array() const {
    return kind_ == Kind::List || kind_ == Kind::Tuple || kind_ == Kind::KeysView || kind_ == Kind::ValuesView ||
           kind_ == Kind::ItemsView;
}

double Value::number() const {
    if (is_float()) return get_float();
    return static_cast<double>(int_like());
}

std::string Value::undefined_message() const {
    const auto* p = std::get_if<std::shared_ptr<const UndefinedInfo>>(&data_);
    if (!p || !*p) return "'undefined' is undefined";
    const UndefinedInfo& u = **p;
    if (!u.hint.empty()) return u.hint;
    if (!u.has_obj) return u.name.repr() + " is undefined";
    if (!u.name.is_string()) return u.obj_type + " has no element " + u.name.repr();
    return py::repr(u.obj_type) + " has no attribute " + u.name.repr();
}

bool Value::undefined_is_security() const {
    const auto* p = std::get_if<std::shared_ptr<const UndefinedInfo>>(&data_);
    return p && *p && (*p)->security;
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::Undefined:
        case Kind::None: return false;
        case Kind::Bool: return get_bool();
        case Kind::Int: return get_int() != 0;
        case Kind::Float: return get_float() != 0.0;
        case Kind::String: return !str().empty();
        case Kind::List:
        case Kind::Tuple:
        case Kind::KeysView:
        case Kind::ValuesView:
        case Kind::ItemsView: return !items().empty();
        case Kind::Dict: return !obj().empty();
        default: return true;
    }
}

std::string Value::to_str() const {
    if (is_string()) return str();
    std::string out;
    print(*this, false, 0, out);
    check_room(out);
    return out;
}

std::string Value::repr() const {
    std::string out;
    print(*this, true, 0, out);
    check_room(out);
    return out;
}

void Value::not_an_int() const {
    if (is_undefined()) throw TemplateError(undefined_message());
    throw TemplateError("'" + type_name() + "' object cannot be interpreted as an integer");
}

namespace {
thread_local size_t t_print_limit = SIZE_MAX;
}

size_t print_limit() { return t_print_limit; }

PrintLimit::PrintLimit(size_t max_bytes) : saved_(t_print_limit) { t_print_limit = max_bytes; }

PrintLimit::~PrintLimit() { t_print_limit = saved_; }

std::string Value::type_name() const {
    switch (kind_) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::List: return "list";
        case Kind::Tuple: return "tuple";
        case Kind::KeysView: return "dict_keys";
        case Kind::ValuesView: return "dict_values";
        case Kind::ItemsView: return "dict_items";
        case Kind::Dict: return "dict";
        case Kind::Namespace: return "Namespace";
        case Kind::Callable: return fn().repr.rfind("<Macro", 0) == 0 ? "Macro" : "builtin_function_or_method";
        case Kind::Iterator: return iter().type_name;
        case Kind::Loop: return "LoopContext";
    }
    return "object";
}

bool Value::same_as(const Value& other) const {
    if (kind_ != other.kind_) return false;
    switch (kind_) {
        case Kind::Undefined: return false;
        case Kind::None: return true;
        case Kind::Bool: return get_bool() == other.get_bool();
        // CPython caches small ints; equal larger ints are usually distinct objects.
        case Kind::Int: return get_int() == other.get_int() && get_int() >= -5 && get_int() <= 256;
        case Kind::Float: return false;
        default: return data_ == other.data_;
    }
}

const Value* Object::find(const Value& key) const {
    auto it = index_.find(hash_key_or_throw(key));
    return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Object::find(std::string_view key) const {
    std::string k;
    k.reserve(key.size() + 2);
    k += 's';
    k += key;
    k += '\0';
    auto it = index_.find(k);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Object::set(const Value& key, Value v) {
    std::string k = hash_key_or_throw(key);
    auto [it, inserted] = index_.try_emplace(std::move(k), entries_.size());
    if (inserted) entries_.emplace_back(key, std::move(v));
    else entries_[it->second].second = std::move(v);
}

void Object::clear() {
    entries_.clear();
    index_.clear();
}

bool py_equal(const Value& a, const Value& b) { return equal_impl(a, b, 0); }

namespace {

Value from_json_impl(const rapidjson::Value& j, int depth) {
    if (depth > 512) throw TemplateError("JSON input nested too deeply");
    switch (j.GetType()) {
        case rapidjson::kNullType: return Value::none();
        case rapidjson::kFalseType: return Value(false);
        case rapidjson::kTrueType: return Value(true);
        case rapidjson::kStringType: return Value(std::string(j.GetString(), j.GetStringLength()));
        case rapidjson::kNumberType:
            if (j.IsInt64()) return Value(j.GetInt64());
            if (j.IsUint64()) return Value(static_cast<double>(j.GetUint64()));
            return Value(j.GetDouble());
        case rapidjson::kArrayType: {
            std::vector<Value> items;
            items.reserve(j.Size());
            for (const auto& x : j.GetArray()) items.push_back(from_json_impl(x, depth + 1));
            return Value::list(std::move(items));
        }
        case rapidjson::kObjectType: {
            auto o = make_deferred<Object>();
            for (const auto& m : j.GetObject())
                o->set(Value(std::string(m.name.GetString(), m.name.GetStringLength())),
                       from_json_impl(m.value, depth + 1));
            return Value::dict(std::move(o));
        }
    }
    return Value::none();
}

}  // namespace

Value from_json(const rapidjson::Value& json) { return from_json_impl(json, 0); }

}  // namespace loom::jinja
