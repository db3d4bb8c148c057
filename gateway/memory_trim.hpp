// Giving memory back: glibc's malloc keeps what a burst of requests freed (in an arena per
// thread that ever allocated, and below the top of each heap), so a gateway that once served
// 16 hostile constraints at once stayed at 736 MB. Two measures, measured in
// docs/benchmarks.md ("Gateway memory after hostile requests"):
// - tune_malloc() at startup: at most 2 arenas (M_ARENA_MAX) for all the threads, and large
//   blocks (from 1 MiB: request bodies, responses, automaton tables) always mapped on their
//   own, so that freeing them unmaps them (M_MMAP_THRESHOLD set, which also stops glibc
//   raising the threshold to 32 MiB after the first large free);
// - MemoryTrimmer: a second after a request ends, malloc_trim(0) returns the free pages of
//   every arena to the kernel (at most once a second; it takes milliseconds).
//
// Source: glibc's manual, "Memory Allocation Tunables" and mallopt(3), malloc_trim(3).
#pragma once

#include <chrono>

#include "gateway/net.hpp"

namespace loom::gateway {

/// Sets M_ARENA_MAX (2) and M_MMAP_THRESHOLD (1 MiB) with mallopt; call before any thread
/// starts. Without effect (and harmless) under a sanitizer, whose allocator is not glibc's.
void tune_malloc();

/// Runs malloc_trim(0) on `ex` `delay` after the first request_ended() since the last trim.
/// Lives on the io thread; request_ended() must be called there.
class MemoryTrimmer {
public:
    explicit MemoryTrimmer(asio::any_io_executor ex, std::chrono::milliseconds delay = std::chrono::seconds(1));
    /// A request has ended: trim after the delay unless a trim is already due.
    void request_ended();

private:
    asio::steady_timer timer_;
    std::chrono::milliseconds delay_;
    bool due_ = false;
};

}  // namespace loom::gateway
