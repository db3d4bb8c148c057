// Jinja2's builtin tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...).
#include "jinja/interp.hpp"
#include "jinja/pystr.hpp"

namespace loom::jinja {

namespace {

using detail::BinOp;
using detail::CmpOp;

// The one argument of a test like `divisibleby 3` (Python's "takes 2 positional arguments").
const Value& arg(CallArgs& a, const char* test) {
    size_t n = a.pos.size() + a.kw.size();
    if (n == 0) throw TemplateError(std::string("test_") + test + "() missing 1 required positional argument");
    if (n > 1)
        throw TemplateError(std::string("test_") + test + "() takes 2 positional arguments but " +
                            std::to_string(n + 1) + " were given");
    return a.pos.empty() ? a.kw[0].second : a.pos[0];
}

// Tests without arguments reject extra ones, as Python does.
void none_expected(CallArgs& a, const char* test) {
    size_t n = a.pos.size() + a.kw.size();
    if (n && std::string_view(test) == "callable")
        throw TemplateError("callable() takes exactly one argument (" + std::to_string(n + 1) + " given)");
    if (n)
        throw TemplateError(std::string("test_") + test + "() takes 1 positional argument but " +
                            std::to_string(n + 1) + " were given");
}

bool mod_eq(Interp& in, const Value& v, const Value& n, int64_t want) {
    return py_equal(in.binary(BinOp::Mod, v, n), Value(want));
}

bool t_odd(Interp& in, const Value& v, CallArgs& a) {
    none_expected(a, "odd");
    return mod_eq(in, v, Value(2), 1);
}
bool t_even(Interp& in, const Value& v, CallArgs& a) {
    none_expected(a, "even");
    return mod_eq(in, v, Value(2), 0);
}
bool t_divisibleby(Interp& in, const Value& v, CallArgs& a) { return mod_eq(in, v, arg(a, "divisibleby"), 0); }
bool t_defined(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "defined");
    return !v.is_undefined();
}
bool t_undefined(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "undefined");
    return v.is_undefined();
}
bool t_none(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "none");
    return v.is_none();
}
bool t_boolean(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "boolean");
    return v.is_bool();
}
bool t_false(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "false");
    return v.is_bool() && !v.get_bool();
}
bool t_true(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "true");
    return v.is_bool() && v.get_bool();
}
bool t_integer(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "integer");
    return v.is_int();
}
bool t_float(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "float");
    return v.is_float();
}
bool t_string(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "string");
    return v.is_string();
}
bool t_mapping(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "mapping");
    return v.is_dict();
}
bool t_number(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "number");
    return v.is_number();
}
bool t_escaped(Interp&, const Value&, CallArgs& a) {
    none_expected(a, "escaped");
    return false;
}

bool case_test(const Value& v, bool upper) {
    bool cased = false;
    for (char32_t c : py::decode(v.to_str())) {
        if (upper ? py::is_lower(c) : py::is_upper(c)) return false;
        cased |= py::is_upper(c) || py::is_lower(c);
    }
    return cased;
}
bool t_lower(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "lower");
    return case_test(v, false);
}
bool t_upper(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "upper");
    return case_test(v, true);
}

bool t_sequence(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "sequence");
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}

bool t_iterable(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "iterable");
    return v.is_undefined() || v.is_string() || v.is_array() || v.is_dict() || v.kind() == Value::Kind::Iterator ||
           v.kind() == Value::Kind::Loop;
}

bool t_callable(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "callable");
    return v.is_callable() || v.is_undefined() || v.kind() == Value::Kind::Loop;
}

bool t_sameas(Interp&, const Value& v, CallArgs& a) { return v.same_as(arg(a, "sameas")); }
bool t_in(Interp& in, const Value& v, CallArgs& a) { return in.contains(arg(a, "in"), v); }
bool t_eq(Interp&, const Value& v, CallArgs& a) { return py_equal(v, arg(a, "eq")); }
bool t_ne(Interp&, const Value& v, CallArgs& a) { return !py_equal(v, arg(a, "ne")); }
bool t_lt(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Lt, v, arg(a, "lt")); }
bool t_gt(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Gt, v, arg(a, "gt")); }
bool t_le(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Le, v, arg(a, "le")); }
bool t_ge(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Ge, v, arg(a, "ge")); }

bool t_filter(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "filter");
    return v.is_string() && detail::find_filter(v.str());
}
bool t_test(Interp&, const Value& v, CallArgs& a) {
    none_expected(a, "test");
    return v.is_string() && detail::find_test(v.str());
}

const detail::NamedFn<detail::TestFn> kTests[] = {
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"filter", t_filter},
    {"test", t_test},
    {"none", t_none},
    {"boolean", t_boolean},
    {"false", t_false},
    {"true", t_true},
    {"integer", t_integer},
    {"float", t_float},
    {"lower", t_lower},
    {"upper", t_upper},
    {"string", t_string},
    {"mapping", t_mapping},
    {"number", t_number},
    {"sequence", t_sequence},
    {"iterable", t_iterable},
    {"callable", t_callable},
    {"sameas", t_sameas},
    {"escaped", t_escaped},
    {"in", t_in},
    {"==", t_eq},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"!=", t_ne},
    {"ne", t_ne},
    {">", t_gt},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"<", t_lt},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<=", t_le},
    {"le", t_le},
};

}  // namespace

namespace detail {

TestFn find_test(std::string_view name) { return find_named(kTests, name); }

}  // namespace detail

}  // namespace loom::jinja
