// Template parsing: expressions by precedence (conditional, or, and, not, comparisons,
// + -, ~, * / // %, **, unary, postfix, filters and tests), as in Jinja2 3.1.
#include "jinja/parser.hpp"

namespace loom::jinja::detail {

bool Parser::tuple_end(const std::vector<std::string>& extra) const {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) return true;
    return at_end_tag(extra);
}

ExprP Parser::parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra,
                          bool explicit_parens) {
    const Token& at = cur();
    std::vector<ExprP> args;
    bool is_tuple = false;
    while (true) {
        if (!args.empty()) expect_op(",");
        if (tuple_end(extra)) break;
        args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
        if (is_op(",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (!args.empty()) return std::move(args[0]);
        if (!explicit_parens) fail("Expected an expression, got " + q(describe(cur())));
    }
    auto e = make(EK::Tuple, at);
    e->args = std::move(args);
    return e;
}

ExprP Parser::parse_expression(bool with_condexpr) {
    Depth d(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
}

ExprP Parser::parse_condexpr() {
    ExprP expr1 = parse_or();
    Wraps w(*this);
    while (is_name("if")) {
        w.add();
        const Token& at = next();
        Restore<bool> s(soft_, true);
        auto e = make(EK::Cond, at);
        e->b = parse_or();
        if (skip_name("else")) e->c = parse_condexpr();
        e->a = std::move(expr1);
        expr1 = std::move(e);
    }
    return expr1;
}

ExprP Parser::binary(EK kind, ExprP l, ExprP r, const Token& at) {
    auto e = make(kind, at);
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
}

ExprP Parser::parse_chain(const char* word, EK kind, ExprP (Parser::*operand)()) {
    ExprP left = (this->*operand)();
    Wraps w(*this);
    while (is_name(word)) {
        w.add();
        const Token& at = next();
        left = binary(kind, std::move(left), (this->*operand)(), at);
    }
    return left;
}

ExprP Parser::parse_or() { return parse_chain("or", EK::Or, &Parser::parse_and); }

ExprP Parser::parse_and() { return parse_chain("and", EK::And, &Parser::parse_not); }

ExprP Parser::parse_not() {
    if (is_name("not")) {
        Depth d(*this);
        const Token& at = next();
        auto e = make(EK::Not, at);
        e->a = parse_not();
        return e;
    }
    return parse_compare();
}

ExprP Parser::parse_compare() {
    const Token& at = cur();
    ExprP expr = parse_math1();
    std::vector<ExprP> operands;
    std::vector<CmpOp> ops;
    while (true) {
        CmpOp op;
        if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                      cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
            const std::string& t = cur().text;
            op = t == "=="   ? CmpOp::Eq
                 : t == "!=" ? CmpOp::Ne
                 : t == "<"  ? CmpOp::Lt
                 : t == "<=" ? CmpOp::Le
                 : t == ">"  ? CmpOp::Gt
                             : CmpOp::Ge;
            next();
        } else if (is_name("in")) {
            op = CmpOp::In;
            next();
        } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
            op = CmpOp::NotIn;
            next();
            next();
        } else {
            break;
        }
        ops.push_back(op);
        operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = make(EK::Compare, at);
    e->args.push_back(std::move(expr));
    for (auto& o : operands) e->args.push_back(std::move(o));
    e->cmp = std::move(ops);
    return e;
}

ExprP Parser::bin_op(BinOp op, ExprP l, ExprP r, const Token& at) {
    auto e = binary(EK::Bin, std::move(l), std::move(r), at);
    e->op = op;
    return e;
}

ExprP Parser::parse_math1() {
    ExprP left = parse_concat();
    Wraps w(*this);
    while (is_op("+") || is_op("-")) {
        w.add();
        const Token& at = next();
        BinOp op = at.text == "+" ? BinOp::Add : BinOp::Sub;
        left = bin_op(op, std::move(left), parse_concat(), at);
    }
    return left;
}

ExprP Parser::parse_concat() {
    const Token& at = cur();
    ExprP first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(EK::Concat, at);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return e;
}

ExprP Parser::parse_math2() {
    ExprP left = parse_pow();
    Wraps w(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
        w.add();
        const Token& at = next();
        BinOp op = at.text == "*"    ? BinOp::Mul
                   : at.text == "/"  ? BinOp::Div
                   : at.text == "//" ? BinOp::FloorDiv
                                     : BinOp::Mod;
        left = bin_op(op, std::move(left), parse_pow(), at);
    }
    return left;
}

ExprP Parser::parse_pow() {
    ExprP left = parse_unary(true);
    Wraps w(*this);
    while (is_op("**")) {
        w.add();
        const Token& at = next();
        left = bin_op(BinOp::Pow, std::move(left), parse_unary(true), at);
    }
    return left;
}

ExprP Parser::parse_unary(bool with_filter) {
    Depth d(*this);
    ExprP node;
    if (is_op("-") || is_op("+")) {
        const Token& at = next();
        node = make(at.text == "-" ? EK::Neg : EK::Pos, at);
        node->a = parse_unary(false);
    } else {
        node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
}

ExprP Parser::parse_primary() {
    Depth d(*this);
    const Token& tok = cur();
    if (tok.type == Tok::Name) {
        next();
        auto e = make(EK::Const, tok);
        if (tok.text == "true" || tok.text == "True") {
            e->value = Value(true);
        } else if (tok.text == "false" || tok.text == "False") {
            e->value = Value(false);
        } else if (tok.text == "none" || tok.text == "None") {
            e->value = Value::none();
        } else {
            e->kind = EK::Name;
            e->name = tok.text;
            if (!macro_stack_.empty()) {
                Node& m = *macro_stack_.back();
                m.uses_caller |= tok.text == "caller";
                m.uses_varargs |= tok.text == "varargs";
                m.uses_kwargs |= tok.text == "kwargs";
            }
        }
        return e;
    }
    if (tok.type == Tok::String) {
        std::string s;
        while (cur().type == Tok::String) s += next().text;
        auto e = make(EK::Const, tok);
        e->value = Value(std::move(s));
        return e;
    }
    if (tok.type == Tok::Int || tok.type == Tok::Float) {
        next();
        auto e = make(EK::Const, tok);
        e->value = tok.type == Tok::Int ? Value(tok.ival) : Value(tok.fval);
        return e;
    }
    if (is_op("(")) {
        next();
        ExprP e = parse_tuple(false, true, {}, true);
        expect_op(")");
        return e;
    }
    if (is_op("[")) return parse_display(EK::List, "]");
    if (is_op("{")) return parse_display(EK::Dict, "}");
    fail("unexpected " + q(describe(tok)));
}

ExprP Parser::parse_display(EK kind, const char* close) {
    auto e = make(kind, next());
    while (!is_op(close)) {
        if (!e->args.empty()) expect_op(",");
        if (is_op(close)) break;
        e->args.push_back(parse_expression(true));
        if (kind == EK::Dict) {
            expect_op(":");
            e->args.push_back(parse_expression(true));
        }
    }
    expect_op(close);
    return e;
}

ExprP Parser::parse_postfix(ExprP node) {
    return wrap_suffixes(std::move(node), [this](ExprP& n) {
        if (is_op(".") || is_op("[")) n = parse_subscript(std::move(n));
        else if (is_op("(")) n = parse_call(std::move(n));
        else return false;
        return true;
    });
}

ExprP Parser::parse_filter_expr(ExprP node) {
    return wrap_suffixes(std::move(node), [this](ExprP& n) {
        if (is_op("|")) n = parse_filter(std::move(n), false);
        else if (is_name("is")) n = parse_test(std::move(n));
        else if (is_op("(")) n = parse_call(std::move(n));
        else return false;
        return true;
    });
}

ExprP Parser::parse_subscript(ExprP node) {
    Depth d(*this);
    const Token& tok = next();
    if (tok.text == ".") {
        const Token& attr = next();
        if (attr.type == Tok::Name) {
            auto e = make(EK::Attr, tok);
            e->a = std::move(node);
            e->name = attr.text;
            return e;
        }
        if (attr.type != Tok::Int) fail(attr, "expected name or number");
        auto e = make(EK::Item, tok);
        e->a = std::move(node);
        e->b = make(EK::Const, attr);
        e->b->value = Value(attr.ival);
        return e;
    }
    std::vector<ExprP> args;
    while (!is_op("]")) {
        if (!args.empty()) expect_op(",");
        args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.size() == 1 && args[0]->kind == EK::Slice && !args[0]->a) {
        ExprP s = std::move(args[0]);
        s->a = std::move(node);
        return s;
    }
    auto e = make(EK::Item, tok);
    e->a = std::move(node);
    if (args.size() == 1) {
        e->b = std::move(args[0]);
    } else {
        e->b = make(EK::Tuple, tok);
        e->b->args = std::move(args);
    }
    return e;
}

ExprP Parser::parse_subscribed() {
    const Token& at = cur();
    std::vector<ExprP> parts;
    if (skip_op(":")) {
        parts.push_back(nullptr);
    } else {
        ExprP e = parse_expression(true);
        if (!skip_op(":")) return e;
        parts.push_back(std::move(e));
    }
    if (is_op(":") || is_op("]") || is_op(",")) parts.push_back(nullptr);
    else parts.push_back(parse_expression(true));
    if (skip_op(":")) {
        if (is_op("]") || is_op(",")) parts.push_back(nullptr);
        else parts.push_back(parse_expression(true));
    } else {
        parts.push_back(nullptr);
    }
    auto s = make(EK::Slice, at);
    s->args = std::move(parts);
    return s;
}

void Parser::parse_call_args(Expr& e) {
    const Token& at = expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
        if (!ok) fail(at, "invalid syntax for function call expression");
    };
    while (!is_op(")")) {
        if (require_comma) {
            expect_op(",");
            if (is_op(")")) break;
        }
        if (skip_op("*")) {
            ensure(!e.dyn_args && !e.dyn_kwargs);
            e.dyn_args = parse_expression(true);
        } else if (skip_op("**")) {
            ensure(!e.dyn_kwargs);
            e.dyn_kwargs = parse_expression(true);
        } else if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
            ensure(!e.dyn_kwargs);
            std::string key = next().text;
            next();
            e.kwargs.emplace_back(key, parse_expression(true));
        } else {
            ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
            e.args.push_back(parse_expression(true));
        }
        require_comma = true;
    }
    expect_op(")");
}

ExprP Parser::parse_call(ExprP node) {
    Depth d(*this);
    auto e = make(EK::Call, cur());
    e->a = std::move(node);
    parse_call_args(*e);
    return e;
}

std::string Parser::dotted_name() {
    std::string name = expect_name().text;
    while (skip_op(".")) name += "." + expect_name().text;
    return name;
}

ExprP Parser::parse_filter(ExprP node, bool start_inline) {
    Wraps w(*this);
    while (is_op("|") || start_inline) {
        w.add();
        if (!start_inline) next();
        start_inline = false;
        const Token& at = cur();
        auto e = make(EK::Filter, at);
        e->name = dotted_name();
        e->filter = find_filter(e->name);
        if (!e->filter && !soft_) fail(at, "No filter named " + q(e->name) + ".");
        if (is_op("(")) parse_call_args(*e);
        e->a = std::move(node);
        node = std::move(e);
    }
    return node;
}

ExprP Parser::parse_test(ExprP node) {
    Depth d(*this);
    const Token& at = next();
    bool negated = skip_name("not");
    auto e = make(EK::Test, at);
    const Token& name_tok = cur();
    e->name = dotted_name();
    e->test = find_test(e->name);
    if (!e->test && !soft_) fail(name_tok, "No test named " + q(e->name) + ".");
    const Token& c = cur();
    if (is_op("(")) {
        parse_call_args(*e);
    } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int || c.type == Tok::Float ||
                is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("You cannot chain multiple tests with is");
        e->args.push_back(parse_postfix(parse_primary()));
    }
    e->a = std::move(node);
    if (!negated) return e;
    auto n = make(EK::Not, at);
    n->a = std::move(e);
    return n;
}

}  // namespace loom::jinja::detail
