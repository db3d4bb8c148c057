// One engine child process: fork and exec with its stdin, stdout and stderr on pipes and
// nothing else inherited, and reaping with the real exit status.
//
// Source: POSIX fork/execv/waitpid (the wait status macros), Linux prctl(2)
// PR_SET_PDEATHSIG and close_range(2). The gateway runs this on its one io_context
// thread; the child gets exactly fds 0, 1 and 2 (no listening socket, no client
// connection), default signal dispositions (SIGPIPE too, so a write to a closed pipe
// ends it) and dies with the gateway (PR_SET_PDEATHSIG, SIGKILL).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gateway/net.hpp"

namespace loom::gateway {

/// A running child process and the gateway's ends of its three pipes. Not copyable;
/// the destructor kills (SIGKILL) and reaps a child that is still there, so no zombie
/// is ever left behind.
class ChildProcess {
public:
    /// Starts `exe` (a path; without a '/', looked up in $PATH) with `args` (argv[1..]).
    /// Throws std::system_error when the pipes cannot be made, fork fails, or exec fails
    /// in the child (the errno comes back through a close-on-exec pipe, so a missing
    /// or non-executable file is reported here, not as an exit status).
    ChildProcess(asio::io_context& io, const std::string& exe, const std::vector<std::string>& args);
    ~ChildProcess();
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    pid_t pid() const { return pid_; }
    asio::posix::stream_descriptor& stdin_pipe() { return in_; }    ///< write end of the child's stdin
    asio::posix::stream_descriptor& stdout_pipe() { return out_; }  ///< read end of its stdout
    asio::posix::stream_descriptor& stderr_pipe() { return err_; }  ///< read end of its stderr

    /// Sends `sig` unless the child was already reaped.
    void signal(int sig);
    /// Reaps the child if it has exited (waitpid WNOHANG); returns its wait status
    /// (see describe_wait_status) once reaped, std::nullopt while it still runs.
    std::optional<int> try_reap();
    /// Waits up to `timeout` for the child to exit (polling every 2 ms); returns its wait
    /// status, or std::nullopt when it still runs.
    asio::awaitable<std::optional<int>> wait_for(std::chrono::milliseconds timeout);
    /// Sends SIGKILL and waits for the child (blocking the thread; a killed process goes
    /// at once). Returns the wait status.
    int kill_and_reap();
    /// Closes the gateway's pipe ends (pending reads and writes complete with an error).
    void close_pipes();

private:
    pid_t pid_ = -1;
    std::optional<int> status_;
    asio::posix::stream_descriptor in_, out_, err_;
};

/// A wait status in words: "status 3" for an exit, "signal 9, SIGKILL" for a death by
/// signal (POSIX WIFEXITED / WIFSIGNALED).
std::string describe_wait_status(int status);

}  // namespace loom::gateway
