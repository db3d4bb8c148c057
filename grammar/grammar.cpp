// Grammar::from_rules after determinisation: trimming, state merging, the rule facts the
// matcher needs, and whole-text acceptance; see grammar.hpp.
#include "grammar/grammar.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "grammar/grammar_build.hpp"
#include "grammar/stack.hpp"

namespace loom::grammar {
namespace {

using detail::RawDfa;

// Live states can still reach acceptance of their rule (through calls of productive rules);
// a rule is productive when its start state is live. Worklist over reverse edges.
void find_live(const std::vector<RawDfa>& d, std::vector<std::vector<uint8_t>>& live,
               std::vector<uint8_t>& productive) {
    const size_t nr = d.size();
    live.assign(nr, {});
    productive.assign(nr, 0);
    std::vector<std::vector<std::vector<int32_t>>> rev(nr);                         // byte edges reversed
    std::vector<std::vector<std::vector<std::pair<int32_t, int32_t>>>> by_ret(nr);  // (state, callee) by ret
    std::vector<std::vector<std::array<int32_t, 3>>> by_callee(nr);                 // (rule, state, ret)
    std::vector<std::pair<int32_t, int32_t>> work;
    for (size_t r = 0; r < nr; ++r) {
        const RawDfa& x = d[r];
        live[r].assign(static_cast<size_t>(x.n_states), 0);
        rev[r].resize(static_cast<size_t>(x.n_states));
        by_ret[r].resize(static_cast<size_t>(x.n_states));
        for (int32_t s = 0; s < x.n_states; ++s) {
            for (int c = 0; c < x.n_classes; ++c) {
                const int32_t t = x.next[static_cast<size_t>(s * x.n_classes + c)];
                if (t >= 0) rev[r][static_cast<size_t>(t)].push_back(s);
            }
            for (const Call& c : x.calls[static_cast<size_t>(s)]) {
                by_ret[r][static_cast<size_t>(c.ret)].emplace_back(s, c.rule);
                by_callee[static_cast<size_t>(c.rule)].push_back({static_cast<int32_t>(r), s, c.ret});
            }
        }
    }
    auto mark = [&](size_t r, int32_t s) {
        if (live[r][static_cast<size_t>(s)]) return;
        live[r][static_cast<size_t>(s)] = 1;
        work.emplace_back(static_cast<int32_t>(r), s);
    };
    for (size_t r = 0; r < nr; ++r)
        for (int32_t s = 0; s < d[r].n_states; ++s)
            if (d[r].accept[static_cast<size_t>(s)]) mark(r, s);
    while (!work.empty()) {
        const auto [r, t] = work.back();
        work.pop_back();
        const auto ru = static_cast<size_t>(r);
        for (int32_t s : rev[ru][static_cast<size_t>(t)]) mark(ru, s);
        for (auto [s, callee] : by_ret[ru][static_cast<size_t>(t)])
            if (productive[static_cast<size_t>(callee)]) mark(ru, s);
        if (t == 0 && !productive[ru]) {
            productive[ru] = 1;
            for (auto [r2, s2, ret] : by_callee[ru])
                if (live[static_cast<size_t>(r2)][static_cast<size_t>(ret)]) mark(static_cast<size_t>(r2), s2);
        }
    }
}

// Drops dead and unreachable states and rules; renumbers rules (root stays 0) and states
// (breadth-first from the start).
std::vector<RawDfa> trim(const std::vector<RawDfa>& d, std::vector<std::string>& names) {
    std::vector<std::vector<uint8_t>> live;
    std::vector<uint8_t> productive;
    find_live(d, live, productive);
    if (!productive[0]) throw GrammarError("the constraint matches no text at all");
    const size_t nr = d.size();
    std::vector<int32_t> rule_id(nr, -1);
    std::vector<std::vector<int32_t>> state_id(nr);
    std::vector<std::vector<int32_t>> order(nr);  // old state ids in new order
    std::vector<int32_t> rule_order;
    auto reach_rule = [&](int32_t r) {
        if (rule_id[static_cast<size_t>(r)] >= 0) return;
        rule_id[static_cast<size_t>(r)] = static_cast<int32_t>(rule_order.size());
        rule_order.push_back(r);
        state_id[static_cast<size_t>(r)].assign(static_cast<size_t>(d[static_cast<size_t>(r)].n_states), -1);
    };
    reach_rule(0);
    for (size_t k = 0; k < rule_order.size(); ++k) {
        const int32_t r = rule_order[k];
        const auto ru = static_cast<size_t>(r);
        const RawDfa& x = d[ru];
        auto& ids = state_id[ru];
        auto& ord = order[ru];
        ids[0] = 0;
        ord.push_back(0);
        for (size_t q = 0; q < ord.size(); ++q) {
            const int32_t s = ord[q];
            auto visit = [&](int32_t t) {
                if (t >= 0 && live[ru][static_cast<size_t>(t)] && ids[static_cast<size_t>(t)] < 0) {
                    ids[static_cast<size_t>(t)] = static_cast<int32_t>(ord.size());
                    ord.push_back(t);
                }
            };
            for (int c = 0; c < x.n_classes; ++c) visit(x.next[static_cast<size_t>(s * x.n_classes + c)]);
            for (const Call& c : x.calls[static_cast<size_t>(s)])
                if (productive[static_cast<size_t>(c.rule)] && live[ru][static_cast<size_t>(c.ret)]) {
                    visit(c.ret);
                    reach_rule(c.rule);
                }
        }
    }
    std::vector<RawDfa> out;
    std::vector<std::string> out_names;
    for (int32_t r : rule_order) {
        const auto ru = static_cast<size_t>(r);
        const RawDfa& x = d[ru];
        RawDfa y;
        y.n_classes = x.n_classes;
        y.byte_class = x.byte_class;
        y.n_states = static_cast<int32_t>(order[ru].size());
        for (int32_t s : order[ru]) {
            for (int c = 0; c < x.n_classes; ++c) {
                const int32_t t = x.next[static_cast<size_t>(s * x.n_classes + c)];
                y.next.push_back(t >= 0 ? state_id[ru][static_cast<size_t>(t)] : -1);
            }
            y.accept.push_back(x.accept[static_cast<size_t>(s)]);
            y.calls.emplace_back();
            for (const Call& c : x.calls[static_cast<size_t>(s)])
                if (productive[static_cast<size_t>(c.rule)] && live[ru][static_cast<size_t>(c.ret)])
                    y.calls.back().push_back(
                        {rule_id[static_cast<size_t>(c.rule)], state_id[ru][static_cast<size_t>(c.ret)]});
        }
        out.push_back(std::move(y));
        out_names.push_back(names[ru]);
    }
    names.swap(out_names);
    return out;
}

struct SigHash {
    size_t operator()(const std::vector<int32_t>& v) const {
        uint64_t h = 1469598103934665603ull;
        for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
        return static_cast<size_t>(h);
    }
};

// Merges states with identical behaviour (same acceptance, same successors, same calls).
// Passes run from the last state to the first: subset construction numbers states
// breadth-first, so successors mostly come later and one pass merges whole chains; passes
// repeat until nothing merges. Every merge is exact, so the result is always correct.
RawDfa merge_states(const RawDfa& x) {
    std::vector<int32_t> canon(static_cast<size_t>(x.n_states));
    for (int32_t s = 0; s < x.n_states; ++s) canon[static_cast<size_t>(s)] = s;
    std::vector<int32_t> sig;
    for (bool merged = true; merged;) {
        merged = false;
        std::unordered_map<std::vector<int32_t>, int32_t, SigHash> by_sig;
        by_sig.reserve(static_cast<size_t>(x.n_states));
        for (int32_t s = x.n_states; s-- > 0;) {
            if (canon[static_cast<size_t>(s)] != s) continue;
            sig.assign(1, x.accept[static_cast<size_t>(s)]);
            for (int c = 0; c < x.n_classes; ++c) {
                const int32_t t = x.next[static_cast<size_t>(s * x.n_classes + c)];
                sig.push_back(t >= 0 ? canon[static_cast<size_t>(t)] : -1);
            }
            for (const Call& c : x.calls[static_cast<size_t>(s)]) {
                sig.push_back(c.rule);
                sig.push_back(canon[static_cast<size_t>(c.ret)]);
            }
            auto [it, fresh] = by_sig.try_emplace(sig, s);
            if (!fresh) {
                canon[static_cast<size_t>(s)] = it->second;
                merged = true;
            }
        }
        // Point every state at its final representative.
        for (int32_t s = 0; s < x.n_states; ++s) {
            int32_t r = canon[static_cast<size_t>(s)];
            while (canon[static_cast<size_t>(r)] != r) r = canon[static_cast<size_t>(r)];
            canon[static_cast<size_t>(s)] = r;
        }
    }
    const std::vector<int32_t>& cls = canon;  // class = representative state
    const int32_t n_cls = x.n_states;
    // Renumber classes breadth-first from the start's class.
    std::vector<int32_t> id(static_cast<size_t>(n_cls), -1), rep;
    std::vector<int32_t> first(static_cast<size_t>(n_cls), -1);
    for (int32_t s = 0; s < x.n_states; ++s)
        if (first[static_cast<size_t>(cls[static_cast<size_t>(s)])] < 0)
            first[static_cast<size_t>(cls[static_cast<size_t>(s)])] = s;
    id[static_cast<size_t>(cls[0])] = 0;
    rep.push_back(0);
    for (size_t q = 0; q < rep.size(); ++q) {
        const int32_t s = rep[q];
        auto visit = [&](int32_t t) {
            const int32_t c = cls[static_cast<size_t>(t)];
            if (id[static_cast<size_t>(c)] < 0) {
                id[static_cast<size_t>(c)] = static_cast<int32_t>(rep.size());
                rep.push_back(first[static_cast<size_t>(c)]);
            }
        };
        for (int c = 0; c < x.n_classes; ++c) {
            const int32_t t = x.next[static_cast<size_t>(s * x.n_classes + c)];
            if (t >= 0) visit(t);
        }
        for (const Call& c : x.calls[static_cast<size_t>(s)]) visit(c.ret);
    }
    RawDfa y;
    y.n_states = static_cast<int32_t>(rep.size());
    // Byte classes that no state tells apart any more are merged.
    std::vector<int> col_id(static_cast<size_t>(x.n_classes));
    std::map<std::vector<int32_t>, int> col_index;
    for (int c = 0; c < x.n_classes; ++c) {
        std::vector<int32_t> col;
        for (int32_t s : rep) {
            const int32_t t = x.next[static_cast<size_t>(s * x.n_classes + c)];
            col.push_back(t >= 0 ? id[static_cast<size_t>(cls[static_cast<size_t>(t)])] : -1);
        }
        auto [it, fresh] = col_index.try_emplace(std::move(col), static_cast<int>(col_index.size()));
        col_id[static_cast<size_t>(c)] = it->second;
    }
    y.n_classes = static_cast<int32_t>(col_index.size());
    for (int b = 0; b < 256; ++b)
        y.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(col_id[x.byte_class[static_cast<size_t>(b)]]);
    y.next.assign(static_cast<size_t>(y.n_states) * static_cast<size_t>(y.n_classes), -1);
    for (int32_t k = 0; k < y.n_states; ++k) {
        const int32_t s = rep[static_cast<size_t>(k)];
        for (int c = 0; c < x.n_classes; ++c) {
            const int32_t t = x.next[static_cast<size_t>(s * x.n_classes + c)];
            y.next[static_cast<size_t>(k * y.n_classes + col_id[static_cast<size_t>(c)])] =
                t >= 0 ? id[static_cast<size_t>(cls[static_cast<size_t>(t)])] : -1;
        }
        y.accept.push_back(x.accept[static_cast<size_t>(s)]);
        y.calls.emplace_back();
        for (const Call& c : x.calls[static_cast<size_t>(s)])
            y.calls.back().push_back({c.rule, id[static_cast<size_t>(cls[static_cast<size_t>(c.ret)])]});
    }
    return y;
}

// A rule that can call itself before consuming a byte would push forever.
void check_left_recursion(const std::vector<RuleDfa>& rules) {
    const size_t nr = rules.size();
    std::vector<std::vector<int32_t>> left(nr);
    for (size_t r = 0; r < nr; ++r) {
        const RuleDfa& x = rules[r];
        std::vector<uint8_t> seen(static_cast<size_t>(x.n_states), 0);
        std::vector<int32_t> stack{0};
        seen[0] = 1;
        while (!stack.empty()) {
            const int32_t s = stack.back();
            stack.pop_back();
            for (uint32_t k = x.call_begin[static_cast<size_t>(s)]; k < x.call_begin[static_cast<size_t>(s) + 1]; ++k) {
                const Call c = x.calls[k];
                left[r].push_back(c.rule);
                if (rules[static_cast<size_t>(c.rule)].can_end[0] && !seen[static_cast<size_t>(c.ret)]) {
                    seen[static_cast<size_t>(c.ret)] = 1;
                    stack.push_back(c.ret);
                }
            }
        }
    }
    std::vector<uint8_t> color(nr, 0);
    std::vector<std::pair<size_t, size_t>> path;
    for (size_t start = 0; start < nr; ++start) {
        if (color[start]) continue;
        color[start] = 1;
        path.emplace_back(start, 0);
        while (!path.empty()) {
            auto& [r, k] = path.back();
            if (k == left[r].size()) {
                color[r] = 2;
                path.pop_back();
                continue;
            }
            const auto t = static_cast<size_t>(left[r][k++]);
            if (color[t] == 1)
                throw GrammarError("rule '" + rules[t].name +
                                   "' is left-recursive (it can reach itself before any text)");
            if (color[t] == 0) {
                color[t] = 1;
                path.emplace_back(t, 0);
            }
        }
    }
}

}  // namespace

Grammar Grammar::from_rules(const Rules& rules, const GrammarLimits& limits) {
    if (rules.root < 0 || rules.root >= rules.size()) throw GrammarError("the grammar has no root rule");
    std::vector<std::string> names;
    std::vector<RawDfa> raw = detail::build_raw_dfas(rules, limits, names);
    raw = trim(raw, names);
    auto data = std::make_shared<Data>();
    for (size_t r = 0; r < raw.size(); ++r) {
        RawDfa m = merge_states(raw[r]);
        RuleDfa y;
        y.name = names[r];
        y.n_states = m.n_states;
        y.n_classes = m.n_classes;
        y.byte_class = m.byte_class;
        y.next = std::move(m.next);
        y.accept = m.accept;
        y.call_begin.push_back(0);
        for (const auto& cs : m.calls) {
            y.calls.insert(y.calls.end(), cs.begin(), cs.end());
            y.call_begin.push_back(static_cast<uint32_t>(y.calls.size()));
        }
        y.has_out.assign(static_cast<size_t>(y.n_states), 0);
        for (int32_t s = 0; s < y.n_states; ++s) {
            bool out = y.call_begin[static_cast<size_t>(s) + 1] > y.call_begin[static_cast<size_t>(s)];
            for (int c = 0; c < y.n_classes && !out; ++c) out = y.next[static_cast<size_t>(s * y.n_classes + c)] >= 0;
            y.has_out[static_cast<size_t>(s)] = out ? 1 : 0;
        }
        y.can_end = y.accept;
        data->rules.push_back(std::move(y));
    }
    // can_end: accepting, or a call of a rule matching "" that returns to such a state.
    for (bool changed = true; changed;) {
        changed = false;
        for (auto& y : data->rules)
            for (int32_t s = 0; s < y.n_states; ++s) {
                if (y.can_end[static_cast<size_t>(s)]) continue;
                for (uint32_t k = y.call_begin[static_cast<size_t>(s)]; k < y.call_begin[static_cast<size_t>(s) + 1];
                     ++k)
                    if (data->rules[static_cast<size_t>(y.calls[k].rule)].can_end[0] &&
                        y.can_end[static_cast<size_t>(y.calls[k].ret)]) {
                        y.can_end[static_cast<size_t>(s)] = 1;
                        changed = true;
                        break;
                    }
            }
    }
    check_left_recursion(data->rules);
    data->sites.resize(data->rules.size());
    data->first_state.push_back(0);
    for (size_t r = 0; r < data->rules.size(); ++r) {
        const RuleDfa& y = data->rules[r];
        for (int32_t s = 0; s < y.n_states; ++s)
            for (uint32_t k = y.call_begin[static_cast<size_t>(s)]; k < y.call_begin[static_cast<size_t>(s) + 1]; ++k) {
                auto& sites = data->sites[static_cast<size_t>(y.calls[k].rule)];
                const CallSite cs{static_cast<int32_t>(r), y.calls[k].ret};
                if (std::find(sites.begin(), sites.end(), cs) == sites.end()) sites.push_back(cs);
            }
        data->first_state.push_back(data->first_state.back() + static_cast<size_t>(y.n_states));
    }
    Grammar g;
    g.d_ = std::move(data);
    return g;
}

namespace {

bool run_text(const Grammar& g, std::string_view text, bool whole) {
    detail::StackArena a;
    std::vector<int32_t> cur{a.intern(0, 0, detail::kBottom)}, next, visited;
    for (char ch : text) {
        detail::step_set(g, a, cur, static_cast<uint8_t>(ch), next, visited);
        if (next.empty()) return false;
        cur.swap(next);
    }
    if (!whole) return true;
    for (int32_t n : cur)
        if (detail::stack_can_end(g, a, n)) return true;
    return false;
}

}  // namespace

bool Grammar::accepts(std::string_view text) const { return run_text(*this, text, true); }
bool Grammar::accepts_prefix(std::string_view text) const { return run_text(*this, text, false); }

}  // namespace loom::grammar
