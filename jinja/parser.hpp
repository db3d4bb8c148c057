// The template parser's state and grammar rules (shared by parser.cpp and parser_expr.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jinja/ast.hpp"
#include "jinja/lexer.hpp"

namespace loom::jinja::detail {

/// Nesting limit for tags and expression trees (keeps parsing and rendering recursion bounded).
constexpr int kMaxNesting = 500;

/// Recursive-descent parser following Jinja2 3.1's grammar (jinja2/parser.py). Every rule
/// throws TemplateError "line L, column C: ..." for invalid input.
class Parser {
public:
    explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

    std::shared_ptr<TemplateAst> run() {
        auto ast = std::make_shared<TemplateAst>();
        ast->body = subparse({});
        if (cur().type != Tok::Eof) fail_unknown_tag(cur());
        return ast;
    }

private:
    // ---- token helpers
    const Token& cur() const { return t_[i_]; }
    const Token& look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
    const Token& next() {
        const Token& t = t_[i_];
        if (i_ + 1 < t_.size()) ++i_;
        return t;
    }
    bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
    bool skip_op(const char* op) {
        if (!is_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(const char* n) {
        if (!is_name(n)) return false;
        next();
        return true;
    }

    [[noreturn]] void fail(const Token& at, const std::string& msg) const {
        throw TemplateError("line " + std::to_string(at.line) + ", column " + std::to_string(at.col) + ": " + msg);
    }
    [[noreturn]] void fail(const std::string& msg) const { fail(cur(), msg); }

    static std::string q(const std::string& s) { return "'" + s + "'"; }

    const Token& expect_op(const char* op) {
        if (!is_op(op)) fail("expected token " + q(op) + ", got " + q(describe(cur())));
        return next();
    }
    const Token& expect(Tok type, const char* what) {
        if (cur().type != type) fail("expected token " + q(what) + ", got " + q(describe(cur())));
        return next();
    }
    const Token& expect_name() { return expect(Tok::Name, "name"); }
    void expect_name(const char* n) {
        if (!is_name(n)) fail("expected token " + q(n) + ", got " + q(describe(cur())));
        next();
    }

    struct Depth {
        Parser& p;
        explicit Depth(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxNesting) p.fail("template nested too deeply");
        }
        ~Depth() { --p.depth_; }
    };

    // Counts nodes wrapped around a left operand by a loop (a + b + c, a.b.c, x|f|g).
    struct Wraps {
        Parser& p;
        int n = 0;
        explicit Wraps(Parser& parser) : p(parser) {}
        void add() {
            ++n;
            if (++p.depth_ > kMaxNesting) p.fail("template nested too deeply");
        }
        ~Wraps() { p.depth_ -= n; }
    };

    // Wraps `node` in suffixes (a.b[c](d), x|f is t) for as long as `one(node)` applies
    // one (returns true; false: none applies at the current token). Every try counts
    // against kMaxNesting as in Wraps, the last one included.
    template <class One>
    ExprP wrap_suffixes(ExprP node, One one) {
        Wraps w(*this);
        do { w.add(); } while (one(node));
        return node;
    }

    template <class T>
    struct Restore {
        T& ref;
        T old;
        Restore(T& r, T v) : ref(r), old(r) { ref = v; }
        ~Restore() { ref = old; }
    };

    ExprP make(EK kind, const Token& at) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = at.line;
        e->col = at.col;
        return e;
    }

    // ---- statements (parser.cpp)
    bool at_end_tag(const std::vector<std::string>& end) const;
    Body subparse(const std::vector<std::string>& end);
    NodeP node(NK kind, const Token& at);
    [[noreturn]] void fail_eof();
    [[noreturn]] void fail_unknown_tag(const Token& tok);
    Body statements(const std::vector<std::string>& end, bool drop_needle);
    void parse_statement(Body& out);
    NodeP parse_unsupported(const std::string& name);
    NodeP parse_print(Body& out);
    NodeP parse_for();
    NodeP parse_if();
    NodeP parse_set();
    void parse_signature(Node& n);
    NodeP parse_macro();
    void macro_body(Node& n, const char* end);
    NodeP parse_call_block();
    NodeP parse_filter_block();
    NodeP parse_with();
    Target parse_assign_target(bool with_tuple, bool name_only, const std::vector<std::string>& extra_end,
                               bool with_namespace);
    Target parse_target_primary();
    void check_assignable(const std::string& name);

    // ---- expressions (parser_expr.cpp)
    bool tuple_end(const std::vector<std::string>& extra) const;
    ExprP parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra, bool explicit_parens);
    ExprP parse_expression(bool with_condexpr);
    ExprP parse_condexpr();
    ExprP binary(EK kind, ExprP l, ExprP r, const Token& at);
    /// `operand (word operand)*`, folded to the left into `kind` nodes (Jinja2's parse_or and
    /// parse_and: `a or b or c` is Or(Or(a, b), c)).
    ExprP parse_chain(const char* word, EK kind, ExprP (Parser::*operand)());
    ExprP parse_or();
    ExprP parse_and();
    ExprP parse_not();
    ExprP parse_compare();
    ExprP bin_op(BinOp op, ExprP l, ExprP r, const Token& at);
    ExprP parse_math1();
    ExprP parse_concat();
    ExprP parse_math2();
    ExprP parse_pow();
    ExprP parse_unary(bool with_filter);
    ExprP parse_primary();
    // A list [a, b] (kind List, close "]") or dict {k: v} (Dict, "}") display from its
    // opening bracket, trailing comma allowed; a Dict's args alternate keys and values.
    ExprP parse_display(EK kind, const char* close);
    ExprP parse_postfix(ExprP node);
    ExprP parse_filter_expr(ExprP node);
    ExprP parse_subscript(ExprP node);
    ExprP parse_subscribed();
    void parse_call_args(Expr& e);
    ExprP parse_call(ExprP node);
    std::string dotted_name();
    ExprP parse_filter(ExprP node, bool start_inline);
    ExprP parse_test(ExprP node);

    std::vector<Token> t_;
    size_t i_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
    bool soft_ = false;
    std::vector<std::vector<std::string>> end_stack_;
    std::vector<std::string> tag_stack_;
    std::vector<Node*> macro_stack_;
};

}  // namespace loom::jinja::detail
