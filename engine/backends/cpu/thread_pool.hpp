// A fixed pool of worker threads for data-parallel loops in the CPU backend.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom::cpu {

class ThreadPool {
public:
    /// Starts n_threads - 1 workers (the calling thread is the n-th). n_threads >= 1.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    /// Calls fn(begin, end) on disjoint chunks covering [0, n), spread over the
    /// threads, and returns when all are done. Runs inline when n < 2 * grain or
    /// the pool has one thread. fn must not throw.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker(int index);

    int n_threads_;
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable start_cv_, done_cv_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
};

}  // namespace loom::cpu
