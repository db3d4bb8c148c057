// Template parsing: statements (if, for, set, macro, call, filter, with, ...) and entry point.
#include <unordered_set>

#include "jinja/parser.hpp"

namespace loom::jinja::detail {

bool Parser::at_end_tag(const std::vector<std::string>& end) const {
    if (cur().type != Tok::Name) return false;
    for (const auto& n : end)
        if (cur().text == n) return true;
    return false;
}

Body Parser::subparse(const std::vector<std::string>& end) {
    Depth d(*this);
    if (!end.empty()) end_stack_.push_back(end);
    Body body;
    while (cur().type != Tok::Eof) {
        const Token& tok = cur();
        if (tok.type == Tok::Data) {
            auto n = node(NK::Text, tok);
            n->text = tok.text;
            body.push_back(std::move(n));
            next();
        } else if (tok.type == Tok::VarBegin) {
            next();
            auto n = node(NK::Output, tok);
            n->expr = parse_tuple(false, true, {}, false);
            expect(Tok::VarEnd, "end of print statement");
            body.push_back(std::move(n));
        } else if (tok.type == Tok::BlockBegin) {
            next();
            if (!end.empty() && at_end_tag(end)) {
                end_stack_.pop_back();
                return body;
            }
            parse_statement(body);
            expect(Tok::BlockEnd, "end of statement block");
        } else {
            fail("unexpected " + q(describe(tok)));
        }
    }
    if (!end.empty()) { fail_eof(); }
    return body;
}

NodeP Parser::node(NK kind, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at.line;
    n->col = at.col;
    return n;
}

void Parser::fail_eof() {
    std::string msg = "Unexpected end of template.";
    if (!end_stack_.empty()) {
        msg += " Jinja was looking for the following tags: ";
        const auto& e = end_stack_.back();
        for (size_t k = 0; k < e.size(); ++k) msg += (k ? " or " : "") + q(e[k]);
        msg += ".";
    }
    if (!tag_stack_.empty()) msg += " The innermost block that needs to be closed is " + q(tag_stack_.back()) + ".";
    fail(msg);
}

void Parser::fail_unknown_tag(const Token& tok) {
    std::string msg = "Encountered unknown tag " + q(tok.text) + ".";
    if (!end_stack_.empty()) {
        bool expected = false;
        for (const auto& e : end_stack_)
            for (const auto& n : e) expected |= n == tok.text;
        std::string looking;
        const auto& e = end_stack_.back();
        for (size_t k = 0; k < e.size(); ++k) looking += (k ? " or " : "") + q(e[k]);
        if (expected)
            msg += " You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for " +
                   looking + ".";
        else msg += " Jinja was looking for the following tags: " + looking + ".";
    }
    if (!tag_stack_.empty()) msg += " The innermost block that needs to be closed is " + q(tag_stack_.back()) + ".";
    fail(tok, msg);
}

Body Parser::statements(const std::vector<std::string>& end, bool drop_needle) {
    skip_op(":");
    expect(Tok::BlockEnd, "end of statement block");
    Body b = subparse(end);
    if (cur().type == Tok::Eof) fail_eof();
    if (drop_needle) next();
    return b;
}

void Parser::parse_statement(Body& out) {
    const Token& tok = cur();
    if (tok.type != Tok::Name) fail("tag name expected");
    const std::string name = tok.text;
    static const std::unordered_set<std::string> known = {
        "for",    "if",  "block", "extends",    "print", "macro",  "include", "from",
        "import", "set", "with",  "autoescape", "call",  "filter", "break",   "continue"};
    if (!known.count(name)) fail_unknown_tag(tok);
    tag_stack_.push_back(name);
    NodeP n;
    if (name == "for") n = parse_for();
    else if (name == "if") n = parse_if();
    else if (name == "set") n = parse_set();
    else if (name == "macro") n = parse_macro();
    else if (name == "call") n = parse_call_block();
    else if (name == "filter") n = parse_filter_block();
    else if (name == "with") n = parse_with();
    else if (name == "print") n = parse_print(out);
    else if (name == "break" || name == "continue") {
        if (loop_depth_ == 0) fail("'" + name + "' outside loop");
        n = node(name == "break" ? NK::Break : NK::Continue, next());
    } else if (name == "block" || name == "autoescape") {
        n = node(NK::Scope, next());
        if (name == "block") {
            std::string bname = expect_name().text;
            skip_name("scoped");
            skip_name("required");
            n->bodies.push_back(statements({"endblock"}, true));
            if (cur().type == Tok::Name && cur().text == bname) next();
        } else {
            parse_expression(true);
            n->bodies.push_back(statements({"endautoescape"}, true));
        }
    } else {
        n = parse_unsupported(name);
    }
    tag_stack_.pop_back();
    if (n) out.push_back(std::move(n));
}

NodeP Parser::parse_unsupported(const std::string& name) {
    auto n = node(NK::Unsupported, next());
    n->text = name;
    parse_expression(true);
    // Skip the rest of the tag (as, import lists, context modifiers).
    while (cur().type != Tok::BlockEnd && cur().type != Tok::Eof) next();
    return n;
}

NodeP Parser::parse_print(Body& out) {
    const Token& at = next();
    bool first = true;
    while (cur().type != Tok::BlockEnd) {
        if (!first) expect_op(",");
        first = false;
        auto n = node(NK::Output, at);
        n->expr = parse_expression(true);
        out.push_back(std::move(n));
    }
    return nullptr;
}

NodeP Parser::parse_for() {
    auto n = node(NK::For, next());
    n->target = parse_assign_target(true, false, {"in"}, false);
    expect_name("in");
    n->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) {
        Restore<bool> s(soft_, false);
        n->cond = parse_expression(true);
    }
    n->recursive = skip_name("recursive");
    {
        Restore<bool> s(soft_, false);
        Restore<int> l(loop_depth_, loop_depth_ + 1);
        n->bodies.push_back(statements({"endfor", "else"}, false));
    }
    if (next().text != "endfor") {
        Restore<bool> s(soft_, false);
        n->bodies.push_back(statements({"endfor"}, true));
    }
    return n;
}

NodeP Parser::parse_if() {
    auto n = node(NK::If, next());
    Restore<bool> s(soft_, true);
    while (true) {
        n->tests.push_back(parse_tuple(false, false, {}, false));
        n->bodies.push_back(statements({"elif", "else", "endif"}, false));
        const Token& t = next();
        if (t.text == "elif") continue;
        if (t.text == "else") n->bodies.push_back(statements({"endif"}, true));
        break;
    }
    return n;
}

NodeP Parser::parse_set() {
    auto n = node(NK::Set, next());
    n->target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
        n->expr = parse_tuple(false, true, {}, false);
        return n;
    }
    n->kind = NK::SetBlock;
    if (is_op("|")) n->expr = parse_filter(nullptr, false);
    Restore<bool> s(soft_, false);
    n->bodies.push_back(statements({"endset"}, true));
    return n;
}

void Parser::parse_signature(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
        if (!n.params.empty()) expect_op(",");
        const Token& p = expect_name();
        n.params.push_back(p.text);
        if (skip_op("=")) n.defaults.push_back(parse_expression(true));
        else if (!n.defaults.empty()) fail(p, "non-default argument follows default argument");
    }
    expect_op(")");
}

NodeP Parser::parse_macro() {
    auto n = node(NK::Macro, next());
    n->name = expect_name().text;
    parse_signature(*n);
    macro_body(*n, "endmacro");
    return n;
}

void Parser::macro_body(Node& n, const char* end) {
    Restore<bool> s(soft_, false);
    Restore<int> l(loop_depth_, 0);
    macro_stack_.push_back(&n);
    n.bodies.push_back(statements({end}, true));
    macro_stack_.pop_back();
}

NodeP Parser::parse_call_block() {
    auto n = node(NK::CallBlock, next());
    if (is_op("(")) parse_signature(*n);
    n->expr = parse_expression(true);
    if (n->expr->kind != EK::Call) fail("expected call");
    macro_body(*n, "endcall");
    return n;
}

NodeP Parser::parse_filter_block() {
    auto n = node(NK::FilterBlock, next());
    n->expr = parse_filter(nullptr, true);
    Restore<bool> s(soft_, false);
    n->bodies.push_back(statements({"endfilter"}, true));
    return n;
}

NodeP Parser::parse_with() {
    auto n = node(NK::With, next());
    while (cur().type != Tok::BlockEnd) {
        if (!n->targets.empty()) expect_op(",");
        n->targets.push_back(parse_assign_target(true, false, {}, false));
        expect_op("=");
        n->values.push_back(parse_expression(true));
    }
    Restore<bool> s(soft_, false);
    n->bodies.push_back(statements({"endwith"}, true));
    return n;
}

Target Parser::parse_assign_target(bool with_tuple, bool name_only, const std::vector<std::string>& extra_end,
                                   bool with_namespace) {
    Target t;
    if (with_namespace && look().type == Tok::Op && look().text == ".") {
        t.kind = Target::Kind::NsAttr;
        t.name = expect_name().text;
        next();
        t.attr = expect_name().text;
        return t;
    }
    if (name_only || !with_tuple) {
        t.name = expect_name().text;
        check_assignable(t.name);
        return t;
    }
    // A simplified tuple: names (possibly parenthesized tuples) separated by commas.
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
        if (!items.empty()) expect_op(",");
        if (tuple_end(extra_end)) break;
        items.push_back(parse_target_primary());
        if (is_op(",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (items.empty()) fail("Expected an expression, got " + q(describe(cur())));
        return std::move(items[0]);
    }
    t.kind = Target::Kind::Tuple;
    t.items = std::move(items);
    return t;
}

Target Parser::parse_target_primary() {
    if (skip_op("(")) {
        Target t = parse_assign_target(true, false, {}, false);
        expect_op(")");
        return t;
    }
    if (cur().type != Tok::Name) fail("can't assign to " + q(describe(cur())));
    Target t;
    t.name = next().text;
    check_assignable(t.name);
    return t;
}

void Parser::check_assignable(const std::string& name) {
    static const std::unordered_set<std::string> consts = {"true", "false", "none", "True", "False", "None"};
    if (consts.count(name)) fail("can't assign to 'const'");
}

std::shared_ptr<const TemplateAst> parse_template(std::string_view source) {
    auto ast = Parser(tokenize(source)).run();
    analyze_scopes(*ast);
    return ast;
}

}  // namespace loom::jinja::detail
