// VocabBytes and its preorder byte trie; see vocab.hpp.
#include "grammar/vocab.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace loom::grammar {

VocabBytes::VocabBytes(std::vector<std::string> token_bytes, std::vector<int32_t> eog, int32_t n_vocab)
    : bytes_(std::move(token_bytes)), eog_(std::move(eog)) {
    n_vocab_ = n_vocab < 0 ? static_cast<int32_t>(bytes_.size()) : n_vocab;
    if (static_cast<size_t>(n_vocab_) < bytes_.size()) bytes_.resize(static_cast<size_t>(n_vocab_));
    is_eog_.assign(static_cast<size_t>(n_vocab_), 0);
    for (int32_t id : eog_) {
        if (id < 0 || id >= n_vocab_) throw std::invalid_argument("end-of-generation id outside the vocabulary");
        is_eog_[static_cast<size_t>(id)] = 1;
    }
    for (auto& b : bytes_)
        if (b.size() > 65535) b.clear();

    // Sort the ids with bytes by their bytes; equal strings keep id order.
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id)
        if (!bytes_[static_cast<size_t>(id)].empty() && !is_eog_[static_cast<size_t>(id)]) ids.push_back(id);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
        return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
    });

    TokenTrie& t = trie_;
    t.byte.push_back(0);
    t.depth.push_back(0);
    t.end.push_back(0);
    std::vector<uint32_t> count{0};  // tokens ending at each node
    std::vector<uint32_t> path{0};   // node at each depth of the current prefix
    const std::string* prev = nullptr;
    for (int32_t id : ids) {
        const std::string& s = bytes_[static_cast<size_t>(id)];
        size_t lcp = 0;
        if (prev) {
            const size_t m = std::min(prev->size(), s.size());
            while (lcp < m && (*prev)[lcp] == s[lcp]) ++lcp;
        }
        // Close the nodes deeper than the common prefix.
        while (path.size() > lcp + 1) {
            t.end[path.back()] = static_cast<uint32_t>(t.byte.size());
            path.pop_back();
        }
        for (size_t k = lcp; k < s.size(); ++k) {
            path.push_back(static_cast<uint32_t>(t.byte.size()));
            t.byte.push_back(static_cast<uint8_t>(s[k]));
            t.depth.push_back(static_cast<uint16_t>(k + 1));
            t.end.push_back(0);
            count.push_back(0);
        }
        ++count[path.back()];
        t.tok.push_back(id);
        t.max_depth = std::max(t.max_depth, static_cast<int>(s.size()));
        prev = &s;
    }
    while (!path.empty()) {
        t.end[path.back()] = static_cast<uint32_t>(t.byte.size());
        path.pop_back();
    }
    t.tok_begin.assign(t.byte.size() + 1, 0);
    for (size_t k = 0; k < count.size(); ++k) t.tok_begin[k + 1] = t.tok_begin[k] + count[k];
}

const std::string& VocabBytes::bytes(int32_t id) const {
    static const std::string kNone;
    if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return kNone;
    return bytes_[static_cast<size_t>(id)];
}

bool VocabBytes::is_eog(int32_t id) const { return id >= 0 && id < n_vocab_ && is_eog_[static_cast<size_t>(id)]; }

}  // namespace loom::grammar
