// Grammar::from_rules: which rules stay rules, Thompson NFAs, subset construction; see grammar.hpp.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "grammar/grammar_build.hpp"
#include "grammar/stack.hpp"

namespace loom::grammar {
namespace detail {
namespace {

// ---------------------------------------------------------------------------------------
// Which rules stay rules: the root, plus enough rules to cut every cycle of references.

void collect_refs(const Expr* e, std::unordered_set<const Expr*>& seen, std::vector<int32_t>& out) {
    if (!seen.insert(e).second) return;
    if (e->kind == ExprKind::Ref) out.push_back(e->rule);
    for (const auto& it : e->items) collect_refs(it.get(), seen, out);
}

std::vector<uint8_t> choose_kept(const Rules& rules) {
    const auto n = static_cast<size_t>(rules.size());
    std::vector<std::vector<int32_t>> refs(n);
    for (size_t r = 0; r < n; ++r) {
        std::unordered_set<const Expr*> seen;
        collect_refs(rules.body(static_cast<int32_t>(r)).get(), seen, refs[r]);
        std::sort(refs[r].begin(), refs[r].end());
        refs[r].erase(std::unique(refs[r].begin(), refs[r].end()), refs[r].end());
        for (int32_t t : refs[r])
            if (t < 0 || t >= rules.size()) throw GrammarError("reference to an unknown rule");
    }
    std::vector<uint8_t> kept(n, 0);
    kept[static_cast<size_t>(rules.root)] = 1;
    // Depth-first search over the rules that would be inlined; a back edge closes a cycle,
    // and its target (on the search path) becomes a rule of its own, called, not inlined.
    // Iterative, so deep reference chains cannot overflow the C++ stack.
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on path, 2 done
    std::vector<std::pair<int32_t, size_t>> path;
    auto visit_from = [&](int32_t start) {
        if (color[static_cast<size_t>(start)]) return;
        color[static_cast<size_t>(start)] = 1;
        path.emplace_back(start, 0);
        while (!path.empty()) {
            auto& [r, k] = path.back();
            const auto& out = refs[static_cast<size_t>(r)];
            if (k == out.size()) {
                color[static_cast<size_t>(r)] = 2;
                path.pop_back();
                continue;
            }
            const int32_t t = out[k++];
            if (kept[static_cast<size_t>(t)]) continue;
            if (color[static_cast<size_t>(t)] == 1) {
                kept[static_cast<size_t>(t)] = 1;  // cut the cycle here
            } else if (color[static_cast<size_t>(t)] == 0) {
                color[static_cast<size_t>(t)] = 1;
                path.emplace_back(t, 0);
            }
        }
    };
    for (size_t r = 0; r < n; ++r) {
        if (!kept[r]) continue;
        color[r] = 2;
        for (int32_t t : refs[r]) visit_from(t);
    }
    // A rule kept while it was on the path may have been entered through edges that are
    // now calls; rules not reached from any kept rule are simply never built.
    return kept;
}

// ---------------------------------------------------------------------------------------
// The work and memory a construction may still spend (GrammarLimits::max_work, max_memory),
// shared by every rule's NFA and DFA.

class Budget {
public:
    explicit Budget(const GrammarLimits& l) : limits_(l), work_(l.max_work), memory_(l.max_memory) {}

    void spend(size_t steps, size_t bytes) {
        if (steps > work_)
            throw GrammarError("the constraint needs more than " + std::to_string(limits_.max_work) +
                               " steps to compile (nested or overlapping repetitions?)");
        if (bytes > memory_)
            throw GrammarError("the constraint needs more than " +
                               (limits_.max_memory >= (1u << 20) ? std::to_string(limits_.max_memory >> 20) + " MiB"
                                                                 : std::to_string(limits_.max_memory) + " bytes") +
                               " to compile (nested or overlapping repetitions?)");
        work_ -= steps;
        memory_ -= bytes;
    }

private:
    const GrammarLimits& limits_;
    size_t work_, memory_;
};

// Estimated bytes of one NFA state with its edges, and per element of a DFA state's NFA
// state set (the set, its copy as a lookup key, the hash table's share).
constexpr size_t kNfaStateBytes = 128;
constexpr size_t kSetEntryBytes = 3 * sizeof(int32_t);
constexpr size_t kSetBytes = 3 * sizeof(std::vector<int32_t>) + 32;

// ---------------------------------------------------------------------------------------
// Thompson NFA, built right to left: build(e, exit) returns the entry state of a fragment
// that matches e and then continues at `exit`. (expr, exit) pairs are memoised, so shared
// sub-expressions with the same continuation are built once.

struct NfaState {
    struct Edge {
        uint8_t lo, hi;
        int32_t to;
    };
    std::vector<Edge> bytes;
    std::vector<int32_t> eps;
    std::vector<Call> calls;  // callee is a kept-rule index
};

class NfaBuilder {
public:
    NfaBuilder(const Rules& rules, const std::vector<int32_t>& kept_index, size_t limit, Budget& budget)
        : rules_(rules), kept_index_(kept_index), limit_(limit), budget_(budget) {}

    std::vector<NfaState> states;

    int32_t add() {
        if (states.size() >= limit_)
            throw GrammarError("the constraint needs more than " + std::to_string(limit_) +
                               " automaton states (very large repetition bounds?)");
        budget_.spend(1, kNfaStateBytes);
        states.emplace_back();
        return static_cast<int32_t>(states.size()) - 1;
    }

    int32_t build(const ExprPtr& e, int32_t exit) {
        const std::pair<const Expr*, int32_t> key{e.get(), exit};
        if (auto it = memo_.find(key); it != memo_.end()) return it->second;
        const int32_t entry = build_new(*e, exit);
        memo_.emplace(key, entry);
        return entry;
    }

private:
    struct PairHash {
        size_t operator()(const std::pair<const Expr*, int32_t>& p) const {
            return std::hash<const void*>()(p.first) * 31 + static_cast<size_t>(p.second);
        }
    };

    int32_t edge_to(uint8_t lo, uint8_t hi, int32_t to) {
        const int32_t s = add();
        states[static_cast<size_t>(s)].bytes.push_back({lo, hi, to});
        return s;
    }

    int32_t build_chars(const CharSet& set, int32_t exit) {
        // Suffixes of the UTF-8 byte-range sequences are shared per exit, so the many
        // sequences ending in [80-BF] lead to a few states.
        const int32_t entry = add();
        utf8_sequence_cache_.clear();
        for (auto [lo, hi] : set.ranges()) {
            utf8_sequences(lo, hi, [&](const ByteRangeSeq& seq) {
                int32_t cur = exit;
                ByteRangeSeq suffix;
                for (size_t k = seq.size(); k-- > 1;) {
                    suffix.insert(suffix.begin(), seq[k]);
                    auto [it, fresh] = utf8_sequence_cache_.try_emplace(suffix, -1);
                    if (fresh) it->second = edge_to(seq[k].first, seq[k].second, cur);
                    cur = it->second;
                }
                states[static_cast<size_t>(entry)].bytes.push_back({seq[0].first, seq[0].second, cur});
            });
        }
        return entry;
    }

    int32_t build_new(const Expr& e, int32_t exit) {
        switch (e.kind) {
            case ExprKind::Empty: return exit;
            case ExprKind::Nothing: return add();
            case ExprKind::Literal: {
                int32_t cur = exit;
                for (size_t k = e.text.size(); k-- > 0;) {
                    const auto b = static_cast<uint8_t>(e.text[k]);
                    cur = edge_to(b, b, cur);
                }
                return cur;
            }
            case ExprKind::Chars: return build_chars(e.chars, exit);
            case ExprKind::Seq: return build_seq(e, exit);
            case ExprKind::Alt: return build_alt(e, exit);
            case ExprKind::Repeat: {
                const ExprPtr& item = e.items[0];
                int32_t cur = exit;
                if (e.max == kUnbounded) {
                    const int32_t loop = add();
                    states[static_cast<size_t>(loop)].eps.push_back(exit);
                    const int32_t body = build(item, loop);
                    states[static_cast<size_t>(loop)].eps.push_back(body);
                    cur = loop;
                } else {
                    for (uint32_t k = e.min; k < e.max; ++k) {
                        const int32_t s = add();
                        states[static_cast<size_t>(s)].eps.push_back(exit);
                        const int32_t body = build(item, cur);
                        states[static_cast<size_t>(s)].eps.push_back(body);
                        cur = s;
                    }
                }
                for (uint32_t k = 0; k < e.min; ++k) cur = build(item, cur);
                return cur;
            }
            case ExprKind::Ref: {
                const int32_t k = kept_index_[static_cast<size_t>(e.rule)];
                if (k < 0) return build(rules_.body(e.rule), exit);
                const int32_t s = add();
                states[static_cast<size_t>(s)].calls.push_back({k, exit});
                return s;
            }
            case ExprKind::Dfa: {
                const ByteDfa& d = *e.dfa;
                const auto base = static_cast<int32_t>(states.size());
                for (int32_t s = 0; s < d.n_states; ++s) add();
                for (int32_t s = 0; s < d.n_states; ++s) {
                    auto& st = states[static_cast<size_t>(base + s)];
                    const int32_t* nx = d.next.data() + static_cast<size_t>(s) * 256;
                    for (int b = 0; b < 256;) {
                        if (nx[b] < 0) {
                            ++b;
                            continue;
                        }
                        int hi = b;
                        while (hi + 1 < 256 && nx[hi + 1] == nx[b]) ++hi;
                        st.bytes.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(hi), base + nx[b]});
                        b = hi + 1;
                    }
                    if (d.accept[static_cast<size_t>(s)]) st.eps.push_back(exit);
                }
                return base;
            }
        }
        return add();
    }

    // Likewise an alternation whose last item is an alternation, ... (the choice of the next
    // object member): one entry state per link, in a loop.
    int32_t build_alt(const Expr& e, int32_t exit) {
        const Expr* node = &e;
        const int32_t first = add();
        int32_t entry = first;
        while (true) {
            const auto& items = node->items;
            const Expr* last = items.back().get();
            const bool link = last->kind == ExprKind::Alt && !memo_.count({last, exit});
            const size_t end = link ? items.size() - 1 : items.size();
            for (size_t j = 0; j < end; ++j) {
                const int32_t s = build(items[j], exit);
                states[static_cast<size_t>(entry)].eps.push_back(s);
            }
            if (!link) return first;
            const int32_t next = add();
            states[static_cast<size_t>(entry)].eps.push_back(next);
            memo_.emplace(std::pair<const Expr*, int32_t>{last, exit}, next);
            entry = next;
            node = last;
        }
    }

    // A sequence whose last item is a sequence, whose last item is a sequence, ... (the
    // shared tails of object members) is built innermost first in a loop, each link
    // memoised, so thousands of links need no deep recursion.
    int32_t build_seq(const Expr& e, int32_t exit) {
        std::vector<const Expr*> chain{&e};
        int32_t cur = exit;
        bool tail_built = false;
        while (true) {
            const Expr* last = chain.back()->items.back().get();
            if (last->kind != ExprKind::Seq) break;
            if (auto it = memo_.find({last, exit}); it != memo_.end()) {
                cur = it->second;
                tail_built = true;
                break;
            }
            chain.push_back(last);
        }
        for (size_t k = chain.size(); k-- > 0;) {
            const auto& items = chain[k]->items;
            size_t end = items.size();
            if (k + 1 < chain.size() || tail_built) --end;  // its last item is already built
            for (size_t j = end; j-- > 0;) cur = build(items[j], cur);
            if (k > 0) memo_.emplace(std::pair<const Expr*, int32_t>{chain[k], exit}, cur);
        }
        return cur;
    }

    const Rules& rules_;
    const std::vector<int32_t>& kept_index_;
    size_t limit_;
    Budget& budget_;
    std::unordered_map<std::pair<const Expr*, int32_t>, int32_t, PairHash> memo_;
    std::map<ByteRangeSeq, int32_t> utf8_sequence_cache_;
};

// ---------------------------------------------------------------------------------------
// Subset construction over byte classes.

struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
        uint64_t h = 1469598103934665603ull;
        for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
        return static_cast<size_t>(h);
    }
};

RawDfa determinize(const NfaBuilder& nfa, int32_t start, int32_t final_state, size_t& budget, Budget& cost) {
    const auto& st = nfa.states;
    // Byte classes: bytes no edge of the NFA tells apart.
    std::array<uint8_t, 257> cut{};
    for (const auto& s : st)
        for (const auto& e : s.bytes) {
            cut[e.lo] = 1;
            cut[static_cast<size_t>(e.hi) + 1] = 1;
        }
    RawDfa d;
    int cls = 0;
    for (int b = 0; b < 256; ++b) {
        if (b > 0 && cut[static_cast<size_t>(b)]) ++cls;
        d.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(cls);
    }
    d.n_classes = cls + 1;

    std::vector<uint32_t> mark(st.size(), 0);
    uint32_t epoch = 0;
    auto closure = [&](std::vector<int32_t>& set) {
        ++epoch;
        std::vector<int32_t> stack;
        std::vector<int32_t> out;
        for (int32_t s : set)
            if (mark[static_cast<size_t>(s)] != epoch) {
                mark[static_cast<size_t>(s)] = epoch;
                stack.push_back(s);
            }
        cost.spend(set.size(), 0);
        while (!stack.empty()) {
            const int32_t s = stack.back();
            stack.pop_back();
            cost.spend(1 + st[static_cast<size_t>(s)].eps.size(), 0);
            out.push_back(s);
            for (int32_t t : st[static_cast<size_t>(s)].eps)
                if (mark[static_cast<size_t>(t)] != epoch) {
                    mark[static_cast<size_t>(t)] = epoch;
                    stack.push_back(t);
                }
        }
        std::sort(out.begin(), out.end());
        set.swap(out);
    };

    std::unordered_map<std::vector<int32_t>, int32_t, VecHash> index, by_kernel;
    std::vector<std::vector<int32_t>> sets;
    // Many transitions lead to the same few NFA states; their closure is found once.
    auto intern = [&](std::vector<int32_t> kernel) -> int32_t {
        std::sort(kernel.begin(), kernel.end());
        kernel.erase(std::unique(kernel.begin(), kernel.end()), kernel.end());
        cost.spend(kernel.size(), 0);
        if (auto k = by_kernel.find(kernel); k != by_kernel.end()) return k->second;
        cost.spend(0, kSetBytes + kernel.size() * kSetEntryBytes);
        std::vector<int32_t> set = kernel;
        closure(set);
        auto [it, fresh] = index.try_emplace(set, static_cast<int32_t>(sets.size()));
        if (fresh) {
            if (budget == 0) throw GrammarError("the constraint's automaton has too many states");
            --budget;
            cost.spend(0, set.size() * kSetEntryBytes + static_cast<size_t>(d.n_classes) * sizeof(int32_t));
            sets.push_back(std::move(set));
        }
        by_kernel.emplace(std::move(kernel), it->second);
        return it->second;
    };
    intern({start});
    std::vector<std::vector<int32_t>> targets(static_cast<size_t>(d.n_classes));
    for (size_t k = 0; k < sets.size(); ++k) {
        for (auto& t : targets) t.clear();
        std::map<int32_t, std::vector<int32_t>> calls;
        bool accept = false;
        for (int32_t s : sets[k]) {
            if (s == final_state) accept = true;
            for (const auto& e : st[static_cast<size_t>(s)].bytes) {
                cost.spend(static_cast<size_t>(d.byte_class[e.hi] - d.byte_class[e.lo]) + 1, 0);
                for (int c = d.byte_class[e.lo]; c <= d.byte_class[e.hi]; ++c)
                    targets[static_cast<size_t>(c)].push_back(e.to);
            }
            for (const Call& c : st[static_cast<size_t>(s)].calls) calls[c.rule].push_back(c.ret);
        }
        std::vector<int32_t> row(static_cast<size_t>(d.n_classes), -1);
        for (int c = 0; c < d.n_classes; ++c)
            if (!targets[static_cast<size_t>(c)].empty())
                row[static_cast<size_t>(c)] = intern(targets[static_cast<size_t>(c)]);
        d.next.insert(d.next.end(), row.begin(), row.end());
        d.accept.push_back(accept ? 1 : 0);
        d.calls.emplace_back();
        for (auto& [rule, rets] : calls) d.calls.back().push_back({rule, intern(rets)});
    }
    d.n_states = static_cast<int32_t>(sets.size());
    return d;
}

}  // namespace

std::vector<RawDfa> build_raw_dfas(const Rules& rules, const GrammarLimits& limits, std::vector<std::string>& names) {
    const std::vector<uint8_t> kept = choose_kept(rules);
    // Kept rules get dense indices, the root first.
    std::vector<int32_t> kept_index(static_cast<size_t>(rules.size()), -1);
    std::vector<int32_t> order{rules.root};
    for (int32_t r = 0; r < rules.size(); ++r)
        if (kept[static_cast<size_t>(r)] && r != rules.root) order.push_back(r);
    for (size_t k = 0; k < order.size(); ++k) kept_index[static_cast<size_t>(order[k])] = static_cast<int32_t>(k);

    std::vector<RawDfa> out;
    size_t nfa_budget = limits.max_nfa_states, dfa_budget = limits.max_dfa_states;
    Budget cost(limits);
    for (int32_t r : order) {
        NfaBuilder nfa(rules, kept_index, nfa_budget, cost);
        const int32_t fin = nfa.add();
        const int32_t start = nfa.build(rules.body(r), fin);
        nfa_budget -= std::min(nfa_budget, nfa.states.size());
        out.push_back(determinize(nfa, start, fin, dfa_budget, cost));
        names.push_back(rules.name(r));
    }
    return out;
}

}  // namespace detail
}  // namespace loom::grammar
