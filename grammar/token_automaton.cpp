// Per-state token classification by a memoised walk over the vocabulary trie; see token_automaton.hpp.
#include "grammar/token_automaton.hpp"

#include <algorithm>
#include <bit>

namespace loom::grammar {

using detail::kCtx;
using detail::kIn;

namespace {

// Returning below the classified frame continues in each place its rule is called from
// (those frames rest on kCtx); returning below one of those is "unknown context".
struct OnSentinel {
    const Grammar& g;
    detail::StackArena& a;
    uint8_t b;
    std::vector<int32_t>& out;
    std::vector<int32_t>& visited;
    bool& left_context;

    void operator()(int32_t sentinel, int32_t rule) {
        if (sentinel == kIn) {
            for (const CallSite& cs : g.call_sites(rule))
                detail::step_node(g, a, a.intern(cs.rule, cs.ret, kCtx), b, out, visited, *this);
        } else if (sentinel == kCtx && !g.call_sites(rule).empty()) {
            // A rule nobody calls is only ever the bottom frame: returning from it ends
            // the text, which no byte can follow. Otherwise the context is unknown.
            left_context = true;
        }
    }
};

bool rests_on_in(const detail::StackArena& a, int32_t node) {
    while (node >= 0) node = a[node].parent;
    return node == kIn;
}

}  // namespace

TokenAutomaton::TokenAutomaton(Grammar g, std::shared_ptr<const VocabBytes> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)), cache_(g_.n_states()) {
    configs_.emplace_back();  // config 0: no stack at all
    config_inside_.push_back(0);
    memo_.assign(256, 0);     // ... and it stays empty
    config_index_.emplace(std::vector<int32_t>{}, 0);
}

const TokenClasses& TokenAutomaton::classes(int32_t rule, int32_t state) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = cache_[g_.state_index(rule, state)];
    if (!slot) {
        slot = std::make_unique<TokenClasses>(classify(rule, state));
        ++n_classified_;
    }
    return *slot;
}

void TokenAutomaton::precompute() const {
    for (int32_t r = 0; r < g_.n_rules(); ++r)
        for (int32_t s = 0; s < g_.rule(r).n_states; ++s) classes(r, s);
}

size_t TokenAutomaton::n_classified() const {
    std::lock_guard<std::mutex> lock(mu_);
    return n_classified_;
}

int32_t TokenAutomaton::intern_config(std::vector<int32_t>& nodes) const {
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    auto [it, fresh] = config_index_.try_emplace(nodes, static_cast<int32_t>(configs_.size()));
    if (fresh) {
        bool inside = false;
        for (int32_t n : nodes) inside = inside || rests_on_in(arena_, n);
        configs_.push_back(nodes);
        config_inside_.push_back(inside ? 1 : 0);
        memo_.resize(memo_.size() + 256, -1);
    }
    return it->second;
}

int32_t TokenAutomaton::step_config(int32_t config, uint8_t b) const {
    const size_t at = static_cast<size_t>(config) * 256 + b;
    if (memo_[at] >= 0) return memo_[at];
    std::vector<int32_t> out, visited;
    bool left = false;
    OnSentinel on{g_, arena_, b, out, visited, left};
    const std::vector<int32_t> from = configs_[static_cast<size_t>(config)];
    for (int32_t n : from) detail::step_node(g_, arena_, n, b, out, visited, on);
    const int32_t next = intern_config(out);
    const int32_t r = next * 2 + (left ? 1 : 0);
    memo_[at] = r;
    return r;
}

TokenClasses TokenAutomaton::classify(int32_t rule, int32_t state) const {
    const TokenTrie& t = vocab_->trie();
    TokenClasses out;
    out.accepted.assign(vocab_->mask_words(), 0);
    std::vector<int32_t> start{arena_.intern(rule, state, kIn)};
    std::vector<int32_t> cfg(static_cast<size_t>(t.max_depth) + 1, 0);
    std::vector<uint8_t> sticky(static_cast<size_t>(t.max_depth) + 1, 0);
    cfg[0] = intern_config(start);
    auto accept = [&](uint32_t from, uint32_t to) {
        for (uint32_t k = from; k < to; ++k) {
            const auto id = static_cast<uint32_t>(t.tok[k]);
            out.accepted[id >> 5] |= 1u << (id & 31);
        }
        out.n_accepted += to - from;
    };
    auto uncertain = [&](uint32_t from, uint32_t to) {
        out.uncertain.insert(out.uncertain.end(), t.tok.begin() + from, t.tok.begin() + to);
    };
    const auto n = static_cast<uint32_t>(t.n_nodes());
    for (uint32_t i = 1; i < n;) {
        const uint16_t d = t.depth[i];
        const int32_t parent = cfg[d - 1u];
        const size_t at = static_cast<size_t>(parent) * 256 + t.byte[i];
        const int32_t r = memo_[at] >= 0 ? memo_[at] : step_config(parent, t.byte[i]);
        const int32_t c = r >> 1;
        const uint8_t st = static_cast<uint8_t>(sticky[d - 1u] | (r & 1));
        if (c == 0 || (st && !config_inside_[static_cast<size_t>(c)])) {
            // Nothing inside survives: the whole subtree depends on the context, or is dead.
            if (st) uncertain(t.tok_begin[i], t.tok_begin[t.end[i]]);
            i = t.end[i];
            continue;
        }
        if (config_inside_[static_cast<size_t>(c)]) accept(t.tok_begin[i], t.tok_begin[i + 1]);
        else uncertain(t.tok_begin[i], t.tok_begin[i + 1]);
        cfg[d] = c;
        sticky[d] = st;
        ++i;
    }
    return out;
}

}  // namespace loom::grammar
