// ThreadPool: static partition of [0, n) into one chunk per thread; see thread_pool.hpp.
#include "engine/backends/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() ((void)0)
#endif

namespace loom::cpu {
namespace {

// How long an idle worker spins before sleeping, and how long the caller spins while
// waiting for the workers: long enough to bridge the gap between two loops of one
// forward pass, short enough not to steal a core from other work for long.
constexpr auto kSpin = std::chrono::microseconds(30);

// A bounded spin: pause() waits a little and returns false once kSpin has passed
// (the clock is read every 64 pauses, not on every one).
class Spin {
public:
    bool pause() {
        LOOM_PAUSE();
        if ((++count_ & 63) != 0) return true;
        return std::chrono::steady_clock::now() < until_;
    }

private:
    uint32_t count_ = 0;
    std::chrono::steady_clock::time_point until_ = std::chrono::steady_clock::now() + kSpin;
};

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true, std::memory_order_release);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunk(int index) {
    const int64_t begin = n_ * index / n_threads_;
    const int64_t end = n_ * (index + 1) / n_threads_;
    if (begin < end) thunk_(fn_, begin, end);
}

void ThreadPool::run(int64_t n, Thunk thunk, const void* fn) {
    thunk_ = thunk;
    fn_ = fn;
    n_ = n;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        // Under the lock, so that a worker checking generation_ before it sleeps
        // cannot miss the notification.
        std::lock_guard<std::mutex> lock(mu_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
    run_chunk(0);
    // Spin briefly for the workers, then sleep until the last one is done (on a busy
    // machine a worker may be descheduled; spinning then would only steal its core).
    Spin spin;
    while (pending_.load(std::memory_order_acquire) != 0) {
        if (spin.pause()) continue;
        std::unique_lock<std::mutex> lock(mu_);
        caller_waiting_.store(true, std::memory_order_seq_cst);
        done_.wait(lock, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
        caller_waiting_.store(false, std::memory_order_relaxed);
        break;
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    while (true) {
        // Spin for the next job, then sleep until notified.
        Spin spin;
        uint64_t g;
        while ((g = generation_.load(std::memory_order_acquire)) == seen) {
            if (!spin.pause()) {
                std::unique_lock<std::mutex> lock(mu_);
                sleepers_.fetch_add(1, std::memory_order_acq_rel);
                wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
                sleepers_.fetch_sub(1, std::memory_order_acq_rel);
            }
        }
        seen = g;
        if (stop_.load(std::memory_order_acquire)) return;
        run_chunk(index);
        // Both this and the caller's flag use seq_cst, so either the caller sees 0 in
        // its wait predicate or this sees its flag (and notifies under the lock).
        if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_waiting_.load(std::memory_order_seq_cst)) {
            std::lock_guard<std::mutex> lock(mu_);
            done_.notify_one();
        }
    }
}

}  // namespace loom::cpu
