// Expression builders with simplification, and the GBNF-like printer; see expr.hpp.
#include "grammar/expr.hpp"

#include <cstdio>

namespace loom::grammar {
namespace {

constexpr size_t kFlattenMax = 8;
constexpr size_t kPrintMax = 1 << 20;  // bytes of Rules::to_string
constexpr int kPrintDepth = 200;

// A new node of kind `k`, still writable so a builder can fill it in (ExprPtr is const).
std::shared_ptr<Expr> make(ExprKind k) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    return e;
}

void print_cp(std::string& out, uint32_t cp, bool in_class) {
    char buf[16];
    if (cp == '\\' || cp == '"' || (in_class && (cp == ']' || cp == '-' || cp == '^'))) {
        out += '\\';
        out += static_cast<char>(cp);
    } else if (cp == '\n') {
        out += "\\n";
    } else if (cp == '\t') {
        out += "\\t";
    } else if (cp == '\r') {
        out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
        std::snprintf(buf, sizeof buf, "\\x%02X", cp);
        out += buf;
    } else if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else {
        std::snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
        out += buf;
    }
}

void print(std::string& out, const Expr& e, const Rules& rules, int prec, int depth = 0) {
    if (out.size() > kPrintMax || depth > kPrintDepth) {
        out += "...";
        return;
    }
    // A Seq (binding level 1) or Alt (level 0): the items at level + 1 joined by `sep`, in
    // parentheses when the context binds tighter than `level`.
    auto print_joined = [&](int level, const char* sep) {
        if (prec > level) out += '(';
        for (size_t k = 0; k < e.items.size(); ++k) {
            if (k) out += sep;
            print(out, *e.items[k], rules, level + 1, depth + 1);
        }
        if (prec > level) out += ')';
    };
    switch (e.kind) {
        case ExprKind::Empty: out += "\"\""; return;
        case ExprKind::Nothing: out += "[]"; return;
        case ExprKind::Literal: {
            out += '"';
            size_t pos = 0;
            uint32_t cp;
            while (pos < e.text.size()) {
                if (next_utf8(e.text, pos, cp)) {
                    print_cp(out, cp, false);
                } else {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<uint8_t>(e.text[pos++]));
                    out += buf;
                }
            }
            out += '"';
            return;
        }
        case ExprKind::Chars: {
            const auto& rs = e.chars.ranges();
            if (rs.size() == 1 && rs[0].first == 0 && rs[0].second == kMaxCodePoint) {
                out += '.';
                return;
            }
            out += '[';
            for (auto [lo, hi] : rs) {
                print_cp(out, lo, true);
                if (hi != lo) {
                    if (hi != lo + 1) out += '-';
                    print_cp(out, hi, true);
                }
            }
            out += ']';
            return;
        }
        case ExprKind::Seq: return print_joined(1, " ");
        case ExprKind::Alt: return print_joined(0, " | ");
        case ExprKind::Repeat:
            print(out, *e.items[0], rules, 3, depth + 1);
            if (e.min == 0 && e.max == 1) out += '?';
            else if (e.min == 0 && e.max == kUnbounded) out += '*';
            else if (e.min == 1 && e.max == kUnbounded) out += '+';
            else if (e.max == kUnbounded) out += '{' + std::to_string(e.min) + ",}";
            else if (e.min == e.max) out += '{' + std::to_string(e.min) + '}';
            else out += '{' + std::to_string(e.min) + ',' + std::to_string(e.max) + '}';
            return;
        case ExprKind::Ref: out += rules.name(e.rule); return;
        case ExprKind::Dfa: out += "<dfa:" + std::to_string(e.dfa->n_states) + '>'; return;
    }
}

}  // namespace

ExprPtr empty() {
    static const ExprPtr e = make(ExprKind::Empty);
    return e;
}

ExprPtr nothing() {
    static const ExprPtr e = make(ExprKind::Nothing);
    return e;
}

ExprPtr lit(std::string_view bytes) {
    if (bytes.empty()) return empty();
    auto e = make(ExprKind::Literal);
    e->text = bytes;
    return e;
}

ExprPtr chars(CharSet set) {
    if (set.empty()) return nothing();
    auto e = make(ExprKind::Chars);
    e->chars = std::move(set);
    return e;
}

namespace {

// The Seq or Alt node of the already flattened `flat`: `none` when it is empty, its one
// item when it has one.
ExprPtr list_node(ExprKind kind, std::vector<ExprPtr> flat, ExprPtr none) {
    if (flat.empty()) return none;
    if (flat.size() == 1) return flat[0];
    auto e = make(kind);
    e->items = std::move(flat);
    return e;
}

}  // namespace

ExprPtr seq(std::vector<ExprPtr> items) {
    std::vector<ExprPtr> flat;
    for (auto& it : items) {
        if (it->kind == ExprKind::Nothing) return nothing();
        if (it->kind == ExprKind::Empty) continue;
        if (it->kind == ExprKind::Seq && it->items.size() <= kFlattenMax) {
            // Long sequences stay one shared node: flattening them into every sequence that
            // ends with them would copy them over and over (object members: n^2).
            flat.insert(flat.end(), it->items.begin(), it->items.end());
        } else if (it->kind == ExprKind::Literal && !flat.empty() && flat.back()->kind == ExprKind::Literal) {
            flat.back() = lit(flat.back()->text + it->text);  // adjacent literals merge
        } else {
            flat.push_back(it);
        }
    }
    return list_node(ExprKind::Seq, std::move(flat), empty());
}

ExprPtr alt(std::vector<ExprPtr> items) {
    std::vector<ExprPtr> flat;
    for (auto& it : items) {
        if (it->kind == ExprKind::Nothing) continue;
        if (it->kind == ExprKind::Alt && it->items.size() <= kFlattenMax)
            flat.insert(flat.end(), it->items.begin(), it->items.end());
        else flat.push_back(it);
    }
    return list_node(ExprKind::Alt, std::move(flat), nothing());
}

ExprPtr repeat(ExprPtr item, uint32_t min, uint32_t max) {
    if (min > max)
        throw GrammarError("repetition {" + std::to_string(min) + "," + std::to_string(max) + "} has min > max");
    if (max == 0 || item->kind == ExprKind::Empty) return empty();
    if (item->kind == ExprKind::Nothing) return min == 0 ? empty() : nothing();
    if (min == 1 && max == 1) return item;
    auto e = make(ExprKind::Repeat);
    e->items = {std::move(item)};
    e->min = min;
    e->max = max;
    return e;
}

ExprPtr ref(int32_t rule) {
    auto e = make(ExprKind::Ref);
    e->rule = rule;
    return e;
}

ExprPtr dfa(std::shared_ptr<const ByteDfa> d) {
    auto e = make(ExprKind::Dfa);
    e->dfa = std::move(d);
    return e;
}

int32_t Rules::add(std::string name) {
    names_.push_back(std::move(name));
    bodies_.emplace_back();
    return size() - 1;
}

void Rules::define(int32_t id, ExprPtr body) { bodies_.at(static_cast<size_t>(id)) = std::move(body); }

const ExprPtr& Rules::body(int32_t id) const {
    const ExprPtr& b = bodies_.at(static_cast<size_t>(id));
    if (!b) throw GrammarError("rule '" + name(id) + "' has no definition");
    return b;
}

std::string Rules::to_string() const {
    std::string out;
    auto one = [&](int32_t id) {
        if (out.size() > kPrintMax) return;
        out += name(id) + " ::= ";
        print(out, *body(id), *this, 0);
        out += '\n';
    };
    one(root);
    for (int32_t id = 0; id < size(); ++id)
        if (id != root) one(id);
    return out;
}

}  // namespace loom::grammar
