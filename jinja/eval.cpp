// Expression evaluation: names, attribute/item access, calls, operators with Python semantics.
#include <cmath>

#include "jinja/interp.hpp"
#include "jinja/pystr.hpp"

namespace loom::jinja {

using detail::BinOp;
using detail::CmpOp;
using detail::EK;
using detail::Expr;

namespace {

[[noreturn]] void overflow() { throw TemplateError("integer overflow (templates use 64-bit integers)"); }

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

Value loop_attr(const Value& loop, const std::string& name) {
    LoopState& st = loop.loop_state();
    const auto len = static_cast<int64_t>(st.items.size());
    const int64_t i = st.index0;
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(len - i);
    if (name == "revindex0") return Value(len - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == len - 1);
    if (name == "length") return Value(len);
    if (name == "depth") return Value(st.depth0 + 1);
    if (name == "depth0") return Value(st.depth0);
    if (name == "previtem")
        return i > 0 ? st.items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
    if (name == "nextitem")
        return i + 1 < len ? st.items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
    if (name == "cycle") {
        Value keep = loop;
        return Value::function("cycle", [keep](Interp&, CallArgs& a) -> Value {
            if (a.pos.empty()) throw TemplateError("no items for cycling given");
            return a.pos[static_cast<size_t>(keep.loop_state().index0) % a.pos.size()];
        });
    }
    if (name == "changed") {
        Value keep = loop;
        return Value::function("changed", [keep](Interp&, CallArgs& a) -> Value {
            LoopState& s = keep.loop_state();
            Value v = Value::list(a.pos, Value::Kind::Tuple);
            if (s.has_changed_value && py_equal(s.changed_value, v)) return Value(false);
            s.has_changed_value = true;
            s.changed_value = v;
            return Value(true);
        });
    }
    return Value::undefined_member(loop, Value(name));
}

}  // namespace

std::string operand_error(const char* op, const Value& a, const Value& b) {
    return std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() +
           "'";
}

void Interp::raise_undefined(const Value& u) const { throw TemplateError(u.undefined_message()); }

Value Interp::lookup(const FrameP& f, const std::string& name) const {
    for (const Frame* fr = f.get(); fr; fr = fr->parent.get()) {
        auto it = fr->vars.find(name);
        if (it != fr->vars.end()) return it->second;
    }
    if (auto it = context_.find(name); it != context_.end()) return it->second;
    const auto& g = builtin_globals();
    auto it = g.find(name);
    if (it != g.end()) return it->second;
    return Value::undefined_variable(name);
}

Value Interp::get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) raise_undefined(obj);
    if (name.size() > 4 && name.rfind("__", 0) == 0 && name.compare(name.size() - 2, 2, "__") == 0)
        return Value::undefined_member(obj, Value(name), true);
    switch (obj.kind()) {
        case Value::Kind::Namespace: {
            const Value* v = obj.obj().find(name);
            return v ? *v : Value::undefined_member(obj, Value(name));
        }
        case Value::Kind::Loop: return loop_attr(obj, name);
        case Value::Kind::Tuple:
            // groupby() yields (grouper, list) named tuples.
            if (obj.items().size() == 2 && (name == "grouper" || name == "list")) return obj.items()[name == "list"];
            break;
        default: break;
    }
    bool unsafe = false;
    Value m = bound_method(obj, name, unsafe);
    if (unsafe) return Value::undefined_member(obj, Value(name), true);
    if (!m.is_undefined()) return m;
    if (obj.is_dict())
        if (const Value* v = obj.obj().find(name)) return *v;
    return Value::undefined_member(obj, Value(name));
}

Value Interp::get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) raise_undefined(obj);
    switch (obj.kind()) {
        case Value::Kind::Dict: {
            const Value* v = nullptr;
            try {
                v = obj.obj().find(key);
            } catch (const TemplateError&) {
                v = nullptr;  // unhashable key: Python's TypeError, caught by Jinja
            }
            if (v) return *v;
            break;
        }
        case Value::Kind::List:
        case Value::Kind::Tuple:
            if (is_intlike(key)) {
                const auto& items = obj.items();
                int64_t i = key.int_like();
                if (i < 0) i += static_cast<int64_t>(items.size());
                if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
                return Value::undefined_member(obj, key);
            }
            break;
        case Value::Kind::String:
            if (is_intlike(key)) {
                auto c = py::char_at(obj.str(), key.int_like());
                if (c) return Value(std::move(*c));
                return Value::undefined_member(obj, key);
            }
            break;
        default: break;
    }
    // Jinja2 falls back to the attribute for string keys (methods, namespace members).
    if (key.is_string()) return get_attr(obj, key.str());
    return Value::undefined_member(obj, key);
}

Value Interp::slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    if (obj.is_undefined()) raise_undefined(obj);
    auto bound = [](const Value& v) -> std::optional<int64_t> {
        if (v.is_none()) return std::nullopt;
        if (v.is_undefined()) throw TemplateError(v.undefined_message());
        if (!is_intlike(v)) throw TemplateError("slice indices must be integers or None or have an __index__ method");
        return v.int_like();
    };
    auto b = bound(start), e = bound(stop), s = bound(step);
    int64_t st = s.value_or(1);
    if (st == 0) throw TemplateError("slice step cannot be zero");
    if (obj.is_string()) return Value(py::slice(obj.str(), b, e, st));
    if (obj.is_sequence()) {
        const auto& items = obj.items();
        std::vector<Value> out;
        for (int64_t i : py::slice_indices(static_cast<int64_t>(items.size()), b, e, st))
            out.push_back(items[static_cast<size_t>(i)]);
        return Value::list(std::move(out), obj.kind());
    }
    if (obj.is_dict()) throw TemplateError("unhashable type: 'slice'");
    throw TemplateError("'" + obj.type_name() + "' object is not subscriptable");
}

Value Interp::call(const Value& callee, CallArgs& args) {
    switch (callee.kind()) {
        case Value::Kind::Undefined: raise_undefined(callee);
        case Value::Kind::Callable: charge(1); return callee.fn().fn(*this, args);
        case Value::Kind::Loop:
            if (!callee.loop_state().recurse)
                throw TemplateError("The loop must have the 'recursive' marker to be called recursively.");
            return callee.loop_state().recurse(*this, args);
        default: throw TemplateError("'" + callee.type_name() + "' object is not callable");
    }
}

std::vector<Value> Interp::iterate(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return {};
        case Value::Kind::List:
        case Value::Kind::Tuple:
        case Value::Kind::KeysView:
        case Value::Kind::ValuesView:
        case Value::Kind::ItemsView: charge(v.items().size() / 8); return v.items();
        case Value::Kind::Dict: {
            std::vector<Value> keys;
            keys.reserve(v.obj().size());
            for (const auto& e : v.obj().entries()) keys.push_back(e.first);
            return keys;
        }
        case Value::Kind::String: {
            std::vector<Value> out;
            std::string buf;
            check_items(py::length(v.str()));
            charge(v.str().size() / 8);
            for (char32_t c : py::decode(v.str())) {
                buf.clear();
                py::append_utf8(buf, c);
                out.emplace_back(buf);
            }
            return out;
        }
        case Value::Kind::Iterator: {
            IterState& it = v.iter();
            std::vector<Value> out(it.items.begin() + static_cast<std::ptrdiff_t>(it.pos), it.items.end());
            it.pos = it.items.size();
            return out;
        }
        case Value::Kind::Loop: return v.loop_state().items;
        default: throw TemplateError("'" + v.type_name() + "' object is not iterable");
    }
}

int64_t Interp::length(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined: return 0;
        case Value::Kind::String: return static_cast<int64_t>(py::length(v.str()));
        case Value::Kind::Dict: return static_cast<int64_t>(v.obj().size());
        case Value::Kind::Loop: return static_cast<int64_t>(v.loop_state().items.size());
        default:
            if (v.is_array()) return static_cast<int64_t>(v.items().size());
            throw TemplateError("object of type '" + v.type_name() + "' has no len()");
    }
}

bool Interp::contains(const Value& c, const Value& item) {
    switch (c.kind()) {
        case Value::Kind::Undefined: return false;
        case Value::Kind::String:
            if (!item.is_string())
                throw TemplateError("'in <string>' requires string as left operand, not " + item.type_name());
            return c.str().find(item.str()) != std::string::npos;
        case Value::Kind::Dict: return c.obj().find(item) != nullptr;
        case Value::Kind::Iterator: {
            IterState& it = c.iter();
            while (it.pos < it.items.size())
                if (py_equal(it.items[it.pos++], item)) return true;
            return false;
        }
        default:
            if (c.is_array()) {
                charge(c.items().size() / 8);
                for (const Value& x : c.items())
                    if (py_equal(x, item)) return true;
                return false;
            }
            throw TemplateError("argument of type '" + c.type_name() + "' is not iterable");
    }
}

bool Interp::less(const Value& a, const Value& b) { return compare(CmpOp::Lt, a, b); }

bool Interp::compare(CmpOp op, const Value& a, const Value& b) {
    switch (op) {
        case CmpOp::Eq: return py_equal(a, b);
        case CmpOp::Ne: return !py_equal(a, b);
        case CmpOp::In: return contains(b, a);
        case CmpOp::NotIn: return !contains(b, a);
        default: break;
    }
    if (a.is_undefined()) raise_undefined(a);
    if (b.is_undefined()) raise_undefined(b);
    auto apply = [op](auto x, auto y) {
        switch (op) {
            case CmpOp::Lt: return x < y;
            case CmpOp::Le: return x <= y;
            case CmpOp::Gt: return x > y;
            default: return x >= y;
        }
    };
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return apply(a.number(), b.number());
        return apply(a.int_like(), b.int_like());
    }
    if (a.is_string() && b.is_string()) return apply(a.str().compare(b.str()), 0);
    if (a.is_sequence() && a.kind() == b.kind()) {
        const auto &x = a.items(), &y = b.items();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i)
            if (!py_equal(x[i], y[i])) return compare(op, x[i], y[i]);
        return apply(x.size(), y.size());
    }
    static const char* names[] = {"", "", "<", "<=", ">", ">="};
    throw TemplateError(std::string("'") + names[static_cast<int>(op)] + "' not supported between instances of '" +
                        a.type_name() + "' and '" + b.type_name() + "'");
}

Value Interp::binary(BinOp op, const Value& a, const Value& b) {
    if (a.is_undefined()) raise_undefined(a);
    // str.__mod__ runs before Undefined.__rmod__: `'%s' % undefined` formats "".
    if (op == BinOp::Mod && a.is_string()) return Value(percent_format(*this, a.str(), b));
    if (b.is_undefined()) raise_undefined(b);
    static const char* sym[] = {"+", "-", "*", "/", "//", "%", "** or pow()"};
    const char* s = sym[static_cast<int>(op)];
    if (a.is_number() && b.is_number()) {
        bool ints = !a.is_float() && !b.is_float();
        int64_t x = ints ? a.int_like() : 0, y = ints ? b.int_like() : 0, r = 0;
        double dx = a.number(), dy = b.number();
        switch (op) {
            case BinOp::Add:
                if (!ints) return Value(dx + dy);
                if (__builtin_add_overflow(x, y, &r)) overflow();
                return Value(r);
            case BinOp::Sub:
                if (!ints) return Value(dx - dy);
                if (__builtin_sub_overflow(x, y, &r)) overflow();
                return Value(r);
            case BinOp::Mul:
                if (!ints) return Value(dx * dy);
                if (__builtin_mul_overflow(x, y, &r)) overflow();
                return Value(r);
            case BinOp::Div:
                if (dy == 0) throw TemplateError(ints ? "division by zero" : "float division by zero");
                return Value(dx / dy);
            case BinOp::FloorDiv:
            case BinOp::Mod: {
                if (ints) {
                    if (y == 0)
                        throw TemplateError(op == BinOp::Mod ? "integer modulo by zero"
                                                             : "integer division or modulo by zero");
                    if (x == INT64_MIN && y == -1) overflow();
                    int64_t q = x / y, m = x % y;
                    if (m != 0 && ((m < 0) != (y < 0))) {
                        --q;
                        m += y;
                    }
                    return Value(op == BinOp::FloorDiv ? q : m);
                }
                if (dy == 0) throw TemplateError(op == BinOp::Mod ? "float modulo" : "float floor division by zero");
                double mod = std::fmod(dx, dy);
                double div = (dx - mod) / dy;
                if (mod != 0) {
                    if ((dy < 0) != (mod < 0)) {
                        mod += dy;
                        div -= 1.0;
                    }
                } else {
                    mod = std::copysign(0.0, dy);
                }
                if (op == BinOp::Mod) return Value(mod);
                double fl;
                if (div != 0) {
                    fl = std::floor(div);
                    if (div - fl > 0.5) fl += 1.0;
                } else {
                    fl = std::copysign(0.0, dx / dy);
                }
                return Value(fl);
            }
            case BinOp::Pow:
                if (ints && y >= 0) {
                    int64_t base = x, result = 1, e = y;
                    while (e > 0) {
                        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) overflow();
                        e >>= 1;
                        if (e > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
                    }
                    return Value(result);
                }
                if (dx == 0 && dy < 0) throw TemplateError("0.0 cannot be raised to a negative power");
                if (dx < 0 && dy != std::floor(dy)) throw TemplateError("complex results are not supported");
                return Value(std::pow(dx, dy));
        }
    }
    switch (op) {
        case BinOp::Add:
            if (a.is_string() && b.is_string()) {
                check_size(a.str().size() + b.str().size());
                charge((a.str().size() + b.str().size()) / 64);
                return Value(a.str() + b.str());
            }
            if (a.is_sequence() && a.kind() == b.kind()) {
                check_items(a.items().size() + b.items().size());
                charge(a.items().size() + b.items().size());
                std::vector<Value> out = a.items();
                out.insert(out.end(), b.items().begin(), b.items().end());
                return Value::list(std::move(out), a.kind());
            }
            if (a.is_string() || a.is_sequence())
                throw TemplateError("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " +
                                    a.type_name());
            break;
        case BinOp::Mul: {
            const Value* seq = (a.is_string() || a.is_sequence())   ? &a
                               : (b.is_string() || b.is_sequence()) ? &b
                                                                    : nullptr;
            const Value* n = seq == &a ? &b : &a;
            if (!seq) break;
            if (!is_intlike(*n))
                throw TemplateError("can't multiply sequence by non-int of type '" + n->type_name() + "'");
            int64_t times = std::max<int64_t>(0, n->int_like());
            size_t unit = seq->is_string() ? seq->str().size() : seq->items().size();
            if (unit && static_cast<uint64_t>(times) > limits_.max_output_bytes / unit) check_size(SIZE_MAX);
            if (!seq->is_string()) check_items(unit * static_cast<size_t>(times));
            charge(unit * static_cast<size_t>(times) / 64);
            if (seq->is_string()) {
                std::string out;
                out.reserve(unit * static_cast<size_t>(times));
                for (int64_t i = 0; i < times; ++i) out += seq->str();
                return Value(std::move(out));
            }
            std::vector<Value> out;
            for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
            return Value::list(std::move(out), seq->kind());
        }
        case BinOp::Mod:
            if (a.is_string()) return Value(percent_format(*this, a.str(), b));
            break;
        default: break;
    }
    throw TemplateError(operand_error(s, a, b));
}

void Interp::eval_args(const Expr& e, const FrameP& f, CallArgs& out) {
    for (const auto& a : e.args) out.pos.push_back(eval(*a, f));
    if (e.dyn_args) {
        for (Value& v : iterate(eval(*e.dyn_args, f))) out.pos.push_back(std::move(v));
    }
    for (const auto& [k, a] : e.kwargs) out.kw.emplace_back(k, eval(*a, f));
    if (e.dyn_kwargs) {
        Value d = eval(*e.dyn_kwargs, f);
        if (!d.is_dict()) throw TemplateError("argument after ** must be a mapping, not " + d.type_name());
        for (const auto& [k, v] : d.obj().entries()) {
            if (!k.is_string()) throw TemplateError("keywords must be strings");
            out.kw.emplace_back(k.str(), v);
        }
    }
}

Value Interp::eval_call(const Expr& e, const FrameP& f) {
    Value callee = eval(*e.a, f);
    CallArgs args;
    eval_args(e, f, args);
    line = e.line;
    return call(callee, args);
}

Value Interp::eval_filter(const Expr& e, const FrameP& f) {
    Value v;
    if (e.a) v = eval(*e.a, f);
    else if (filter_block_input) v = *filter_block_input;
    CallArgs args;
    eval_args(e, f, args);
    line = e.line;
    if (!e.filter) throw TemplateError("No filter named '" + e.name + "'.");
    charge(1);
    return e.filter(*this, v, args);
}

Value Interp::call_filter(std::string_view name, const Value& v, CallArgs& args) {
    detail::FilterFn fn = detail::find_filter(name);
    if (!fn) throw TemplateError("No filter named '" + std::string(name) + "'.");
    charge(1);
    return fn(*this, v, args);
}

bool Interp::call_test(std::string_view name, const Value& v, CallArgs& args) {
    detail::TestFn fn = detail::find_test(name);
    if (!fn) throw TemplateError("No test named '" + std::string(name) + "'.");
    charge(1);
    return fn(*this, v, args);
}

Value Interp::eval(const Expr& e, const FrameP& f) {
    DepthGuard guard(*this);
    switch (e.kind) {
        case EK::Const: return e.value;
        case EK::Name: return lookup(f, e.name);
        case EK::List:
        case EK::Tuple: {
            std::vector<Value> items;
            items.reserve(e.args.size());
            for (const auto& a : e.args) items.push_back(eval(*a, f));
            return Value::list(std::move(items), e.kind == EK::List ? Value::Kind::List : Value::Kind::Tuple);
        }
        case EK::Dict: {
            auto o = make_deferred<Object>();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value k = eval(*e.args[i], f);
                o->set(k, eval(*e.args[i + 1], f));
            }
            return Value::dict(std::move(o));
        }
        case EK::Attr: return get_attr(eval(*e.a, f), e.name);
        case EK::Item: return get_item(eval(*e.a, f), eval(*e.b, f));
        case EK::Slice: {
            if (!e.a) throw TemplateError("slices are only supported as subscripts");
            Value obj = eval(*e.a, f);
            Value parts[3];
            for (size_t i = 0; i < 3; ++i) parts[i] = e.args[i] ? eval(*e.args[i], f) : Value::none();
            return slice(obj, parts[0], parts[1], parts[2]);
        }
        case EK::Call: return eval_call(e, f);
        case EK::Filter: return eval_filter(e, f);
        case EK::Test: {
            Value v = eval(*e.a, f);
            CallArgs args;
            eval_args(e, f, args);
            if (!e.test) throw TemplateError("No test named '" + e.name + "'.");
            charge(1);
            return Value(e.test(*this, v, args));
        }
        case EK::Neg:
        case EK::Pos: {
            Value v = eval(*e.a, f);
            if (v.is_undefined()) raise_undefined(v);
            if (v.is_float()) return Value(e.kind == EK::Neg ? -v.get_float() : v.get_float());
            if (is_intlike(v)) {
                int64_t x = v.int_like();
                if (e.kind == EK::Pos) return Value(x);
                if (x == INT64_MIN) overflow();
                return Value(-x);
            }
            throw TemplateError(std::string("bad operand type for unary ") + (e.kind == EK::Neg ? "-" : "+") + ": '" +
                                v.type_name() + "'");
        }
        case EK::Not: return Value(!eval(*e.a, f).truthy());
        case EK::Bin: {
            Value a = eval(*e.a, f);
            Value b = eval(*e.b, f);
            return binary(e.op, a, b);
        }
        case EK::And: {
            Value l = eval(*e.a, f);
            return l.truthy() ? eval(*e.b, f) : l;
        }
        case EK::Or: {
            Value l = eval(*e.a, f);
            return l.truthy() ? l : eval(*e.b, f);
        }
        case EK::Compare: {
            Value left = eval(*e.args[0], f);
            for (size_t i = 0; i < e.cmp.size(); ++i) {
                Value right = eval(*e.args[i + 1], f);
                if (!compare(e.cmp[i], left, right)) return Value(false);
                left = std::move(right);
            }
            return Value(true);
        }
        case EK::Concat: {
            std::string s;
            for (const auto& a : e.args) {
                Value v = eval(*a, f);
                if (v.is_string()) s += v.str();
                else s += v.to_str();
                check_size(s.size());
            }
            charge(s.size() / 64);
            return Value(std::move(s));
        }
        case EK::Cond:
            if (eval(*e.b, f).truthy()) return eval(*e.a, f);
            if (e.c) return eval(*e.c, f);
            return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                    " evaluated to false and no else section was defined.");
    }
    return Value();
}

}  // namespace loom::jinja
