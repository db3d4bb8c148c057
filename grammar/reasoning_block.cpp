// The reasoning block before a constraint; see reasoning_block.hpp.
#include "grammar/reasoning_block.hpp"

#include <memory>
#include <vector>

namespace loom::grammar {

ExprPtr text_through(std::string_view m) {
    if (m.empty()) throw GrammarError("reasoning block: the close marker is empty");
    const auto n = static_cast<int32_t>(m.size());
    // Knuth-Morris-Pratt: fail[k] is the length of the longest proper border of m[0..k).
    std::vector<int32_t> fail(m.size() + 1, 0);
    for (int32_t k = 2; k <= n; ++k) {
        int32_t b = fail[static_cast<size_t>(k - 1)];
        while (b > 0 && m[static_cast<size_t>(b)] != m[static_cast<size_t>(k - 1)]) b = fail[static_cast<size_t>(b)];
        fail[static_cast<size_t>(k)] = m[static_cast<size_t>(b)] == m[static_cast<size_t>(k - 1)] ? b + 1 : b;
    }
    // State k: the text so far ends with m[0..k) and holds no earlier m. State n accepts and
    // has no successor (the first occurrence ends the free text).
    auto d = std::make_shared<ByteDfa>();
    d->n_states = n + 1;
    d->next.assign(static_cast<size_t>(n + 1) * 256, -1);
    d->accept.assign(static_cast<size_t>(n + 1), 0);
    d->accept[static_cast<size_t>(n)] = 1;
    for (int32_t k = 0; k < n; ++k)
        for (int b = 0; b < 256; ++b) {
            const auto byte = static_cast<char>(b);
            int32_t s = k;
            while (s > 0 && m[static_cast<size_t>(s)] != byte) s = fail[static_cast<size_t>(s)];
            if (m[static_cast<size_t>(s)] == byte) ++s;
            d->next[static_cast<size_t>(k) * 256 + static_cast<size_t>(b)] = s;
        }
    return dfa(std::move(d));
}

Rules after_reasoning(Rules rules, const ReasoningBlock& b) {
    if (b.empty()) {
        if (!b.open.empty()) throw GrammarError("reasoning block: an open marker without a close marker");
        return rules;
    }
    const ExprPtr space = repeat(chars(CharSet({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}})), 0, kReasoningBlockSpace);
    ExprPtr block = seq({text_through(b.close), space});
    if (!b.open.empty()) block = opt(seq({space, lit(b.open), std::move(block)}));
    const int32_t inner = rules.root;
    rules.root = rules.add("after_reasoning");
    rules.define(rules.root, seq({std::move(block), ref(inner)}));
    return rules;
}

}  // namespace loom::grammar
