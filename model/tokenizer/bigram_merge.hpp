// The merge loop the SentencePiece and BPE tokenizers share: best bigram first, over a
// linked list of symbols.
#pragma once

#include <cstddef>

namespace loom::model {

/// Merges adjacent symbols best bigram first, as SentencePiece's BPE encoder and GPT-2's
/// byte-level BPE do (llama.cpp's llm_tokenizer_spm / _bpe follow the same loop). `sym`: a
/// vector of symbols with `int prev, next` (list links, -1 at the ends) and a length `n`
/// (0: merged away); `queue`: a std::priority_queue of bigrams with `int left, right`
/// (symbol indices), best on top. A popped bigram is skipped when either side is gone or
/// `stale(bigram, left symbol, right symbol)` (a side changed since it was queued); else the
/// right symbol joins the left one and `try_add(l, r)` is offered the two new neighbour
/// pairs (it may push onto `queue`). Afterwards the list from the first symbol holds the
/// merged symbols in order.
template <class Symbols, class Queue, class Stale, class TryAdd>
void merge_bigrams(Symbols& sym, Queue& queue, Stale stale, TryAdd try_add) {
    while (!queue.empty()) {
        const auto g = queue.top();
        queue.pop();
        auto& a = sym[static_cast<std::size_t>(g.left)];
        auto& b = sym[static_cast<std::size_t>(g.right)];
        if (a.n == 0 || b.n == 0 || stale(g, a, b)) continue;
        a.n += b.n;
        b.n = 0;
        a.next = b.next;
        if (b.next >= 0) sym[static_cast<std::size_t>(b.next)].prev = g.left;
        try_add(a.prev, g.left);
        try_add(g.left, a.next);
    }
}

}  // namespace loom::model
