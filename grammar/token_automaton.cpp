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
    memo_.assign(256, 0);  // ... and it stays empty
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

bool TokenAutomaton::find_checked(const std::vector<int32_t>& frames, std::vector<int32_t>& allowed) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = checked_.find(frames);
    if (it == checked_.end()) return false;
    allowed = it->second;
    return true;
}

void TokenAutomaton::add_checked(std::vector<int32_t> frames, const std::vector<int32_t>& allowed) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (checked_.size() >= 4096) checked_.clear();
    checked_.emplace(std::move(frames), allowed);
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
    std::vector<int32_t>& out = scratch_out_;
    std::vector<int32_t>& visited = scratch_visited_;
    out.clear();
    visited.clear();
    bool left = false;
    OnSentinel on{g_, arena_, b, out, visited, left};
    for (int32_t n : configs_[static_cast<size_t>(config)]) detail::step_node(g_, arena_, n, b, out, visited, on);
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
    // Walk state per depth: config * 2 + "some stack left into unknown context on the way".
    std::vector<int32_t> at_depth(static_cast<size_t>(t.max_depth) + 1, 0);
    at_depth[0] = intern_config(start) * 2;
    // Plain pointers: the stores into `accepted` could otherwise alias the memo table.
    uint32_t* acc = out.accepted.data();
    const uint8_t* byte = t.byte.data();
    const uint16_t* depth = t.depth.data();
    const uint32_t* end = t.end.data();
    const uint32_t* tok_begin = t.tok_begin.data();
    const int32_t* tok = t.tok.data();
    int32_t* walk = at_depth.data();
    const int32_t* memo = memo_.data();
    const uint8_t* inside = config_inside_.data();
    const auto n = static_cast<uint32_t>(t.n_nodes());
    for (uint32_t i = 1; i < n;) {
        const uint32_t d = depth[i];
        const int32_t from = walk[d - 1];
        const int32_t parent = from >> 1;
        const size_t at = static_cast<size_t>(parent) * 256 + byte[i];
        int32_t r = memo[at];
        if (r < 0) {
            r = step_config(parent, byte[i]);
            memo = memo_.data();  // the tables may have grown
            inside = config_inside_.data();
        }
        const int32_t c = r >> 1;
        const int32_t st = (from | r) & 1;
        if (c == 0 || (st && !inside[c])) {
            // Nothing inside survives: the whole subtree depends on the context, or is dead.
            if (st) out.uncertain.insert(out.uncertain.end(), tok + tok_begin[i], tok + tok_begin[end[i]]);
            i = end[i];
            continue;
        }
        const uint32_t k0 = tok_begin[i], k1 = tok_begin[i + 1];
        if (k0 != k1) {
            if (inside[c]) {
                for (uint32_t k = k0; k < k1; ++k) {
                    const auto id = static_cast<uint32_t>(tok[k]);
                    acc[id >> 5] |= 1u << (id & 31);
                }
                out.n_accepted += k1 - k0;
            } else {
                out.uncertain.insert(out.uncertain.end(), tok + k0, tok + k1);
            }
        }
        walk[d] = c * 2 + st;
        ++i;
    }
    // A list of ids is smaller than the mask below one id per 16 mask bits.
    if (out.n_accepted * 16 < static_cast<size_t>(vocab_->n_vocab())) {
        for (size_t w = 0; w < out.accepted.size(); ++w)
            for (uint32_t bits = out.accepted[w]; bits; bits &= bits - 1)
                out.accepted_ids.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(bits))));
        out.accepted.clear();
        out.accepted.shrink_to_fit();
    }
    return out;
}

}  // namespace loom::grammar
