// Render-time state of one template render: scopes, output buffers, limits, operations.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jinja/ast.hpp"
#include "jinja/jinja.hpp"
#include "jinja/value_impl.hpp"

namespace loom::jinja {

/// One variable scope. Lookups walk the parent chain, then the globals.
struct Frame {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Frame> parent;
};
using FrameP = std::shared_ptr<Frame>;

/// What a statement list asks of the enclosing loop.
enum class Flow { Normal, Break, Continue };

/// Builtin global functions (range, dict, namespace, cycler, joiner, raise_exception,
/// strftime_now), shared by all renders.
const std::unordered_map<std::string, Value>& builtin_globals();

/// Python json.dumps options used by the tojson filter.
struct JsonOptions {
    bool pretty = false;  ///< indent given (even 0 or "")
    std::string indent;   ///< one indentation level
    std::string item_sep = ", ";
    std::string key_sep = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};
/// Python's json.dumps(value, **opts). Throws TemplateError for values JSON cannot hold.
std::string to_json(const Value& v, const JsonOptions& opts);

/// Python's printf-style `fmt % args` (args: a tuple, a mapping or one value).
/// Throws TemplateError as Python's TypeError/ValueError would.
std::string percent_format(Interp& in, const std::string& fmt, const Value& args);
/// Python's str.format(*args, **kwargs) (the common subset of the format-spec language).
/// Throws TemplateError for bad fields and specs.
std::string str_format(Interp& in, const std::string& fmt, CallArgs& args);
/// The bound method `name` of a str/list/dict value, or Undefined if it has none
/// (`unsafe` is set for methods the immutable sandbox forbids).
Value bound_method(const Value& self, const std::string& name, bool& unsafe);

/// Jinja2's soft_str(): the str() of a value (Undefined gives "").
inline std::string soft_str(const Value& v) { return v.is_string() ? v.str() : v.to_str(); }
/// Lower-cases strings (the case-insensitive sort/unique/min/max keys); other values as is.
Value lower_if_str(const Value& v);

namespace detail {
/// The sequence filter registered as `name` (filters_seq.cpp), or nullptr.
FilterFn find_sequence_filter(std::string_view name);

/// One row of a builtin table (filters, tests): the name templates use and its function.
template <class Fn>
struct NamedFn {
    const char* name;
    Fn fn;
};

/// The function of the first row of `table` named `name`, or nullptr when none is.
template <class Fn, size_t N>
Fn find_named(const NamedFn<Fn> (&table)[N], std::string_view name) {
    for (const NamedFn<Fn>& e : table)
        if (name == e.name) return e.fn;
    return nullptr;
}
}  // namespace detail

/// Binds call arguments to named parameters like a Python signature.
class ArgBinder {
public:
    /// `fname` names the function in errors; `names` are the parameters in order.
    ArgBinder(const char* fname, CallArgs& args, std::initializer_list<const char*> names);
    /// The argument for parameter `i`, or nullptr when not given.
    const Value* get(size_t i) const { return i < bound_.size() ? bound_[i] : nullptr; }
    /// The argument for parameter `i` or `def`.
    Value get_or(size_t i, Value def) const { return get(i) ? *get(i) : std::move(def); }

private:
    std::vector<const Value*> bound_;
};

/// One render of a parsed template: the scopes, the output buffers and the budgets of
/// Limits, plus the Python operations filters and methods need. All operations throw
/// TemplateError with Python's message for the corresponding TypeError/ValueError/
/// UndefinedError (Jinja2 3.1 semantics, sandboxed as ImmutableSandboxedEnvironment).
class Interp {
public:
    /// A render of `ast` under `limits` (both must outlive the Interp).
    Interp(const detail::TemplateAst& ast, const Limits& limits);
    /// Clears the namespaces the render made (they may form reference cycles).
    ~Interp();
    Interp(const Interp&) = delete;
    Interp& operator=(const Interp&) = delete;

    /// Renders the whole template with the variables of `context` (a dict).
    std::string run(const Value& context);

    // ---- statements (interp.cpp)
    /// Runs statements in scope `f`, writing to the current output; returns Break/Continue
    /// when a loop control statement ran.
    Flow exec(const detail::Body& body, const FrameP& f);
    /// Runs `body` in `f` and returns what it wrote.
    std::string capture(const detail::Body& body, const FrameP& f);
    /// Appends text to the current output, enforcing the output limit.
    void write(std::string_view s);

    // ---- expressions (eval.cpp)
    /// The value of expression `e` in scope `f`.
    Value eval(const detail::Expr& e, const FrameP& f);
    /// The value of a filter block's filter chain `e` in scope `f`, applied to `input` (the
    /// text of a {% filter %} or {% set x | f %} block): eval() with filter_block_input set to
    /// input for the call, restored afterwards, also when it throws.
    Value eval_filter_block(const detail::Expr& e, const FrameP& f, const Value& input);
    /// Variable `name` seen from scope `f`: scopes, then the render's context, then the
    /// globals; an Undefined when unknown.
    Value lookup(const FrameP& f, const std::string& name) const;
    /// Jinja2's sandboxed getattr (`obj.name`): attribute/method first, then item.
    Value get_attr(const Value& obj, const std::string& name);
    /// Jinja2's sandboxed getitem (`obj[key]`): item first, then attribute for str keys.
    Value get_item(const Value& obj, const Value& key);
    /// Python `obj[start:stop:step]` (None parts omitted) on str, list and tuple.
    Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
    /// Calls a callable (or a recursive loop); Undefined raises its error.
    Value call(const Value& callee, CallArgs& args);
    /// Python's `a op b` for + - * / // % ** (int64 ints; overflow is an error).
    Value binary(detail::BinOp op, const Value& a, const Value& b);
    /// Python `<`; TypeError-like TemplateError for unorderable values.
    bool less(const Value& a, const Value& b);
    /// Python comparison `a op b` (==, !=, <, <=, >, >=, in, not in).
    bool compare(detail::CmpOp op, const Value& a, const Value& b);
    /// Python `item in container`.
    bool contains(const Value& container, const Value& item);
    /// Python iter() materialized: list items, dict keys, str characters; consumes
    /// iterators; Undefined gives nothing; other values throw.
    std::vector<Value> iterate(const Value& v);
    /// Python len(); throws for values without one.
    int64_t length(const Value& v);
    /// Applies the filter `name` (map('upper') and friends); unknown names throw.
    Value call_filter(std::string_view name, const Value& v, CallArgs& args);
    /// Applies the test `name` (select('odd') and friends); unknown names throw.
    bool call_test(std::string_view name, const Value& v, CallArgs& args);
    /// Throws the error an Undefined raises when used.
    [[noreturn]] void raise_undefined(const Value& u) const;

    // ---- limits
    /// Spends `units` of the step budget.
    void charge(uint64_t units);
    /// Throws when a string of `size` bytes would exceed the size limit.
    void check_size(size_t size) const;
    /// Throws when a container of `n` items would exceed the item limit (size limit / 16).
    void check_items(size_t n) const;
    /// A namespace tracked for cleanup (breaks reference cycles when the render ends).
    Value new_namespace(std::shared_ptr<Object> attrs);
    /// RAII guard for nested calls (macros, callers, recursive loops).
    class CallGuard {
    public:
        /// Enters a call; throws when max_call_depth is exceeded.
        explicit CallGuard(Interp& in);
        /// Leaves the call and restores the current line.
        ~CallGuard();

    private:
        Interp& in_;
        int line_;
    };
    /// RAII guard for run-time nesting of statements and expressions.
    class DepthGuard {
    public:
        /// Enters one level; throws when max_eval_depth is exceeded.
        explicit DepthGuard(Interp& in) : in_(in) {
            if (++in_.depth_ > in_.limits_.max_eval_depth) in_.too_deep();
        }
        ~DepthGuard() { --in_.depth_; }

    private:
        Interp& in_;
    };

    /// The template's top-level scope.
    const FrameP& root() const { return root_; }
    int line = 0;  ///< template line being executed (for error messages)

private:
    friend class DepthGuard;
    [[noreturn]] void too_deep() const;
    void exec_for(const detail::Node& n, const FrameP& f);
    void run_loop(const detail::Node& n, const FrameP& f, std::vector<Value> items, int64_t depth0);
    void assign(const detail::Target& t, const Value& v, const FrameP& f);
    Value make_macro(const detail::Node& n, const FrameP& f);
    Value call_macro(const detail::Node& n, const std::weak_ptr<Frame>& def, CallArgs& args);
    Value eval_call(const detail::Expr& e, const FrameP& f);
    Value eval_filter(const detail::Expr& e, const FrameP& f);
    void eval_args(const detail::Expr& e, const FrameP& f, CallArgs& out);

    const detail::TemplateAst& ast_;
    const Limits& limits_;
    FrameP root_;
    std::unordered_map<std::string, Value> context_;  ///< the render's input variables
    std::string* out_ = nullptr;
    uint64_t steps_ = 0;
    int depth_ = 0;
    int call_depth_ = 0;
    std::vector<std::weak_ptr<Object>> namespaces_;

public:
    /// Input of the innermost {% filter %} block (the value its filter chain starts from).
    const Value* filter_block_input = nullptr;
};

/// Python type-error text for a binary operator ("unsupported operand type(s) for -: ...").
std::string operand_error(const char* op, const Value& a, const Value& b);

}  // namespace loom::jinja
