// Reading a model file ahead of the engine, with progress; see model_preload.hpp.
#include "gateway/model_preload.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

namespace loom::gateway {
namespace {

std::string size_text(uint64_t b) {
    char buf[32];
    if (b >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(b) / 1e9);
    else std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
    return buf;
}

}  // namespace

PreloadResult preload_model(const std::string& path, std::FILE* out, bool tty, const std::atomic<bool>& cancel) {
    PreloadResult r;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string name = std::filesystem::path(path).filename().string();
    std::error_code ec;
    const uint64_t total = std::filesystem::file_size(path, ec);
    if (ec) {
        r.error = ec.message();
        return r;
    }
    const long page = ::sysconf(_SC_PAGESIZE), avail = ::sysconf(_SC_AVPHYS_PAGES);
    if (page > 0 && avail > 0 && total > static_cast<uint64_t>(page) * static_cast<uint64_t>(avail) / 2) {
        r.skipped = true;
        std::fprintf(out, "loom-gateway: %s (%s) is larger than half the free memory: not read ahead\n", name.c_str(),
                     size_text(total).c_str());
        return r;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        r.error = std::strerror(errno);
        return r;
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::vector<char> buf(16u << 20);
    int last_tenth = 0;
    auto last_draw = t0;
    while (!cancel) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            r.error = std::strerror(errno);
            break;
        }
        if (n == 0) break;
        r.bytes += static_cast<uint64_t>(n);
        const int pct = total ? static_cast<int>(100 * r.bytes / total) : 100;
        const auto now = std::chrono::steady_clock::now();
        if (tty && now - last_draw > std::chrono::milliseconds(100)) {
            std::fprintf(out, "\rloom-gateway: loading %s: %3d%% (%s of %s)", name.c_str(), pct,
                         size_text(r.bytes).c_str(), size_text(total).c_str());
            std::fflush(out);
            last_draw = now;
        } else if (!tty && total >= (256ull << 20) && pct / 10 > last_tenth) {
            last_tenth = pct / 10;
            std::fprintf(out, "loom-gateway: loading %s: %d%% (%s of %s)\n", name.c_str(), last_tenth * 10,
                         size_text(r.bytes).c_str(), size_text(total).c_str());
        }
    }
    ::close(fd);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty) std::fprintf(out, "\r\033[K");
    if (!cancel && r.error.empty())
        std::fprintf(out, "loom-gateway: loaded %s: 100%% (%s in %.2f s); starting the engine\n", name.c_str(),
                     size_text(r.bytes).c_str(), r.seconds);
    std::fflush(out);
    return r;
}

}  // namespace loom::gateway
