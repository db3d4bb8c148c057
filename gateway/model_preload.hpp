// Reads a model file once, front to back, before the engine maps it, showing how much of
// it has been read: the loading progress a person sees while a large model comes off the
// disk. The engine then maps pages that are already in memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

namespace loom::gateway {

/// What preload_model() did.
struct PreloadResult {
    uint64_t bytes = 0;    ///< bytes read
    double seconds = 0;    ///< time taken
    bool skipped = false;  ///< the file is larger than half the memory available: not read
    std::string error;     ///< why reading stopped early (empty: it did not)
};

/// Reads `path` in 16 MiB pieces (posix_fadvise SEQUENTIAL), writing progress to `out`:
/// on a terminal one line rewritten with '\r' at most 10 times a second ("loading
/// <name>: 42% (1.9 of 4.6 GB)"), otherwise a line at each tenth for files of 256 MiB
/// or more; then one closing line. Stops early, without error, when `cancel` becomes
/// true. Never throws: a file that cannot be read is reported in `error` (the engine
/// then reports it properly).
PreloadResult preload_model(const std::string& path, std::FILE* out, bool tty, const std::atomic<bool>& cancel);

}  // namespace loom::gateway
