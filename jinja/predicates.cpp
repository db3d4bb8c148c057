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

// A test's name as a template argument (no_arg below).
struct TestName {
    char s[16] = {};
    template <size_t N>
    constexpr TestName(const char (&name)[N]) {
        static_assert(N <= sizeof s, "test name too long");
        for (size_t i = 0; i < N; ++i) s[i] = name[i];
    }
};

// The test `kName` that takes no argument: refuses any (none_expected), then answers kPred.
template <TestName kName, bool (*kPred)(Interp&, const Value&)>
bool no_arg(Interp& in, const Value& v, CallArgs& a) {
    none_expected(a, kName.s);
    return kPred(in, v);
}

bool mod_eq(Interp& in, const Value& v, const Value& n, int64_t want) {
    return py_equal(in.binary(BinOp::Mod, v, n), Value(want));
}

bool case_test(const Value& v, bool upper) {
    bool cased = false;
    for (char32_t c : py::decode(v.to_str())) {
        if (upper ? py::is_lower(c) : py::is_upper(c)) return false;
        cased |= py::is_upper(c) || py::is_lower(c);
    }
    return cased;
}

constexpr detail::TestFn t_odd = no_arg<"odd", [](Interp& in, const Value& v) { return mod_eq(in, v, Value(2), 1); }>;
constexpr detail::TestFn t_even = no_arg<"even", [](Interp& in, const Value& v) { return mod_eq(in, v, Value(2), 0); }>;
bool t_divisibleby(Interp& in, const Value& v, CallArgs& a) { return mod_eq(in, v, arg(a, "divisibleby"), 0); }
constexpr detail::TestFn t_defined = no_arg<"defined", [](Interp&, const Value& v) { return !v.is_undefined(); }>;
constexpr detail::TestFn t_undefined = no_arg<"undefined", [](Interp&, const Value& v) { return v.is_undefined(); }>;
constexpr detail::TestFn t_none = no_arg<"none", [](Interp&, const Value& v) { return v.is_none(); }>;
constexpr detail::TestFn t_boolean = no_arg<"boolean", [](Interp&, const Value& v) { return v.is_bool(); }>;
constexpr detail::TestFn t_false =
    no_arg<"false", [](Interp&, const Value& v) { return v.is_bool() && !v.get_bool(); }>;
constexpr detail::TestFn t_true = no_arg<"true", [](Interp&, const Value& v) { return v.is_bool() && v.get_bool(); }>;
constexpr detail::TestFn t_integer = no_arg<"integer", [](Interp&, const Value& v) { return v.is_int(); }>;
constexpr detail::TestFn t_float = no_arg<"float", [](Interp&, const Value& v) { return v.is_float(); }>;
constexpr detail::TestFn t_string = no_arg<"string", [](Interp&, const Value& v) { return v.is_string(); }>;
constexpr detail::TestFn t_mapping = no_arg<"mapping", [](Interp&, const Value& v) { return v.is_dict(); }>;
constexpr detail::TestFn t_number = no_arg<"number", [](Interp&, const Value& v) { return v.is_number(); }>;
constexpr detail::TestFn t_escaped = no_arg<"escaped", [](Interp&, const Value&) { return false; }>;
constexpr detail::TestFn t_lower = no_arg<"lower", [](Interp&, const Value& v) { return case_test(v, false); }>;
constexpr detail::TestFn t_upper = no_arg<"upper", [](Interp&, const Value& v) { return case_test(v, true); }>;
constexpr detail::TestFn t_sequence = no_arg<"sequence", [](Interp&, const Value& v) {
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}>;
constexpr detail::TestFn t_iterable = no_arg<"iterable", [](Interp&, const Value& v) {
    return v.is_undefined() || v.is_string() || v.is_array() || v.is_dict() || v.kind() == Value::Kind::Iterator ||
           v.kind() == Value::Kind::Loop;
}>;
constexpr detail::TestFn t_callable = no_arg<"callable", [](Interp&, const Value& v) {
    return v.is_callable() || v.is_undefined() || v.kind() == Value::Kind::Loop;
}>;
constexpr detail::TestFn t_filter =
    no_arg<"filter", [](Interp&, const Value& v) { return v.is_string() && detail::find_filter(v.str()); }>;
constexpr detail::TestFn t_test =
    no_arg<"test", [](Interp&, const Value& v) { return v.is_string() && detail::find_test(v.str()); }>;

bool t_sameas(Interp&, const Value& v, CallArgs& a) { return v.same_as(arg(a, "sameas")); }
bool t_in(Interp& in, const Value& v, CallArgs& a) { return in.contains(arg(a, "in"), v); }
bool t_eq(Interp&, const Value& v, CallArgs& a) { return py_equal(v, arg(a, "eq")); }
bool t_ne(Interp&, const Value& v, CallArgs& a) { return !py_equal(v, arg(a, "ne")); }
bool t_lt(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Lt, v, arg(a, "lt")); }
bool t_gt(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Gt, v, arg(a, "gt")); }
bool t_le(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Le, v, arg(a, "le")); }
bool t_ge(Interp& in, const Value& v, CallArgs& a) { return in.compare(CmpOp::Ge, v, arg(a, "ge")); }

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
