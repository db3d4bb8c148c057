// Matcher: masks from cached classifications plus exact checks of uncertain tokens; see matcher.hpp.
#include "grammar/matcher.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace loom::grammar {

Matcher::Matcher(std::shared_ptr<const TokenAutomaton> automaton) : a_(std::move(automaton)) {
    Entry start;
    start.stacks.push_back(arena_.intern(0, 0, detail::kBottom));
    start.arena_size = arena_.size();
    history_.push_back(std::move(start));
    levels_.resize(static_cast<size_t>(a_->vocab().trie().max_depth) + 1);
}

bool Matcher::step(std::string_view bytes, std::vector<int32_t>& out) {
    const Grammar& g = a_->grammar();
    out = history_.back().stacks;
    for (char c : bytes) {
        detail::step_set(g, arena_, out, static_cast<uint8_t>(c), tmp_, visited_);
        out.swap(tmp_);
        if (out.empty()) return false;
        if (out.size() > kMaxStacks)
            throw GrammarError("the grammar is too ambiguous: more than " + std::to_string(kMaxStacks) +
                               " parses at once");
    }
    return true;
}

bool Matcher::advance(int32_t token) {
    if (ended()) return false;
    const VocabBytes& v = a_->vocab();
    if (v.is_eog(token)) {
        if (!can_end()) return false;
        Entry e = history_.back();
        e.ended = true;
        history_.push_back(std::move(e));
        return true;
    }
    const std::string& b = v.bytes(token);
    if (b.empty()) return false;
    return advance_bytes(b);
}

bool Matcher::advance_bytes(std::string_view bytes) {
    if (ended()) return false;
    const int32_t mark = arena_.size();
    std::vector<int32_t> next;
    if (!step(bytes, next)) {
        arena_.truncate(mark);
        return false;
    }
    history_.push_back({std::move(next), arena_.size(), false});
    return true;
}

bool Matcher::can_end() const {
    if (ended()) return true;
    for (int32_t s : history_.back().stacks)
        if (detail::stack_can_end(a_->grammar(), arena_, s)) return true;
    return false;
}

bool Matcher::is_done() const {
    if (ended()) return true;
    if (!can_end()) return false;
    for (int32_t s : history_.back().stacks)
        if (detail::stack_can_continue(a_->grammar(), arena_, s)) return false;
    return true;
}

std::vector<std::vector<std::pair<int32_t, int32_t>>> Matcher::stacks() const {
    std::vector<std::vector<std::pair<int32_t, int32_t>>> out;
    for (int32_t n : history_.back().stacks) {
        out.emplace_back();
        for (; n >= 0; n = arena_[n].parent) out.back().emplace_back(arena_[n].rule, arena_[n].state);
    }
    return out;
}

void Matcher::forget_after(int32_t arena_size) {
    arena_.truncate(arena_size);
    for (auto it = uncertain_ok_.begin(); it != uncertain_ok_.end();) {
        if (it->first >= arena_size) it = uncertain_ok_.erase(it);
        else ++it;
    }
}

void Matcher::reset() { rollback(n_tokens()); }

void Matcher::rollback(size_t n) {
    if (n > n_tokens()) throw std::invalid_argument("rollback past the start");
    history_.resize(history_.size() - n);
    forget_after(history_.back().arena_size);
}

bool Matcher::replay(std::span<const int32_t> tokens) {
    reset();
    for (int32_t t : tokens)
        if (!advance(t)) return false;
    return true;
}

// The uncertain tokens of `stack`'s top frame that the whole stack accepts (cached here by
// stack id, and in the automaton by the stack's frames for later matchers). Tokens come in
// byte order, so each check resumes from the longest prefix it shares with the last one
// checked, and a dead prefix skips every token that starts with it.
const std::vector<int32_t>& Matcher::uncertain_allowed(int32_t stack, const std::vector<int32_t>& uncertain) {
    if (auto it = uncertain_ok_.find(stack); it != uncertain_ok_.end()) return it->second;
    std::vector<int32_t> frames;
    for (int32_t n = stack; n >= 0; n = arena_[n].parent) {
        frames.push_back(arena_[n].rule);
        frames.push_back(arena_[n].state);
    }
    std::vector<int32_t> ok;
    if (a_->find_checked(frames, ok)) return uncertain_ok_.emplace(stack, std::move(ok)).first->second;
    const Grammar& g = a_->grammar();
    const VocabBytes& v = a_->vocab();
    const int32_t mark = arena_.size();
    levels_[0].assign(1, stack);
    const std::string* last = nullptr;
    size_t valid = 0;           // levels_[0..valid] hold the prefixes of *last
    size_t dead_at = SIZE_MAX;  // *last's prefix of this length has no parse
    for (int32_t id : uncertain) {
        const std::string& s = v.bytes(id);
        size_t lcp = 0;
        if (last) {
            const size_t m = std::min(last->size(), s.size());
            while (lcp < m && (*last)[lcp] == s[lcp]) ++lcp;
        }
        if (dead_at <= lcp) continue;
        size_t k = last ? std::min(lcp, valid) : 0;
        dead_at = SIZE_MAX;
        for (; k < s.size(); ++k) {
            detail::step_set(g, arena_, levels_[k], static_cast<uint8_t>(s[k]), levels_[k + 1], visited_);
            if (levels_[k + 1].empty()) {
                dead_at = k + 1;
                break;
            }
        }
        valid = k < s.size() ? k : s.size();
        if (dead_at == SIZE_MAX) ok.push_back(id);
        last = &s;
    }
    arena_.truncate(mark);
    a_->add_checked(std::move(frames), ok);
    return uncertain_ok_.emplace(stack, std::move(ok)).first->second;
}

void Matcher::fill_mask(std::span<uint32_t> mask) {
    const size_t words = mask_words();
    if (mask.size() < words) throw std::invalid_argument("token mask has fewer words than the vocabulary needs");
    std::fill(mask.begin(), mask.end(), 0u);
    const Entry& cur = history_.back();
    bool end_ok = cur.ended;
    if (!cur.ended) {
        bool first = true;
        for (int32_t s : cur.stacks) {
            const detail::Frame f = arena_[s];
            const TokenClasses& cls = a_->classes(f.rule, f.state);
            if (!cls.accepted.empty()) {
                if (first) std::memcpy(mask.data(), cls.accepted.data(), words * sizeof(uint32_t));
                else
                    for (size_t k = 0; k < words; ++k) mask[k] |= cls.accepted[k];
            }
            for (int32_t id : cls.accepted_ids) mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
            first = false;
            if (!cls.uncertain.empty())
                for (int32_t id : uncertain_allowed(s, cls.uncertain))
                    mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
            end_ok = end_ok || detail::stack_can_end(a_->grammar(), arena_, s);
        }
    }
    if (end_ok)
        for (int32_t id : a_->vocab().eog()) mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
}

}  // namespace loom::grammar
