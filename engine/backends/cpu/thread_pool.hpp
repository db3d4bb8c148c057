// A fixed pool of worker threads for the data-parallel loops of the CPU backend.
//
// A forward pass issues a few parallel loops per layer (tens per token), each lasting
// from tens of microseconds to milliseconds, so the cost of starting one matters: jobs
// are handed over through an atomic generation counter that idle workers spin on
// briefly (30 microseconds) before they sleep on a condition variable; the caller
// likewise spins, then sleeps until the last worker is done; and the loop body is
// passed as a non-owning reference (no std::function allocation per loop).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace loom::cpu {

class ThreadPool {
public:
    /// Starts n_threads - 1 workers (the calling thread is the n-th); n_threads < 1
    /// counts as 1.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    /// Calls fn(begin, end) on disjoint chunks covering [0, n), one chunk per thread
    /// (static partition, so results do not depend on timing), and returns when all
    /// are done. Runs fn(0, n) inline when n < 2 * grain or the pool has one thread.
    /// fn must not throw. Not reentrant: one parallel_for at a time per pool.
    template <class Fn>
    void parallel_for(int64_t n, int64_t grain, const Fn& fn) {
        if (n <= 0) return;
        if (n_threads_ == 1 || n < 2 * (grain < 1 ? 1 : grain)) {
            fn(int64_t{0}, n);
            return;
        }
        run(
            n, [](const void* f, int64_t b, int64_t e) { (*static_cast<const Fn*>(f))(b, e); }, &fn);
    }

private:
    using Thunk = void (*)(const void*, int64_t, int64_t);
    void run(int64_t n, Thunk thunk, const void* fn);
    void worker(int index);
    void run_chunk(int index);

    int n_threads_;
    std::vector<std::thread> threads_;
    // The current job (written before generation_ is bumped, read after it is seen).
    Thunk thunk_ = nullptr;
    const void* fn_ = nullptr;
    int64_t n_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
    std::atomic<bool> caller_waiting_{false};
    std::mutex mu_;
    std::condition_variable wake_;  // workers wait here for a job
    std::condition_variable done_;  // the caller waits here for the last worker
};

}  // namespace loom::cpu
