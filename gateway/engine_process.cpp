// Fork/exec and reaping of the engine child process; see engine_process.hpp.
#include "gateway/engine_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace loom::gateway {
namespace {

// Status stored when waitpid says the child is not ours any more (ECHILD).
constexpr int kUnknownStatus = -1;

// `exe` itself when it names a path; else the first executable file of that name in
// $PATH (resolved before fork: execvp is not async-signal-safe).
std::string resolve(const std::string& exe) {
    if (exe.find('/') != std::string::npos) return exe;
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/bin:/bin";
    size_t k = 0;
    while (k <= dirs.size()) {
        size_t e = dirs.find(':', k);
        if (e == std::string::npos) e = dirs.size();
        std::string cand = (e > k ? dirs.substr(k, e - k) : std::string(".")) + "/" + exe;
        if (::access(cand.c_str(), X_OK) == 0) return cand;
        k = e + 1;
    }
    return exe;  // execv fails with ENOENT, reported to the caller
}

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

// Closes every descriptor >= 3 except `keep` (async-signal-safe: close_range, else a loop).
void close_from_3(int keep, long max_fd) {
    auto range = [&](unsigned lo, unsigned hi) {
        if (lo > hi) return;
#ifdef SYS_close_range
        if (::syscall(SYS_close_range, lo, hi, 0) == 0) return;
#endif
        const long top = hi > static_cast<unsigned>(max_fd) ? max_fd : static_cast<long>(hi);
        for (long fd = lo; fd <= top; ++fd) ::close(static_cast<int>(fd));
    };
    range(3, static_cast<unsigned>(keep) - 1);
    range(static_cast<unsigned>(keep) + 1, ~0u);
}

}  // namespace

ChildProcess::ChildProcess(asio::io_context& io, const std::string& exe, const std::vector<std::string>& args)
    : in_(io), out_(io), err_(io) {
    const std::string path = resolve(exe);
    std::vector<std::string> argv_s;
    argv_s.push_back(exe);
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    long max_fd = ::sysconf(_SC_OPEN_MAX);
    if (max_fd < 0) max_fd = 65536;

    int p_in[2] = {-1, -1}, p_out[2] = {-1, -1}, p_err[2] = {-1, -1}, p_exec[2] = {-1, -1};
    auto close_all = [&] {
        for (int* p : {p_in, p_out, p_err, p_exec}) {
            close_fd(p[0]);
            close_fd(p[1]);
        }
    };
    for (int* p : {p_in, p_out, p_err, p_exec})
        if (::pipe2(p, O_CLOEXEC) != 0) {
            const int e = errno;
            close_all();
            throw std::system_error(e, std::generic_category(), "cannot make the engine's pipes");
        }

    // No signal handler may run in the child before exec (asio's handler would write
    // into the gateway's signal pipe): block all around fork, reset them in the child.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        // The child: only async-signal-safe calls until exec.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);  // the gateway died before prctl
        if (::dup2(p_in[0], 0) < 0 || ::dup2(p_out[1], 1) < 0 || ::dup2(p_err[1], 2) < 0) ::_exit(127);
        for (int fd = 0; fd < 3; ++fd) ::fcntl(fd, F_SETFD, 0);  // dup2 onto itself keeps CLOEXEC
        close_from_3(p_exec[1], max_fd);
        struct sigaction dfl;
        std::memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);  // SIGKILL/SIGSTOP: EINVAL, harmless
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::execv(path.c_str(), argv.data());
        const int e = errno;
        [[maybe_unused]] ssize_t w = ::write(p_exec[1], &e, sizeof e);
        ::_exit(127);
    }
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    close_fd(p_in[0]);
    close_fd(p_out[1]);
    close_fd(p_err[1]);
    close_fd(p_exec[1]);
    if (pid < 0) {
        close_all();
        throw std::system_error(fork_errno, std::generic_category(), "cannot fork the engine");
    }
    int exec_errno = 0;
    ssize_t n;
    do n = ::read(p_exec[0], &exec_errno, sizeof exec_errno);
    while (n < 0 && errno == EINTR);
    close_fd(p_exec[0]);
    if (n == static_cast<ssize_t>(sizeof exec_errno)) {
        int st;
        while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        close_all();
        throw std::system_error(exec_errno, std::generic_category(), "cannot execute '" + path + "'");
    }
    pid_ = pid;
    in_.assign(p_in[1]);
    out_.assign(p_out[0]);
    err_.assign(p_err[0]);
}

ChildProcess::~ChildProcess() {
    close_pipes();
    if (pid_ > 0) kill_and_reap();
}

void ChildProcess::close_pipes() {
    boost::system::error_code ec;
    if (in_.is_open()) in_.close(ec);
    if (out_.is_open()) out_.close(ec);
    if (err_.is_open()) err_.close(ec);
}

void ChildProcess::signal(int sig) {
    if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::optional<int> ChildProcess::try_reap() {
    if (status_ || pid_ <= 0) return status_;
    int st = 0;
    pid_t r;
    do r = ::waitpid(pid_, &st, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == pid_) status_ = st;
    else if (r < 0) status_ = kUnknownStatus;
    return status_;
}

asio::awaitable<std::optional<int>> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
    auto ex = co_await asio::this_coro::executor;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    asio::steady_timer t(ex);
    while (true) {
        if (auto s = try_reap()) co_return s;
        if (std::chrono::steady_clock::now() >= deadline) co_return std::nullopt;
        t.expires_after(std::chrono::milliseconds(2));
        boost::system::error_code ec;
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
}

int ChildProcess::kill_and_reap() {
    if (auto s = try_reap()) return *s;
    ::kill(pid_, SIGKILL);
    int st = 0;
    pid_t r;
    do r = ::waitpid(pid_, &st, 0);
    while (r < 0 && errno == EINTR);
    status_ = r == pid_ ? st : kUnknownStatus;
    return *status_;
}

std::string describe_wait_status(int status) {
    if (status == kUnknownStatus) return "status unknown";
    if (WIFEXITED(status)) return "status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* abbrev = ::sigabbrev_np(sig);
        return "signal " + std::to_string(sig) + (abbrev ? std::string(", SIG") + abbrev : "");
    }
    return "wait status " + std::to_string(status);
}

}  // namespace loom::gateway
