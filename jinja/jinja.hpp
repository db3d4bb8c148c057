// Public API of loom's Jinja2-compatible template engine: values, templates, errors.
//
// Follows the Jinja2 3.1 template designer documentation and the behaviour of Jinja2's
// ImmutableSandboxedEnvironment as Hugging Face transformers configures it for chat
// templates (trim_blocks, lstrip_blocks, the loopcontrols extension, a tojson filter that
// keeps non-ASCII text, raise_exception and strftime_now globals). Values behave like the
// Python objects a template would see: Python truthiness, str(), ==, arithmetic.
//
//   auto t = loom::jinja::Template::parse("{% for m in messages %}{{ m.content }}{% endfor %}");
//   std::string text = t.render(loom::jinja::from_json(context_json));
//
// Test hook: the environment variable LOOM_FAKE_TIME=<Unix seconds> pins the clock that
// strftime_now() reads, so date-dependent templates render reproducibly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <rapidjson/document.h>

namespace loom::jinja {

/// Any failure to parse or render a template: syntax errors carry "line L, column C",
/// runtime errors carry the template line, and raise_exception(msg) carries msg verbatim.
class TemplateError : public std::runtime_error {
public:
    /// `message` is what what() returns; `from_raise` marks errors raised by the template
    /// itself through raise_exception().
    explicit TemplateError(const std::string& message, bool from_raise = false)
        : std::runtime_error(message), from_raise_(from_raise) {}
    /// True when the template called raise_exception(); what() is then its message.
    bool from_raise_exception() const { return from_raise_; }

private:
    bool from_raise_;
};

class Value;
class Object;
class Interp;
struct Callable;
struct IterState;
struct UndefinedInfo;
struct LoopState;

/// Arguments of a call from a template: positional values, then keyword arguments.
struct CallArgs;

/// A Python-like value as a template sees it. Copying is cheap: strings, lists, dicts and
/// other containers are shared (reference semantics, like Python objects).
class Value {
public:
    enum class Kind : uint8_t {
        Undefined,  ///< Jinja2's Undefined: prints "", iterates empty, is falsy
        None,       ///< Python None
        Bool,
        Int,     ///< Python int limited to int64 (overflow is a TemplateError)
        Float,   ///< Python float (IEEE double)
        String,  ///< Python str held as UTF-8
        List,
        Tuple,
        KeysView,    ///< dict.keys()
        ValuesView,  ///< dict.values()
        ItemsView,   ///< dict.items()
        Dict,        ///< insertion-ordered dict
        Namespace,   ///< namespace(): the only object a template may assign attributes on
        Callable,    ///< macro, builtin function or bound method
        Iterator,    ///< one-shot generator (what map/select/... return)
        Loop,        ///< the `loop` variable of a for loop
    };

    /// Undefined.
    Value() = default;
    /// Python bool.
    Value(bool b) : kind_(Kind::Bool), data_(b) {}
    /// Python int.
    Value(int i) : kind_(Kind::Int), data_(int64_t{i}) {}
    /// Python int.
    Value(int64_t i) : kind_(Kind::Int), data_(i) {}
    /// Python float.
    Value(double d) : kind_(Kind::Float), data_(d) {}
    /// Python str from UTF-8 bytes.
    Value(std::string s);
    /// Python str from UTF-8 bytes.
    Value(std::string_view s) : Value(std::string(s)) {}
    /// Python str from a NUL-terminated UTF-8 string.
    Value(const char* s) : Value(std::string(s)) {}

    /// Python None.
    static Value none();
    /// Undefined with an optional hint: the error message raised when it is used.
    static Value undefined(std::string hint = {});
    /// Undefined for the missing attribute or item `name` of `obj` (Jinja2's message
    /// "'dict object' has no attribute 'x'" when it is used). `security` makes using it
    /// a SecurityError-like failure (sandbox).
    static Value undefined_member(const Value& obj, const Value& name, bool security = false);
    /// Undefined for the unknown variable `name` ("'name' is undefined" when used).
    static Value undefined_variable(std::string_view name);
    /// A list (or tuple/view when `kind` says so) holding `items`.
    static Value list(std::vector<Value> items, Kind kind = Kind::List);
    /// A dict sharing `obj`.
    static Value dict(std::shared_ptr<Object> obj);
    /// An empty dict.
    static Value dict();
    /// A namespace sharing `obj` as its attributes.
    static Value ns(std::shared_ptr<Object> obj);
    /// A callable named `name` (used in error messages and str()).
    static Value function(std::string name, std::function<Value(Interp&, CallArgs&)> fn, std::string repr = {});
    /// A one-shot iterator over `items`; `type_name` is the Python type it stands for.
    static Value iterator(std::vector<Value> items, std::string type_name = "generator");
    /// The loop variable sharing `state`.
    static Value loop(std::shared_ptr<LoopState> state);

    /// What the value is.
    Kind kind() const { return kind_; }
    /// Undefined (Jinja2's `is undefined`).
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    /// None.
    bool is_none() const { return kind_ == Kind::None; }
    /// bool (not int).
    bool is_bool() const { return kind_ == Kind::Bool; }
    /// int, not bool.
    bool is_int() const { return kind_ == Kind::Int; }
    /// float.
    bool is_float() const { return kind_ == Kind::Float; }
    /// bool, int or float (Python's numbers.Number).
    bool is_number() const { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }
    /// str.
    bool is_string() const { return kind_ == Kind::String; }
    /// list or tuple (subscriptable sequences).
    bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
    /// list, tuple or dict view (all held as a vector).
    bool is_array() const;
    /// dict.
    bool is_dict() const { return kind_ == Kind::Dict; }
    /// namespace().
    bool is_namespace() const { return kind_ == Kind::Namespace; }
    /// macro, builtin or bound method.
    bool is_callable() const { return kind_ == Kind::Callable; }

    // Accessors: calling one on a value of another kind throws std::bad_variant_access
    // (a bug in the caller; renders turn it into a TemplateError).

    /// The bool; precondition is_bool().
    bool get_bool() const { return std::get<bool>(data_); }
    /// The int; precondition is_int().
    int64_t get_int() const { return std::get<int64_t>(data_); }
    /// The float; precondition is_float().
    double get_float() const { return std::get<double>(data_); }
    /// bool/int as int64. Throws TemplateError ("'str' object cannot be interpreted as an
    /// integer") for other kinds.
    int64_t int_like() const {
        if (kind_ == Kind::Bool) return get_bool();
        if (kind_ != Kind::Int) not_an_int();
        return get_int();
    }
    /// Any number as double; precondition is_number().
    double number() const;
    /// The UTF-8 text; precondition is_string().
    const std::string& str() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
    /// The items; precondition is_array().
    const std::vector<Value>& items() const { return *std::get<std::shared_ptr<std::vector<Value>>>(data_); }
    /// Mutable items (shared with every copy); precondition is_array().
    std::vector<Value>& items_mut() const { return *std::get<std::shared_ptr<std::vector<Value>>>(data_); }
    /// The dict or namespace attributes; precondition is_dict() || is_namespace().
    Object& obj() const { return *std::get<std::shared_ptr<Object>>(data_); }
    /// The shared object pointer; precondition is_dict() || is_namespace().
    const std::shared_ptr<Object>& obj_ptr() const { return std::get<std::shared_ptr<Object>>(data_); }
    /// The callable; precondition is_callable().
    const Callable& fn() const { return *std::get<std::shared_ptr<Callable>>(data_); }
    /// The iterator state; precondition kind() == Kind::Iterator.
    IterState& iter() const { return *std::get<std::shared_ptr<IterState>>(data_); }
    /// The loop state; precondition kind() == Kind::Loop.
    LoopState& loop_state() const { return *std::get<std::shared_ptr<LoopState>>(data_); }

    /// The message an Undefined raises when used ("'x' is undefined", ...); precondition
    /// is_undefined().
    std::string undefined_message() const;
    /// True for an Undefined produced by the sandbox (unsafe attribute).
    bool undefined_is_security() const;

    /// Python truthiness (Undefined is falsy, iterators and callables are truthy).
    bool truthy() const;
    /// Python str(): "None", "True", "1.0", "['a', 1]", "{'a': 1}"; Undefined gives "".
    /// Throws TemplateError for values nested deeper than 200 levels or, during a render,
    /// larger than its output limit.
    std::string to_str() const;
    /// Python repr(): strings quoted, Undefined gives "Undefined". Throws like to_str().
    std::string repr() const;
    /// Python's type name ("int", "str", "dict", "NoneType", ...).
    std::string type_name() const;
    /// Identity (Python `is`): same container object, or equal singletons/scalars.
    bool same_as(const Value& other) const;

private:
    [[noreturn]] void not_an_int() const;
    using Data =
        std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>,
                     std::shared_ptr<std::vector<Value>>, std::shared_ptr<Object>, std::shared_ptr<Callable>,
                     std::shared_ptr<IterState>, std::shared_ptr<const UndefinedInfo>, std::shared_ptr<LoopState>>;
    Value(Kind k, Data d) : kind_(k), data_(std::move(d)) {}

    Kind kind_ = Kind::Undefined;
    Data data_;
};

struct CallArgs {
    std::vector<Value> pos;                         ///< positional arguments in order
    std::vector<std::pair<std::string, Value>> kw;  ///< keyword arguments in order
};

/// A callable value: a macro, a builtin (range, namespace, ...) or a bound method.
struct Callable {
    std::string name;                             ///< for error messages
    std::function<Value(Interp&, CallArgs&)> fn;  ///< the call; throws TemplateError
    std::string repr;                             ///< what str() prints, e.g. "<Macro 'name'>"
};

/// An insertion-ordered Python dict. Keys are hashable values (str, int, float, bool,
/// None, tuples of those); 1, 1.0 and True are the same key, as in Python.
class Object {
public:
    /// The value stored under `key`, or nullptr. Throws TemplateError for unhashable keys.
    const Value* find(const Value& key) const;
    /// The value stored under the string key `key`, or nullptr.
    const Value* find(std::string_view key) const;
    /// Same as find(std::string_view).
    const Value* find(const std::string& key) const { return find(std::string_view(key)); }
    /// Same as find(std::string_view).
    const Value* find(const char* key) const { return find(std::string_view(key)); }
    /// Inserts or replaces (keeping the original position, like Python). Throws
    /// TemplateError for unhashable keys.
    void set(const Value& key, Value v);
    /// Inserts or replaces a string key.
    void set(std::string_view key, Value v) { set(Value(key), std::move(v)); }
    /// Inserts or replaces a string key.
    void set(const std::string& key, Value v) { set(Value(key), std::move(v)); }
    /// Inserts or replaces a string key.
    void set(const char* key, Value v) { set(Value(key), std::move(v)); }
    /// Key/value pairs in insertion order.
    const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
    /// Number of keys (Python len()).
    size_t size() const { return entries_.size(); }
    /// No keys.
    bool empty() const { return entries_.empty(); }
    /// Removes everything.
    void clear();

private:
    std::vector<std::pair<Value, Value>> entries_;
    std::unordered_map<std::string, size_t> index_;
};

/// Converts parsed JSON into a Value the way Python's json.load does: objects become
/// dicts (duplicate keys: last value wins, first position kept), arrays lists, integers
/// int (uint64 above INT64_MAX becomes float), other numbers float. Throws TemplateError
/// for nesting deeper than 512.
Value from_json(const rapidjson::Value& json);

/// Python `==` between two values (numbers across int/float/bool, containers deeply;
/// Undefined equals only Undefined). Throws TemplateError for nesting deeper than 200.
bool py_equal(const Value& a, const Value& b);

/// Bounds on one render; exceeding any of them throws TemplateError.
struct Limits {
    size_t max_output_bytes = 16u << 20;  ///< size of the rendered text and of any string
    uint64_t max_steps = 10'000'000;      ///< loop iterations + calls + size-weighted work (~1 s)
    int max_call_depth = 200;             ///< nested macro / caller / recursive loop calls
    int max_eval_depth = 1500;            ///< nested statements and expressions at run time
};

namespace detail {
struct TemplateAst;
}

/// A parsed template. Parsing and rendering follow Jinja2 3.1 configured like transformers'
/// chat template environment (see the file comment); templates are immutable once parsed
/// and may be rendered concurrently from several threads.
class Template {
public:
    /// Parses `source` (UTF-8; "\r\n" and "\r" read as "\n", one trailing newline dropped,
    /// as Jinja2 does). Throws TemplateError "line L, column C: ..." for syntax errors, for
    /// unknown filters/tests (outside if-statements and conditional expressions, as Jinja2
    /// does) and for tags or expressions nested deeper than 500 levels.
    static Template parse(std::string_view source);

    /// Renders with the top-level variables of `context` (a dict; other kinds give no
    /// variables). Globals: range, dict, namespace, cycler, joiner, raise_exception,
    /// strftime_now. Throws TemplateError for runtime errors, raise_exception() and
    /// exceeded `limits`. Never crashes on any input.
    std::string render(const Value& context, const Limits& limits = Limits()) const;

private:
    std::shared_ptr<const detail::TemplateAst> ast_;
};

}  // namespace loom::jinja
