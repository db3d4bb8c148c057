// Jinja2's compile-time variable scoping (its idtracking module), reduced to what matters
// at run time: which names a new scope binds as "missing" when it is entered.
//
// Jinja2 decides at compile time where each name lives. A name that a scope assigns
// unconditionally, without reading it first and without an enclosing scope that knows
// it, starts out missing in that scope: reads of it (also from nested loops and macros)
// give Undefined until the assignment runs, even when the render context has a variable
// of that name. Every other case behaves like a run-time lookup through the enclosing
// scopes and then the context, which is what the interpreter does by default.
#include <map>
#include <set>

#include "jinja/ast.hpp"

namespace loom::jinja::detail {

namespace {

enum class Load : uint8_t { Param, Resolve, Alias, Undefined };

struct Symbols {
    const Symbols* parent = nullptr;
    std::map<std::string, Load> refs;
    std::set<std::string> stores;

    bool find(const std::string& n) const {
        for (const Symbols* s = this; s; s = s->parent)
            if (s->refs.count(n)) return true;
        return false;
    }
    void load(const std::string& n) {
        if (!find(n)) refs[n] = Load::Resolve;
    }
    void store(const std::string& n) {
        stores.insert(n);
        if (refs.count(n)) return;
        refs[n] = parent && parent->find(n) ? Load::Alias : Load::Undefined;
    }
    void param(const std::string& n) {
        stores.insert(n);
        refs[n] = Load::Param;
    }
    void branch_update(const std::vector<Symbols>& branches) {
        std::map<std::string, size_t> counts;
        for (const auto& b : branches)
            for (const auto& t : b.stores)
                if (!stores.count(t)) ++counts[t];
        for (const auto& b : branches) {
            for (const auto& [k, v] : b.refs) refs[k] = v;
            stores.insert(b.stores.begin(), b.stores.end());
        }
        for (const auto& [name, n] : counts) {
            if (n == branches.size()) continue;
            refs[name] = parent && parent->find(name) ? Load::Alias : Load::Resolve;
        }
    }
    std::vector<std::string> missing() const {
        std::vector<std::string> out;
        for (const auto& [k, v] : refs)
            if (v == Load::Undefined) out.push_back(k);
        return out;
    }
};

void visit_expr(const Expr* e, Symbols& s) {
    if (!e) return;
    if (e->kind == EK::Name) {
        s.load(e->name);
        return;
    }
    visit_expr(e->a.get(), s);
    visit_expr(e->b.get(), s);
    visit_expr(e->c.get(), s);
    for (const auto& x : e->args) visit_expr(x.get(), s);
    for (const auto& kv : e->kwargs) visit_expr(kv.second.get(), s);
    visit_expr(e->dyn_args.get(), s);
    visit_expr(e->dyn_kwargs.get(), s);
}

void store_target(const Target& t, Symbols& s, bool as_param) {
    switch (t.kind) {
        case Target::Kind::Name:
            if (as_param) s.param(t.name);
            else s.store(t.name);
            break;
        case Target::Kind::NsAttr: s.load(t.name); break;
        case Target::Kind::Tuple:
            for (const auto& x : t.items) store_target(x, s, as_param);
            break;
    }
}

void visit_node(const Node& n, Symbols& s);

void visit_body(const Body& body, Symbols& s) {
    for (const auto& n : body) visit_node(*n, s);
}

// One `if` (or `elif`) with its condition tests[i] and the rest of the chain.
void visit_if(const Node& n, size_t i, Symbols& s) {
    visit_expr(n.tests[i].get(), s);
    auto branch = [&](auto&& fill) {
        Symbols b = s;
        fill(b);
        return b;
    };
    std::vector<Symbols> branches;
    branches.push_back(branch([&](Symbols& b) { visit_body(n.bodies[i], b); }));
    if (i == 0) {
        branches.push_back(branch([&](Symbols& b) {
            for (size_t k = 1; k < n.tests.size(); ++k) visit_if(n, k, b);
        }));
        branches.push_back(branch([&](Symbols& b) {
            if (n.bodies.size() > n.tests.size()) visit_body(n.bodies.back(), b);
        }));
    } else {
        branches.push_back(s);
        branches.push_back(s);
    }
    s.branch_update(branches);
}

void visit_node(const Node& n, Symbols& s) {
    switch (n.kind) {
        case NK::Output: visit_expr(n.expr.get(), s); break;
        case NK::If: visit_if(n, 0, s); break;
        case NK::For: visit_expr(n.expr.get(), s); break;
        case NK::Set:
            visit_expr(n.expr.get(), s);
            store_target(n.target, s, false);
            break;
        case NK::SetBlock: store_target(n.target, s, false); break;
        case NK::Macro: s.store(n.name); break;
        case NK::CallBlock: visit_expr(n.expr.get(), s); break;
        case NK::FilterBlock: visit_expr(n.expr.get(), s); break;
        case NK::With:
            for (const auto& v : n.values) visit_expr(v.get(), s);
            break;
        default: break;
    }
}

void analyze_body_scopes(const Body& body, const Symbols& frame);

// Analyzes a new scope whose parent is `parent`; `fill` visits its contents.
template <class F>
std::vector<std::string> scope(const Symbols& parent, const Body* nested, F&& fill) {
    Symbols s;
    s.parent = &parent;
    fill(s);
    if (nested) analyze_body_scopes(*nested, s);
    return s.missing();
}

void analyze_node_scopes(Node& n, const Symbols& frame) {
    switch (n.kind) {
        case NK::If:
            for (auto& b : n.bodies) analyze_body_scopes(b, frame);
            break;
        case NK::For:
            n.missing[0] = scope(frame, &n.bodies[0], [&](Symbols& s) {
                s.param("loop");
                store_target(n.target, s, true);
                visit_body(n.bodies[0], s);
            });
            if (n.bodies.size() > 1)
                n.missing[1] = scope(frame, &n.bodies[1], [&](Symbols& s) { visit_body(n.bodies[1], s); });
            if (n.cond)
                n.missing[2] = scope(frame, nullptr, [&](Symbols& s) {
                    store_target(n.target, s, true);
                    visit_expr(n.cond.get(), s);
                });
            break;
        case NK::Macro:
        case NK::CallBlock:
            n.missing[0] = scope(frame, &n.bodies[0], [&](Symbols& s) {
                for (const auto& p : n.params) s.param(p);
                for (const auto& d : n.defaults) visit_expr(d.get(), s);
                visit_body(n.bodies[0], s);
                if (n.uses_caller) s.param("caller");
                if (n.uses_kwargs) s.param("kwargs");
                if (n.uses_varargs) s.param("varargs");
            });
            break;
        case NK::FilterBlock:
            n.missing[0] = scope(frame, &n.bodies[0], [&](Symbols& s) {
                visit_body(n.bodies[0], s);
                visit_expr(n.expr.get(), s);
            });
            break;
        case NK::SetBlock:
        case NK::Scope:
            n.missing[0] = scope(frame, &n.bodies[0], [&](Symbols& s) { visit_body(n.bodies[0], s); });
            break;
        case NK::With:
            n.missing[0] = scope(frame, &n.bodies[0], [&](Symbols& s) {
                for (const auto& t : n.targets) store_target(t, s, true);
                visit_body(n.bodies[0], s);
            });
            break;
        default: break;
    }
}

void analyze_body_scopes(const Body& body, const Symbols& frame) {
    for (const auto& n : body) analyze_node_scopes(*n, frame);
}

}  // namespace

void analyze_scopes(TemplateAst& ast) {
    Symbols root;
    visit_body(ast.body, root);
    ast.root_missing = root.missing();
    analyze_body_scopes(ast.body, root);
}

}  // namespace loom::jinja::detail
