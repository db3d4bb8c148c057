// mallopt at startup and malloc_trim after requests; see memory_trim.hpp.
#include "gateway/memory_trim.hpp"

#include <malloc.h>

namespace loom::gateway {

void tune_malloc() {
    mallopt(M_ARENA_MAX, 2);
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

MemoryTrimmer::MemoryTrimmer(asio::any_io_executor ex, std::chrono::milliseconds delay)
    : timer_(std::move(ex)), delay_(delay) {}

void MemoryTrimmer::request_ended() {
    if (due_) return;
    due_ = true;
    timer_.expires_after(delay_);
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec) return;  // cancelled: the trimmer is being destroyed
        due_ = false;
        malloc_trim(0);
    });
}

}  // namespace loom::gateway
