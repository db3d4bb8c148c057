// Syntax tree of a parsed Jinja template (expressions and statements).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja.hpp"

namespace loom::jinja::detail {

/// A filter implementation: value | name(args).
using FilterFn = Value (*)(Interp&, const Value&, CallArgs&);
/// A test implementation: value is name(args).
using TestFn = bool (*)(Interp&, const Value&, CallArgs&);

/// The filter registered as `name`, or nullptr.
FilterFn find_filter(std::string_view name);
/// The test registered as `name`, or nullptr.
TestFn find_test(std::string_view name);

struct Expr;
using ExprP = std::unique_ptr<Expr>;

enum class EK : uint8_t {
    Const,    ///< value
    Name,     ///< name
    List,     ///< args
    Tuple,    ///< args
    Dict,     ///< args: key, value, key, value...
    Attr,     ///< a.name
    Item,     ///< a[b]
    Slice,    ///< a[args[0]:args[1]:args[2]] (null parts omitted)
    Call,     ///< a(args, kwargs, *dyn_args, **dyn_kwargs)
    Filter,   ///< a | name(args...); a null inside {% filter %} blocks
    Test,     ///< a is name(args...)
    Neg,      ///< -a
    Pos,      ///< +a
    Not,      ///< not a
    Bin,      ///< a op b
    And,      ///< a and b
    Or,       ///< a or b
    Compare,  ///< args[0] cmp[0] args[1] cmp[1] args[2] ...
    Concat,   ///< args joined with ~
    Cond,     ///< a if b else c (c may be null)
};

enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr {
    EK kind = EK::Const;
    int line = 1;
    int col = 1;
    Value value;
    std::string name;
    ExprP a, b, c;
    std::vector<ExprP> args;
    std::vector<std::pair<std::string, ExprP>> kwargs;
    ExprP dyn_args, dyn_kwargs;
    BinOp op = BinOp::Add;
    std::vector<CmpOp> cmp;
    FilterFn filter = nullptr;  ///< resolved at parse time (null: unknown, fails when run)
    TestFn test = nullptr;
};

/// An assignment target: a name, a tuple of targets, or namespace.attr.
struct Target {
    enum class Kind : uint8_t { Name, Tuple, NsAttr } kind = Kind::Name;
    std::string name;
    std::string attr;
    std::vector<Target> items;
};

struct Node;
using NodeP = std::unique_ptr<Node>;
using Body = std::vector<NodeP>;

enum class NK : uint8_t {
    Text,         ///< text
    Output,       ///< {{ expr }}
    If,           ///< tests[i] -> bodies[i]; bodies[tests.size()] is the else body if present
    For,          ///< for target in expr [if cond] [recursive]: bodies[0], else bodies[1]
    Set,          ///< set target = expr
    SetBlock,     ///< set target [| filter expr] ... endset: bodies[0]
    Macro,        ///< macro name(params=defaults): bodies[0]
    CallBlock,    ///< call(params) expr: bodies[0] is the caller
    FilterBlock,  ///< filter expr (a Filter chain with a null innermost operand): bodies[0]
    With,         ///< with targets = values: bodies[0]
    Scope,        ///< block / autoescape: bodies[0] in its own scope
    Break,
    Continue,
    Unsupported,  ///< include / import / extends: fails when executed (no loader)
};

struct Node {
    NK kind = NK::Text;
    int line = 1;
    int col = 1;
    std::string text;
    ExprP expr;
    ExprP cond;
    std::vector<ExprP> tests;
    std::vector<Body> bodies;
    Target target;
    std::vector<Target> targets;
    std::vector<ExprP> values;
    std::string name;
    std::vector<std::string> params;
    std::vector<ExprP> defaults;
    bool uses_caller = false;
    bool uses_varargs = false;
    bool uses_kwargs = false;
    bool recursive = false;
    /// Names the scopes this node opens bind as "missing" on entry (see scope.cpp):
    /// [0] body (for, macro, call, filter, set block, with, block), [1] for-else,
    /// [2] for-loop filter.
    std::vector<std::string> missing[3];
};

struct TemplateAst {
    Body body;
    std::vector<std::string> root_missing;  ///< same for the template's top level
};

/// Computes the `missing` name lists with Jinja2's compile-time scoping rules.
void analyze_scopes(TemplateAst& ast);

/// Parses template source into a tree. Throws TemplateError "line L, column C: ...".
std::shared_ptr<const TemplateAst> parse_template(std::string_view source);

}  // namespace loom::jinja::detail
