// GEN grammar= -> TokenAutomaton over the engine's vocabulary, cached; see constraint.hpp.
#include "engine/constraint.hpp"

#include <stdexcept>

#include "grammar/compile.hpp"

namespace loom::engine {

std::shared_ptr<const grammar::TokenAutomaton> ConstraintCompiler::compile(const protocol::GrammarSpec& spec) {
    if (!vocab_) throw std::invalid_argument("this engine does not support grammars");
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if (it->first == spec) {
            cache_.splice(cache_.begin(), cache_, it);
            return cache_.front().second;
        }
    grammar::Constraint c = grammar::Constraint::from_source(spec.kind, spec.source);
    c.reasoning = {spec.reasoning_open, spec.reasoning_close};
    auto automaton = std::make_shared<const grammar::TokenAutomaton>(grammar::compile(c), vocab_);
    cache_.emplace_front(spec, automaton);
    if (cache_.size() > kCacheEntries) cache_.pop_back();
    return automaton;
}

}  // namespace loom::engine
