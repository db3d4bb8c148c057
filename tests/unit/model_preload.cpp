// Unit tests of the gateway's read-ahead of the model file (gateway/model_preload.hpp):
// the bytes it reads, its progress lines when stderr is not a terminal, and cancellation.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "gateway/model_preload.hpp"

namespace {

// A sparse file of `bytes` bytes in the temp folder; removed by the destructor.
struct TempFile {
    std::string path;
    explicit TempFile(uint64_t bytes) {
        path = (std::filesystem::temp_directory_path() / ("loom-preload-" + std::to_string(::getpid()))).string();
        std::FILE* f = std::fopen(path.c_str(), "wb");
        REQUIRE(f);
        REQUIRE(::ftruncate(::fileno(f), static_cast<off_t>(bytes)) == 0);
        std::fclose(f);
    }
    ~TempFile() { std::filesystem::remove(path); }
};

std::string run(const std::string& path, bool cancel_first, loom::gateway::PreloadResult& r) {
    std::FILE* out = std::tmpfile();
    REQUIRE(out);
    std::atomic<bool> cancel{cancel_first};
    r = loom::gateway::preload_model(path, out, false, cancel);
    std::rewind(out);
    std::string text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
    std::fclose(out);
    return text;
}

}  // namespace

TEST_CASE("a large file is read whole, with a progress line at each tenth") {
    TempFile f(300ull << 20);
    loom::gateway::PreloadResult r;
    const std::string text = run(f.path, false, r);
    REQUIRE(r.error.empty());
    if (r.skipped) SUCCEED("this machine has less than 600 MiB free: the read-ahead is skipped, as documented");
    else {
        CHECK(r.bytes == (300ull << 20));
        const std::string name = std::filesystem::path(f.path).filename().string();
        for (int pct = 10; pct <= 100; pct += 10)
            CHECK(text.find("loom-gateway: loading " + name + ": " + std::to_string(pct) + "% (") != std::string::npos);
        CHECK(text.find("loom-gateway: loaded " + name + ": 100% (314.6 MB in ") != std::string::npos);
    }
}

TEST_CASE("a small file gets only the closing line; cancel stops at once; errors are reported") {
    TempFile f(1u << 20);
    loom::gateway::PreloadResult r;
    std::string text = run(f.path, false, r);
    CHECK(r.bytes == (1u << 20));
    CHECK(text.find("loading") == std::string::npos);
    CHECK(text.find(": 100% (1.0 MB in ") != std::string::npos);
    text = run(f.path, true, r);
    CHECK(r.bytes == 0);
    CHECK(text.empty());
    text = run(f.path + ".absent", false, r);
    CHECK(!r.error.empty());
    CHECK(text.empty());
}
