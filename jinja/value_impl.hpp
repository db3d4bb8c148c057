// Internal state behind some Value kinds: Undefined details, iterators, loop contexts.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja.hpp"

namespace loom::jinja {

/// The size above which str()/repr() of a value throw TemplateError on this thread
/// (SIZE_MAX unless a render set it).
size_t print_limit();

/// Sets print_limit() for the current scope (a render sets it to its output limit).
class PrintLimit {
public:
    explicit PrintLimit(size_t max_bytes);
    ~PrintLimit();
    PrintLimit(const PrintLimit&) = delete;
    PrintLimit& operator=(const PrintLimit&) = delete;

private:
    size_t saved_;
};

/// Runs `fn(p)`. Deletions that `fn` triggers (nested containers) are queued and run in a
/// loop instead of recursing, so destroying a value nested a million levels deep (which a
/// template can build with a namespace in a loop) cannot overflow the stack.
void deferred_delete(void* p, void (*fn)(void*)) noexcept;

/// std::make_shared for the objects values hold, with deferred_delete as the deleter.
template <class T, class... A>
std::shared_ptr<T> make_deferred(A&&... args) {
    return std::shared_ptr<T>(new T(std::forward<A>(args)...),
                              [](T* p) { deferred_delete(p, [](void* q) { delete static_cast<T*>(q); }); });
}

/// How an Undefined came to be, for Jinja2's error message when it is used.
struct UndefinedInfo {
    std::string hint;       ///< explicit message; wins when non-empty
    bool has_obj = false;   ///< the undefined is a missing member of an object
    std::string obj_type;   ///< Jinja2's object_type_repr of that object ("dict object")
    Value name;             ///< the variable / attribute / item that was missing
    bool security = false;  ///< produced by the sandbox (unsafe attribute)
};

/// A one-shot iterator: the items are computed eagerly, consumed from `pos`.
struct IterState {
    std::vector<Value> items;
    size_t pos = 0;
    std::string type_name = "generator";
};

/// The `loop` variable of one for loop (Jinja2's LoopContext).
struct LoopState {
    std::vector<Value> items;  ///< the (filtered) items iterated
    int64_t index0 = 0;        ///< current position
    int64_t depth0 = 0;        ///< recursion depth of a `recursive` loop
    bool has_changed_value = false;
    Value changed_value;  ///< last argument of loop.changed()
    /// Renders the loop body for a nested iterable (recursive loops), else empty.
    std::function<Value(Interp&, CallArgs&)> recurse;
};

}  // namespace loom::jinja
