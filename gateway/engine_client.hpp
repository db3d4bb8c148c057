// Starts and supervises one engine child process and routes its protocol lines
// (docs/protocol.md) to the requests waiting for them.
//
// All methods run on the gateway's single io_context thread. A T line of a request
// that asked for logprobs is held until its LP line arrives, so consumers never see a
// token without its logprobs. If the engine dies, every request in flight gets an
// error event and the engine is started again.
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

/// A generated token; lp is set when the request asked for logprobs.
struct TokenEvent {
    int32_t token = 0;
    std::optional<protocol::Logprobs> lp;
};
/// The client went away (raised by the HTTP side, not the engine).
struct Disconnected {};
using EngineEvent = std::variant<TokenEvent, protocol::PromptLogprobs, protocol::Done, protocol::Error, Disconnected>;

/// Events of all the engine requests behind one HTTP request, tagged with the
/// choice index they belong to, in arrival order.
class EventQueue {
public:
    explicit EventQueue(asio::any_io_executor ex) : signal_(ex) { signal_.expires_at(asio::steady_timer::time_point::max()); }
    /// Appends `e` for `choice` (-1: not a choice's, e.g. Disconnected) and wakes next().
    void push(int choice, EngineEvent e) {
        q_.emplace_back(choice, std::move(e));
        signal_.cancel();
    }
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
};

/// How to start the engine process: executable, arguments, and an optional protocol log.
struct EngineCommand {
    std::string exe;                 ///< engine executable
    std::vector<std::string> args;   ///< e.g. {"--model", path}
    std::string log_path;            ///< "": no log; else every protocol line, "> " sent, "< " received
};

/// The engine child process and its protocol (docs/protocol.md): spawns it, waits for
/// HELLO, routes T/LP/PLP/DONE/ERR lines to the request that owns their id, fails every
/// request in flight with an Error event when the engine dies, and starts it again
/// (backing off from 200 ms to 30 s while it keeps failing before HELLO).
class EngineClient {
public:
    /// `io`: the gateway's io_context (everything runs on its one thread). Throws
    /// std::runtime_error when the protocol log cannot be opened.
    EngineClient(asio::io_context& io, EngineCommand cmd);
    ~EngineClient();

    /// Spawns the engine and keeps it running. `on_ready` is called after each HELLO;
    /// `on_fatal` when the very first start fails (the message says why).
    void start(std::function<void(const protocol::Hello&)> on_ready, std::function<void(const std::string&)> on_fatal);
    /// Stops supervising and terminates the engine.
    void stop();

    /// True between the engine's HELLO and its exit: requests may be submitted.
    bool ready() const { return ready_; }
    /// The last HELLO (model facts: n_vocab, n_ctx, caps, ...).
    const protocol::Hello& hello() const { return hello_; }

    /// Sends GEN for `gen` (its id is assigned here) and routes its lines to `queue`
    /// under `choice`. Returns the request id. Requires ready().
    std::string submit(protocol::Gen gen, bool expect_lp, std::shared_ptr<EventQueue> queue, int choice);
    /// Sends CANCEL for a request still in flight (nothing for one that ended); the
    /// request stays routed until its DONE or ERR. `stop_matched`: the gateway ends it
    /// because a stop string matched (for the metrics' finished_reason "stop").
    void cancel(const std::string& id, bool stop_matched = false);
    /// Reports every request's traffic to `o` (null: none). `o` must outlive this client.
    void set_observer(EngineObserver* o) { observer_ = o; }

private:
    struct Route {
        std::shared_ptr<EventQueue> queue;
        int choice = 0;
        bool expect_lp = false;
        std::optional<int32_t> held_token;  // T waiting for its LP
    };

    asio::awaitable<void> supervise();
    asio::awaitable<bool> run_once(bool first);
    void dispatch(const std::string& line);
    void fail_all(const std::string& why);
    void write(std::string line);
    asio::awaitable<void> flush_writes();

    asio::io_context& io_;
    EngineCommand cmd_;
    std::function<void(const protocol::Hello&)> on_ready_;
    std::function<void(const std::string&)> on_fatal_;
    std::unique_ptr<bp::async_pipe> to_engine_, from_engine_;
    std::unique_ptr<bp::child> child_;
    protocol::Hello hello_;
    bool ready_ = false;
    bool stopping_ = false;
    bool writing_ = false;
    std::deque<std::string> out_;
    std::map<std::string, Route> routes_;
    uint64_t next_id_ = 1;
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_{nullptr, &std::fclose};
    EngineObserver* observer_ = nullptr;
};

}  // namespace loom::gateway
