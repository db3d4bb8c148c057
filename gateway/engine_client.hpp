// Starts and supervises one engine child process and routes its protocol lines
// (docs/protocol.md) to the requests waiting for them.
//
// All methods run on the gateway's single io_context thread. A T line of a request
// that asked for logprobs is held until its LP line arrives, so consumers never see a
// token without its logprobs. The gateway does not trust the engine: a malformed
// HELLO, a line over 1 MiB or an engine that stops answering PING is an engine failure;
// a token outside the vocabulary, more tokens than max_tokens or a T/LP out of order
// fails that request (and cancels it in the engine). If the engine dies, every request
// in flight gets an error event and the engine is started again, backing off while
// engines die young; after a limit the gateway reports itself unhealthy.
#pragma once

#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "gateway/engine_observer.hpp"
#include "gateway/net.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway {

class ChildProcess;

/// A generated token; lp is set when the request asked for logprobs.
struct TokenEvent {
    int32_t token = 0;
    std::optional<protocol::Logprobs> lp;
};
/// The client went away (raised by the HTTP side), or it reads so slowly that its
/// queue overflowed (raised by EventQueue): either way the request is to be cancelled
/// and the connection closed.
struct Disconnected {};
/// The request's --request-timeout passed (raised by the HTTP side's timer).
struct DeadlinePassed {};
using EngineEvent =
    std::variant<TokenEvent, protocol::PromptLogprobs, protocol::Done, protocol::Error, Disconnected, DeadlinePassed>;

/// Events of all the engine requests behind one HTTP request, tagged with the
/// choice index they belong to, in arrival order. Bounded: a consumer that stops
/// taking events (its client stopped reading) cannot make it grow without limit.
class EventQueue {
public:
    /// Most events a queue holds by default (about 3 MiB with 20 top logprobs each).
    static constexpr size_t kMaxEvents = 16384;

    explicit EventQueue(asio::any_io_executor ex, size_t max_events = kMaxEvents) : signal_(ex), max_(max_events) {
        signal_.expires_at(asio::steady_timer::time_point::max());
    }
    /// Appends `e` for `choice` (-1: not a choice's, e.g. Disconnected; always taken)
    /// and wakes next(). When the queue already holds its maximum, it drops its events,
    /// holds a single Disconnected instead (so the consumer cancels and closes at once)
    /// and returns false; so does every later push of a choice's event.
    bool push(int choice, EngineEvent e) {
        if (overflowed_ && choice >= 0) return false;
        if (choice >= 0 && q_.size() >= max_) {
            overflowed_ = true;
            q_.clear();
            q_.emplace_back(-1, Disconnected{});
            signal_.cancel();
            return false;
        }
        q_.emplace_back(choice, std::move(e));
        signal_.cancel();
        return true;
    }
    /// True once the queue overflowed (see push).
    bool overflowed() const { return overflowed_; }
    /// Events waiting.
    size_t size() const { return q_.size(); }
    /// Waits for the next event and returns it with its choice index.
    asio::awaitable<std::pair<int, EngineEvent>> next() {
        while (q_.empty()) {
            boost::system::error_code ec;
            signal_.expires_at(asio::steady_timer::time_point::max());
            co_await signal_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
        auto e = std::move(q_.front());
        q_.pop_front();
        co_return e;
    }

private:
    std::deque<std::pair<int, EngineEvent>> q_;
    asio::steady_timer signal_;
    size_t max_;
    bool overflowed_ = false;
};

/// How to start the engine process: executable, arguments, and an optional protocol log.
struct EngineCommand {
    std::string exe;                ///< engine executable
    std::vector<std::string> args;  ///< e.g. {"--model", path}
    std::string log_path;           ///< "": no log; else every protocol line, "> " sent, "< " received
};

/// Restart and liveness policy (main.cpp's --engine-* options).
struct SupervisionOptions {
    std::chrono::milliseconds restart_delay{200};        ///< delay before the first restart
    std::chrono::milliseconds max_restart_delay{30000};  ///< the delay doubles up to this while engines die young
    std::chrono::milliseconds young{
        3000};              ///< an engine that dies before HELLO or sooner than this after it "died young"
    int restart_limit = 5;  ///< young deaths in a row after which /health says "unhealthy"
    std::chrono::milliseconds ping_interval{5000};  ///< 0: no liveness check
    std::chrono::milliseconds ping_timeout{10000};  ///< no PONG within this: the engine is killed and restarted
};

/// What /health reports about the engine.
struct EngineHealth {
    enum class State { Ok, Loading, Unhealthy } state = State::Loading;
    std::string reason;                    ///< Unhealthy: why, in words
    std::vector<std::string> stderr_tail;  ///< Unhealthy: the last engine's last stderr lines
};

/// The engine child process and its protocol (docs/protocol.md): spawns it, waits for
/// HELLO, routes T/LP/PLP/DONE/ERR lines to the request that owns their id, checks
/// them, fails every request in flight with an Error event when the engine dies, and
/// starts it again (SupervisionOptions). The engine's stderr is copied to the
/// gateway's, and its last lines are kept for the unhealthy report.
class EngineClient {
public:
    /// `io`: the gateway's io_context (everything runs on its one thread). Throws
    /// std::runtime_error when the protocol log cannot be opened.
    EngineClient(asio::io_context& io, EngineCommand cmd, SupervisionOptions opts = {});
    ~EngineClient();

    /// Spawns the engine and keeps it running. `on_ready` is called after each HELLO;
    /// `on_fatal` when the very first start fails (the message says why).
    void start(std::function<void(const protocol::Hello&)> on_ready, std::function<void(const std::string&)> on_fatal);
    /// Stops supervising and kills (SIGKILL) and reaps the engine at once.
    void stop();
    /// Stops supervising and lets the engine end cleanly: the lines still queued are
    /// written, its stdin is closed (it finishes what it has and exits, protocol.md),
    /// and after `grace` it is killed. Completes once it has been reaped.
    asio::awaitable<void> shutdown(std::chrono::milliseconds grace);

    /// True between the engine's HELLO and its exit: requests may be submitted.
    bool ready() const { return ready_; }
    /// Ok once ready (and, after a run of young deaths, once the engine has lived
    /// `young`); Unhealthy after `restart_limit` young deaths in a row; else Loading.
    EngineHealth health() const;
    /// The last HELLO (model facts: n_vocab, n_ctx, caps, ...).
    const protocol::Hello& hello() const { return hello_; }
    /// Engine requests submitted and not yet ended (DONE or ERR).
    size_t in_flight() const { return routes_.size(); }

    /// Sends GEN for `gen` (its id is assigned here) and routes its lines to `queue`
    /// under `choice`. Returns the request id. When the engine is not ready the
    /// request fails at once (an Error event).
    std::string submit(protocol::Gen gen, bool expect_lp, std::shared_ptr<EventQueue> queue, int choice);
    /// Sends CANCEL for a request still in flight (nothing for one that ended); the
    /// request stays routed until its DONE or ERR. `stop_matched`: the gateway ends it
    /// because a stop string matched (for the metrics' finished_reason "stop").
    void cancel(const std::string& id, bool stop_matched = false);
    /// Reports every request's traffic to `o` (null: none). `o` must outlive this client.
    void set_observer(EngineObserver* o) { observer_ = o; }
    /// Fails every request in flight with `why` (an Error event) and cancels it in
    /// the engine; their late lines are dropped.
    void fail_all(const std::string& why);

private:
    struct Route {
        std::shared_ptr<EventQueue> queue;  // null once abandoned: lines are dropped until DONE/ERR
        int choice = 0;
        bool expect_lp = false;
        std::optional<int32_t> held_token;  // T waiting for its LP
        int64_t max_tokens = 0;             // the engine must not send more T lines
        int64_t tokens = 0;
        int logprobs = 0;  // K asked for (LP pairs at most)
        int64_t prompt_len = 0;
        bool cancel_sent = false;
    };
    struct Run;
    struct RunResult {
        bool had_hello = false;
        std::chrono::steady_clock::duration uptime{};  // from HELLO to death
        std::string why;
    };

    asio::awaitable<void> supervise();
    asio::awaitable<RunResult> run_once();
    asio::awaitable<void> read_stderr(std::shared_ptr<Run> run);
    asio::awaitable<void> ping_loop(std::shared_ptr<Run> run);
    void dispatch(const std::string& line);
    void abandon(const std::string& id, Route& r, const std::string& why, bool tell_client);
    void write(std::string line);
    void start_writer();
    asio::awaitable<void> flush_writes();

    asio::io_context& io_;
    EngineCommand cmd_;
    SupervisionOptions opts_;
    std::function<void(const protocol::Hello&)> on_ready_;
    std::function<void(const std::string&)> on_fatal_;
    std::shared_ptr<Run> run_;  // the engine now running (null between runs)
    protocol::Hello hello_;
    std::chrono::steady_clock::time_point hello_at_;
    bool ready_ = false;
    bool stopping_ = false;
    bool writing_ = false;
    std::deque<std::string> out_;
    size_t out_bytes_ = 0;
    std::map<std::string, Route> routes_;
    uint64_t next_id_ = 1;
    std::string unhealthy_;  // "": healthy; else why
    std::vector<std::string> unhealthy_stderr_;
    std::deque<std::string> stderr_tail_;  // the current (or last) engine's last stderr lines
    std::unique_ptr<asio::steady_timer> restart_timer_;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{nullptr, &std::fclose};
    EngineObserver* observer_ = nullptr;
};

}  // namespace loom::gateway
