// Parse stacks of a Grammar as hash-consed frames, and the byte step over them (internal).
//
// A stack is a chain of frames (rule, state, parent); equal chains are one node id, so a
// set of stacks is a small sorted vector of ids and can key a cache. Parents below the
// bottom frame are negative sentinels: kBottom is the end of the text (the root frame);
// kIn and kCtx are used by TokenAutomaton's per-state classification (token_automaton.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.hpp"

namespace loom::grammar::detail {

inline constexpr int32_t kBottom = -1;  ///< below the root frame: the text ends there
inline constexpr int32_t kIn = -2;      ///< below the classified frame: its callers follow
inline constexpr int32_t kCtx = -3;     ///< below a caller frame: unknown context follows

struct Frame {
    int32_t rule, state, parent;
};

/// Interning table of frames. Ids are dense and stable until truncate().
class StackArena {
public:
    int32_t intern(int32_t rule, int32_t state, int32_t parent) {
        const Key k{rule, state, parent};
        auto [it, fresh] = index_.try_emplace(k, static_cast<int32_t>(frames_.size()));
        if (fresh) frames_.push_back({rule, state, parent});
        return it->second;
    }
    const Frame& operator[](int32_t id) const { return frames_[static_cast<size_t>(id)]; }
    int32_t size() const { return static_cast<int32_t>(frames_.size()); }
    /// Forgets every frame with id >= n.
    void truncate(int32_t n) {
        while (size() > n) {
            const Frame& f = frames_.back();
            index_.erase(Key{f.rule, f.state, f.parent});
            frames_.pop_back();
        }
    }
    void clear() {
        frames_.clear();
        index_.clear();
    }

private:
    struct Key {
        int32_t rule, state, parent;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        size_t operator()(const Key& k) const {
            uint64_t h = (static_cast<uint64_t>(static_cast<uint32_t>(k.rule)) << 40) ^
                         (static_cast<uint64_t>(static_cast<uint32_t>(k.state)) << 20) ^
                         static_cast<uint32_t>(k.parent);
            h *= 0x9E3779B97F4A7C15ull;
            return static_cast<size_t>(h ^ (h >> 29));
        }
    };
    std::vector<Frame> frames_;
    std::unordered_map<Key, int32_t, KeyHash> index_;
};

/// Consumes byte `b` from stack `node`: appends to `out` every stack that results. A frame
/// whose state has call edges also tries each callee; an accepting frame also returns to
/// its parent (the parent frame already holds the return state). Returning into a negative
/// sentinel calls `on_sentinel(sentinel, rule_of_returning_frame)`, which may step more
/// stacks into `out`. `visited` guards against cycles through calls of rules that match ""
/// (the Grammar rejects left recursion, so pushes are bounded).
template <class OnSentinel>
void step_node(const Grammar& g, StackArena& a, int32_t node, uint8_t b, std::vector<int32_t>& out,
               std::vector<int32_t>& visited, OnSentinel&& on_sentinel) {
    while (true) {
        if (std::find(visited.begin(), visited.end(), node) != visited.end()) return;
        visited.push_back(node);
        const Frame f = a[node];
        const RuleDfa& r = g.rule(f.rule);
        const int32_t t = r.step(f.state, b);
        if (t >= 0) out.push_back(a.intern(f.rule, t, f.parent));
        for (uint32_t k = r.call_begin[static_cast<size_t>(f.state)];
             k < r.call_begin[static_cast<size_t>(f.state) + 1]; ++k) {
            const Call c = r.calls[k];
            const int32_t ret = a.intern(f.rule, c.ret, f.parent);
            step_node(g, a, a.intern(c.rule, 0, ret), b, out, visited, on_sentinel);
        }
        if (!r.accept[static_cast<size_t>(f.state)]) return;
        if (f.parent < 0) {
            on_sentinel(f.parent, f.rule);
            return;
        }
        node = f.parent;  // return to the caller and let it consume b
    }
}

/// Steps every stack of `in` by `b` into `out` (sorted, unique). Stacks that return below
/// the root are dropped: nothing follows the end of the text.
inline void step_set(const Grammar& g, StackArena& a, const std::vector<int32_t>& in, uint8_t b,
                     std::vector<int32_t>& out, std::vector<int32_t>& visited) {
    out.clear();
    visited.clear();
    for (int32_t n : in) step_node(g, a, n, b, out, visited, [](int32_t, int32_t) {});
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
}

/// True when the text may end with stack `node`: every frame can end (sentinel kBottom).
inline bool stack_can_end(const Grammar& g, const StackArena& a, int32_t node) {
    while (node >= 0) {
        const Frame& f = a[node];
        if (!g.rule(f.rule).can_end[static_cast<size_t>(f.state)]) return false;
        node = f.parent;
    }
    return node == kBottom;
}

/// True when some byte may follow on stack `node`.
inline bool stack_can_continue(const Grammar& g, const StackArena& a, int32_t node) {
    while (node >= 0) {
        const Frame& f = a[node];
        const RuleDfa& r = g.rule(f.rule);
        if (r.has_out[static_cast<size_t>(f.state)]) return true;
        if (!r.can_end[static_cast<size_t>(f.state)]) return false;
        node = f.parent;
    }
    return false;
}

}  // namespace loom::grammar::detail
