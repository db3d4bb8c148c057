// One request's position in a grammar: the token mask for the next step, and advancing by the
// token that was sampled.
//
// Use: fill_mask() before sampling (a bit per token id, 1 = allowed), then advance(token).
// The end-of-generation ids are allowed exactly when the text so far is complete (can_end()).
// Every accepted token is kept in a history, so rollback(n) undoes the last n tokens at once
// and replay(tokens) rebuilds the state of a preempted request from its output tokens.
// A Matcher is not thread-safe; matchers of one TokenAutomaton may run on different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/stack.hpp"
#include "grammar/token_automaton.hpp"

namespace loom::grammar {

class Matcher {
public:
    /// Most parse stacks held at once; more means a pathologically ambiguous grammar, and
    /// advance() throws GrammarError.
    static constexpr size_t kMaxStacks = 1024;

    explicit Matcher(std::shared_ptr<const TokenAutomaton> automaton);

    const TokenAutomaton& automaton() const { return *a_; }
    /// Words of the mask fill_mask() writes (VocabBytes::mask_words()).
    size_t mask_words() const { return a_->vocab().mask_words(); }

    /// Writes the allowed next tokens: bit (id % 32) of mask[id / 32]. `mask` must have at
    /// least mask_words() words (std::invalid_argument otherwise); the words past n_vocab's
    /// bits are zero. Cost: one copy of a cached mask for most states, plus exact checks of
    /// the state's few uncertain tokens the first time a stack is seen.
    void fill_mask(std::span<uint32_t> mask);

    /// Consumes `token`. Returns false, and changes nothing, when the grammar does not allow
    /// it here (or the text already ended). An end-of-generation id ends the text.
    bool advance(int32_t token);
    /// Consumes raw bytes as if a token spelled them (tests, forced text). Same contract.
    bool advance_bytes(std::string_view bytes);

    /// True when the text so far is a complete string of the grammar.
    bool can_end() const;
    /// True when an end id was accepted, or the text is complete and nothing may follow.
    bool is_done() const;
    /// True after an end-of-generation id was accepted.
    bool ended() const { return history_.back().ended; }

    /// The current parse stacks, each as (rule, state) frames from the top down
    /// (diagnostics and tests; the frames below the top hold return states).
    std::vector<std::vector<std::pair<int32_t, int32_t>>> stacks() const;

    /// Tokens accepted since the start.
    size_t n_tokens() const { return history_.size() - 1; }
    /// Back to the start of the grammar.
    void reset();
    /// Undoes the last `n` accepted tokens (at most n_tokens()).
    void rollback(size_t n);
    /// reset(), then advance() each token; false at the first one not allowed (the state is
    /// then after the tokens before it).
    bool replay(std::span<const int32_t> tokens);

private:
    struct Entry {
        std::vector<int32_t> stacks;
        int32_t arena_size = 0;
        bool ended = false;
    };
    bool step(std::string_view bytes, std::vector<int32_t>& out);
    const std::vector<int32_t>& uncertain_allowed(int32_t stack, const std::vector<int32_t>& uncertain);
    void forget_after(int32_t arena_size);

    std::shared_ptr<const TokenAutomaton> a_;
    detail::StackArena arena_;
    std::vector<Entry> history_;
    std::unordered_map<int32_t, std::vector<int32_t>> uncertain_ok_;  // by stack id
    std::vector<std::vector<int32_t>> levels_;
    std::vector<int32_t> visited_, tmp_;
};

}  // namespace loom::grammar
