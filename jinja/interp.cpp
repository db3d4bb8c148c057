// Statement execution (output, if, for, set, macro, call, filter, with) and Template.
#include "jinja/interp.hpp"

namespace loom::jinja {

using detail::Body;
using detail::NK;
using detail::Node;
using detail::Target;

namespace {

// Copies containers (not strings) so that list.pop()/clear() in a template cannot
// change the caller's data.
Value deep_copy(const Value& v, int depth) {
    if (depth > 600) throw TemplateError("context nested too deeply");
    if (v.is_array()) {
        std::vector<Value> items;
        items.reserve(v.items().size());
        for (const Value& x : v.items()) items.push_back(deep_copy(x, depth + 1));
        return Value::list(std::move(items), v.kind());
    }
    if (v.is_dict()) {
        auto o = make_deferred<Object>();
        for (const auto& [k, x] : v.obj().entries()) o->set(k, deep_copy(x, depth + 1));
        return Value::dict(std::move(o));
    }
    return v;
}

// Restores the output buffer pointer when a capture ends (also on exceptions).
struct OutSwap {
    std::string*& slot;
    std::string* saved;
    OutSwap(std::string*& s, std::string* now) : slot(s), saved(s) { slot = now; }
    ~OutSwap() { slot = saved; }
};

}  // namespace

Interp::Interp(const detail::TemplateAst& ast, const Limits& limits) : ast_(ast), limits_(limits) {}

Interp::~Interp() {
    // Namespaces are the only objects a template can make reference cycles with.
    for (auto& w : namespaces_)
        if (auto p = w.lock()) p->clear();
    if (root_) root_->vars.clear();
    context_.clear();
}

std::string Interp::run(const Value& context) {
    PrintLimit print_limit(limits_.max_output_bytes);
    root_ = std::make_shared<Frame>();
    if (context.is_dict())
        for (const auto& [k, v] : context.obj().entries())
            if (k.is_string()) context_[k.str()] = deep_copy(v, 0);
    for (const auto& name : ast_.root_missing) root_->vars[name] = Value::undefined_variable(name);
    std::string out;
    out_ = &out;
    try {
        exec(ast_.body, root_);
    } catch (const TemplateError& e) {
        if (e.from_raise_exception()) throw;
        throw TemplateError("line " + std::to_string(line) + ": " + e.what());
    } catch (const std::bad_alloc&) {
        throw TemplateError("line " + std::to_string(line) + ": out of memory");
    } catch (const std::exception& e) {
        // A bug in loom, not in the template: still report it as a template error.
        throw TemplateError("line " + std::to_string(line) + ": internal error: " + e.what());
    }
    out_ = nullptr;
    return out;
}

void Interp::write(std::string_view s) {
    if (out_->size() + s.size() > limits_.max_output_bytes)
        throw TemplateError("output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
    charge(s.size() / 16);
    out_->append(s);
}

void Interp::charge(uint64_t units) {
    steps_ += units;
    if (steps_ > limits_.max_steps)
        throw TemplateError("template exceeded its step budget (" + std::to_string(limits_.max_steps) +
                            " loop iterations, calls and copies)");
}

void Interp::check_size(size_t size) const {
    if (size > limits_.max_output_bytes)
        throw TemplateError("value exceeds the size limit of " + std::to_string(limits_.max_output_bytes));
}

void Interp::check_items(size_t n) const {
    if (n > limits_.max_output_bytes / 16)
        throw TemplateError("container exceeds the limit of " + std::to_string(limits_.max_output_bytes / 16) +
                            " items");
}

void Interp::too_deep() const { throw TemplateError("maximum recursion depth exceeded"); }

Value Interp::new_namespace(std::shared_ptr<Object> attrs) {
    namespaces_.push_back(attrs);
    return Value::ns(std::move(attrs));
}

Interp::CallGuard::CallGuard(Interp& in) : in_(in), line_(in.line) {
    if (++in_.call_depth_ > in_.limits_.max_call_depth) {
        --in_.call_depth_;
        throw TemplateError("maximum recursion depth exceeded in macro calls");
    }
    in_.charge(4);  // a call costs a scope, its arguments and an output buffer
}

Interp::CallGuard::~CallGuard() {
    --in_.call_depth_;
    in_.line = line_;
}

std::string Interp::capture(const Body& body, const FrameP& f) {
    std::string buf;
    OutSwap swap(out_, &buf);
    exec(body, f);
    return buf;
}

Value Interp::eval_filter_block(const detail::Expr& e, const FrameP& f, const Value& input) {
    struct Restore {
        const Value*& slot;
        const Value* saved;
        ~Restore() { slot = saved; }
    } restore{filter_block_input, filter_block_input};
    filter_block_input = &input;
    return eval(e, f);
}

static FrameP child(const FrameP& parent) {
    auto f = std::make_shared<Frame>();
    f->parent = parent;
    return f;
}

// A new scope under `parent` with the names Jinja2 binds as missing on entry.
static FrameP child(const FrameP& parent, const std::vector<std::string>& missing) {
    FrameP f = child(parent);
    for (const auto& name : missing) f->vars[name] = Value::undefined_variable(name);
    return f;
}

Flow Interp::exec(const Body& body, const FrameP& f) {
    DepthGuard guard(*this);
    for (const auto& np : body) {
        const Node& n = *np;
        line = n.line;
        switch (n.kind) {
            case NK::Text: write(n.text); break;
            case NK::Output: {
                Value v = eval(*n.expr, f);
                if (v.is_string()) {
                    write(v.str());
                } else {
                    std::string s = v.to_str();
                    write(s);
                }
                break;
            }
            case NK::If: {
                size_t i = 0;
                for (; i < n.tests.size(); ++i) {
                    line = n.tests[i]->line;
                    if (eval(*n.tests[i], f).truthy()) break;
                }
                if (i < n.bodies.size()) {
                    Flow fl = exec(n.bodies[i], f);
                    if (fl != Flow::Normal) return fl;
                }
                break;
            }
            case NK::For: exec_for(n, f); break;
            case NK::Set: assign(n.target, eval(*n.expr, f), f); break;
            case NK::SetBlock: {
                FrameP inner = child(f, n.missing[0]);
                Value v(capture(n.bodies[0], inner));
                if (n.expr) v = eval_filter_block(*n.expr, inner, v);
                line = n.line;
                assign(n.target, v, f);
                break;
            }
            case NK::Macro: f->vars[n.name] = make_macro(n, f); break;
            case NK::CallBlock: {
                Value caller = make_macro(n, f);
                CallArgs args;
                eval_args(*n.expr, f, args);
                args.kw.emplace_back("caller", caller);
                Value callee = eval(*n.expr->a, f);
                Value r = call(callee, args);
                write(r.is_string() ? r.str() : r.to_str());
                break;
            }
            case NK::FilterBlock: {
                FrameP inner = child(f, n.missing[0]);
                const Value r = eval_filter_block(*n.expr, inner, Value(capture(n.bodies[0], inner)));
                write(r.to_str());
                break;
            }
            case NK::With: {
                FrameP inner = child(f, n.missing[0]);
                for (size_t i = 0; i < n.targets.size(); ++i) assign(n.targets[i], eval(*n.values[i], f), inner);
                Flow fl = exec(n.bodies[0], inner);
                if (fl != Flow::Normal) return fl;
                break;
            }
            case NK::Scope: {
                Flow fl = exec(n.bodies[0], child(f, n.missing[0]));
                if (fl != Flow::Normal) return fl;
                break;
            }
            case NK::Break: return Flow::Break;
            case NK::Continue: return Flow::Continue;
            case NK::Unsupported:
                throw TemplateError("no loader for this environment specified ({% " + n.text + " %} is not supported)");
        }
    }
    return Flow::Normal;
}

void Interp::assign(const Target& t, const Value& v, const FrameP& f) {
    switch (t.kind) {
        case Target::Kind::Name: f->vars[t.name] = v; return;
        case Target::Kind::NsAttr: {
            Value ns = lookup(f, t.name);
            if (!ns.is_namespace()) throw TemplateError("cannot assign attribute on non-namespace object");
            ns.obj().set(t.attr, v);
            return;
        }
        case Target::Kind::Tuple: {
            std::vector<Value> items = iterate(v);
            if (items.size() > t.items.size())
                throw TemplateError("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
            if (items.size() < t.items.size())
                throw TemplateError("not enough values to unpack (expected " + std::to_string(t.items.size()) +
                                    ", got " + std::to_string(items.size()) + ")");
            for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], f);
            return;
        }
    }
}

void Interp::exec_for(const Node& n, const FrameP& f) {
    std::vector<Value> items = iterate(eval(*n.expr, f));
    if (n.cond) {
        std::vector<Value> kept;
        for (Value& item : items) {
            charge(1);
            FrameP tf = child(f, n.missing[2]);
            assign(n.target, item, tf);
            if (eval(*n.cond, tf).truthy()) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        if (n.bodies.size() > 1) exec(n.bodies[1], child(f, n.missing[1]));
        return;
    }
    run_loop(n, f, std::move(items), 0);
}

void Interp::run_loop(const Node& n, const FrameP& f, std::vector<Value> items, int64_t depth0) {
    auto st = make_deferred<LoopState>();
    st->items = std::move(items);
    st->depth0 = depth0;
    if (n.recursive) {
        const Node* np = &n;
        std::weak_ptr<Frame> wf = f;
        st->recurse = [np, wf, depth0](Interp& in, CallArgs& args) -> Value {
            if (args.pos.size() != 1 || !args.kw.empty()) throw TemplateError("loop() takes exactly one argument");
            CallGuard g(in);
            FrameP frame = wf.lock();
            if (!frame) frame = in.root();
            std::vector<Value> sub_items = in.iterate(args.pos[0]);
            if (np->cond) {
                std::vector<Value> kept;
                for (Value& item : sub_items) {
                    FrameP tf = child(frame, np->missing[2]);
                    in.assign(np->target, item, tf);
                    if (in.eval(*np->cond, tf).truthy()) kept.push_back(std::move(item));
                }
                sub_items = std::move(kept);
            }
            std::string buf;
            {
                OutSwap swap(in.out_, &buf);
                if (!sub_items.empty()) in.run_loop(*np, frame, std::move(sub_items), depth0 + 1);
            }
            return Value(std::move(buf));
        };
    }
    Value loop_value = Value::loop(st);
    FrameP it;
    for (size_t i = 0; i < st->items.size(); ++i) {
        charge(1);
        st->index0 = static_cast<int64_t>(i);
        // Each iteration starts a fresh scope; reuse the previous one when nothing kept it.
        if (it && it.use_count() == 1) {
            it->vars.clear();
            for (const auto& name : n.missing[0]) it->vars[name] = Value::undefined_variable(name);
        } else {
            it = child(f, n.missing[0]);
        }
        line = n.line;
        assign(n.target, st->items[i], it);
        it->vars["loop"] = loop_value;
        if (exec(n.bodies[0], it) == Flow::Break) break;
    }
}

Value Interp::make_macro(const Node& n, const FrameP& f) {
    const Node* np = &n;
    std::weak_ptr<Frame> def = f;
    std::string name = n.kind == NK::CallBlock ? "caller" : n.name;
    return Value::function(
        name, [np, def](Interp& in, CallArgs& args) { return in.call_macro(*np, def, args); },
        "<Macro '" + name + "'>");
}

Value Interp::call_macro(const Node& n, const std::weak_ptr<Frame>& def, CallArgs& args) {
    CallGuard guard(*this);
    const std::string name = n.kind == NK::CallBlock ? "caller" : n.name;
    FrameP parent = def.lock();
    FrameP frame = child(parent ? parent : root_, n.missing[0]);
    const size_t np = n.params.size(), npos = args.pos.size();
    auto take_kw = [&](const std::string& key, Value& out) {
        for (auto it = args.kw.begin(); it != args.kw.end(); ++it)
            if (it->first == key) {
                out = std::move(it->second);
                args.kw.erase(it);
                return true;
            }
        return false;
    };
    bool found_caller = false;
    std::vector<bool> given(np, false);
    std::vector<Value> vals(np);
    for (size_t i = 0; i < np; ++i) {
        if (i < npos) {
            vals[i] = args.pos[i];
            given[i] = true;
        } else {
            given[i] = take_kw(n.params[i], vals[i]);
        }
        if (n.params[i] == "caller") found_caller = true;
    }
    const size_t first_default = np - n.defaults.size();
    for (size_t i = 0; i < np; ++i) {
        if (!given[i]) {
            if (i >= first_default) vals[i] = eval(*n.defaults[i - first_default], frame);
            else vals[i] = Value::undefined("parameter '" + n.params[i] + "' was not provided");
        }
        frame->vars[n.params[i]] = vals[i];
    }
    if (n.uses_caller && !found_caller) {
        Value caller;
        if (!take_kw("caller", caller) || caller.is_none()) caller = Value::undefined("No caller defined");
        frame->vars["caller"] = caller;
    }
    if (n.uses_kwargs) {
        auto kw = make_deferred<Object>();
        for (auto& [k, v] : args.kw) kw->set(k, v);
        frame->vars["kwargs"] = Value::dict(std::move(kw));
    } else if (!args.kw.empty()) {
        for (auto& [k, v] : args.kw)
            if (k == "caller")
                throw TemplateError("macro '" + name +
                                    "' was invoked with two values for the special caller argument. This is most "
                                    "likely a bug.");
        throw TemplateError("macro '" + name + "' takes no keyword argument '" + args.kw[0].first + "'");
    }
    if (n.uses_varargs) {
        std::vector<Value> extra;
        for (size_t i = np; i < npos; ++i) extra.push_back(args.pos[i]);
        frame->vars["varargs"] = Value::list(std::move(extra), Value::Kind::Tuple);
    } else if (npos > np) {
        throw TemplateError("macro '" + name + "' takes not more than " + std::to_string(np) + " argument(s)");
    }
    return Value(capture(n.bodies[0], frame));
}

Template Template::parse(std::string_view source) {
    Template t;
    try {
        t.ast_ = detail::parse_template(source);
    } catch (const TemplateError&) { throw; } catch (const std::exception& e) {
        throw TemplateError(std::string("internal error while parsing: ") + e.what());
    }
    return t;
}

std::string Template::render(const Value& context, const Limits& limits) const {
    if (!ast_) throw TemplateError("template not parsed");
    Interp in(*ast_, limits);
    return in.run(context);
}

}  // namespace loom::jinja
