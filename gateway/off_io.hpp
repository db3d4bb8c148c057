// Request preparation off the io thread: a CPU-heavy step of a request (JSON parsing, chat
// template rendering, tokenization, grammar compilation) runs on a thread pool while the io
// thread goes on serving the other connections' streams, so that a long prompt does not stall
// them (issue 11, item 6). The calling coroutine resumes on its own executor (the io thread).
//
// Source: Boost.Asio's co_spawn with use_awaitable (an awaitable run on another executor,
// its result or exception delivered to the awaiting coroutine) and asio::thread_pool.
#pragma once

#include <type_traits>

#include "gateway/net.hpp"

namespace loom::gateway {

/// Runs f() on `pool` and hands its result to the calling coroutine, which resumes on its
/// own executor; an exception f throws is rethrown there. With pool == nullptr f() runs
/// inline, on the calling thread (--prep-threads 0). f runs while the caller is suspended,
/// so it may refer to the caller's locals; it must touch only state that no other thread
/// changes meanwhile (the tokenizer and chat renderer, which are immutable once loaded, and
/// copies made on the io thread), never the EngineClient or the connections. R (f's result)
/// must be default-constructible and movable: asio passes a default R with an exception.
template <class F>
asio::awaitable<std::invoke_result_t<F&>> run_off_io(asio::thread_pool* pool, F f) {
    using R = std::invoke_result_t<F&>;
    if (!pool) co_return f();
    co_return co_await asio::co_spawn(
        pool->get_executor(), [&f]() -> asio::awaitable<R> { co_return f(); }, asio::use_awaitable);
}

}  // namespace loom::gateway
