// Engine process supervision and line routing; see engine_client.hpp.
#include "gateway/engine_client.hpp"

#include <signal.h>

#include <iostream>

#include "gateway/engine_process.hpp"
#include "gateway/quote.hpp"

namespace loom::gateway {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxEngineLine = 1u << 20;      // a longer engine line is an engine failure
constexpr size_t kMaxPendingInput = 256u << 20;  // queued for an engine that does not read: it is stuck
constexpr size_t kStderrLines = 20;              // engine stderr lines kept for the unhealthy report
constexpr size_t kStderrLineMax = 1024;          // longer stderr lines are cut (and kept as several)
constexpr int kEarlyLinesLogged = 20;            // stray lines before HELLO that are logged

// Why a HELLO cannot be served, or "" when it can (protocol.md, "HELLO").
std::string hello_problem(const protocol::Hello& h) {
    if (h.version != protocol::kVersion)
        return "the engine speaks protocol version " + std::to_string(h.version) + ", this gateway version " +
               std::to_string(protocol::kVersion);
    if (h.n_vocab < 1 || h.n_vocab > (int64_t{1} << 31) - 1)
        return "malformed HELLO: n_vocab=" + std::to_string(h.n_vocab) + " (must be 1..2147483647)";
    if (h.n_ctx < 1) return "malformed HELLO: n_ctx=" + std::to_string(h.n_ctx) + " (must be at least 1)";
    for (auto [name, id] : {std::pair{"bos", h.bos}, std::pair{"eos", h.eos}})
        if (id < -1 || id >= h.n_vocab)
            return std::string("malformed HELLO: ") + name + "=" + std::to_string(id) +
                   " is not -1 or a token id below n_vocab=" + std::to_string(h.n_vocab);
    for (int32_t id : h.eog)
        if (id >= h.n_vocab)
            return "malformed HELLO: eog id " + std::to_string(id) +
                   " is not below n_vocab=" + std::to_string(h.n_vocab);
    if (h.max_logprobs < 0) return "malformed HELLO: max_logprobs=" + std::to_string(h.max_logprobs);
    return {};
}

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

/// One engine process and what belongs to its lifetime.
struct EngineClient::Run {
    std::unique_ptr<ChildProcess> proc;
    bool alive = true;         // until its stdout ended
    bool stderr_done = false;  // its stderr reached end of file
    std::string fail_reason;   // set when the gateway gave up on it (killed it)
    std::string ping_token;    // the PING waiting for its PONG ("" when none)
    std::unique_ptr<asio::steady_timer> pong_wait;
};

EngineClient::EngineClient(asio::io_context& io, EngineCommand cmd, SupervisionOptions opts)
    : io_(io), cmd_(std::move(cmd)), opts_(opts) {
    if (!cmd_.log_path.empty()) {
        log_.reset(std::fopen(cmd_.log_path.c_str(), "w"));
        if (!log_) throw std::runtime_error("cannot write the engine log " + cmd_.log_path);
    }
}

EngineClient::~EngineClient() { stop(); }

void EngineClient::start(std::function<void(const protocol::Hello&)> on_ready,
                         std::function<void(const std::string&)> on_fatal) {
    on_ready_ = std::move(on_ready);
    on_fatal_ = std::move(on_fatal);
    asio::co_spawn(io_, supervise(), asio::detached);
}

void EngineClient::stop() {
    stopping_ = true;
    ready_ = false;
    if (restart_timer_) restart_timer_->cancel();
    if (run_) {
        run_->alive = false;
        run_->proc->close_pipes();
        run_->proc->kill_and_reap();
        if (run_->pong_wait) run_->pong_wait->cancel();
    }
}

asio::awaitable<void> EngineClient::shutdown(std::chrono::milliseconds grace) {
    stopping_ = true;
    ready_ = false;
    if (restart_timer_) restart_timer_->cancel();
    auto run = run_;
    if (!run) co_return;
    const auto deadline = Clock::now() + grace;
    asio::steady_timer t(io_);
    while (writing_ && Clock::now() < deadline) {  // CANCEL lines still on their way
        t.expires_after(std::chrono::milliseconds(2));
        boost::system::error_code ec;
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    boost::system::error_code ec;
    run->proc->stdin_pipe().close(ec);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto status = co_await run->proc->wait_for(std::max(left, std::chrono::milliseconds(0)));
    if (!status) {
        std::cerr << "loom-gateway: the engine did not exit within " << ms(grace)
                  << " of the end of its input; killing it\n";
        status = run->proc->kill_and_reap();
    }
    std::cerr << "loom-gateway: the engine stopped (" << describe_wait_status(*status) << ")\n";
    run->proc->close_pipes();
}

EngineHealth EngineClient::health() const {
    EngineHealth h;
    const bool settled = ready_ && Clock::now() - hello_at_ >= opts_.young;
    if (!unhealthy_.empty() && !settled) {
        h.state = EngineHealth::State::Unhealthy;
        h.reason = unhealthy_;
        h.stderr_tail = unhealthy_stderr_;
    } else {
        h.state = ready_ ? EngineHealth::State::Ok : EngineHealth::State::Loading;
    }
    return h;
}

asio::awaitable<void> EngineClient::supervise() {
    bool first = true;
    int young = 0;  // young deaths in a row
    while (!stopping_) {
        const RunResult r = co_await run_once();
        if (stopping_) break;
        if (first && !r.had_hello) {
            if (on_fatal_) on_fatal_(r.why);
            co_return;
        }
        first = false;
        const bool died_young = !r.had_hello || r.uptime < opts_.young;
        young = died_young ? young + 1 : 0;
        auto delay = opts_.restart_delay;
        for (int k = 1; k < young && delay < opts_.max_restart_delay; ++k) delay *= 2;
        delay = std::min(delay, opts_.max_restart_delay);
        if (young == 0) {
            unhealthy_.clear();
        } else if (young >= opts_.restart_limit) {
            const bool first_report = unhealthy_.empty();
            unhealthy_ = "the engine died " + std::to_string(young) + " times in a row, each within " +
                         ms(opts_.young) + " of starting; last: " + r.why;
            unhealthy_stderr_.assign(stderr_tail_.begin(), stderr_tail_.end());
            if (first_report) {
                std::cerr << "loom-gateway: unhealthy: " << unhealthy_ << "; the engine's last stderr lines:\n";
                for (const auto& l : unhealthy_stderr_) std::cerr << "loom-gateway:   | " << l << "\n";
            }
        }
        std::cerr << "loom-gateway: restarting the engine in " << delay.count() << " ms\n";
        restart_timer_ = std::make_unique<asio::steady_timer>(io_, delay);
        boost::system::error_code ec;
        co_await restart_timer_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
}

asio::awaitable<EngineClient::RunResult> EngineClient::run_once() {
    RunResult res;
    auto run = std::make_shared<Run>();
    try {
        run->proc = std::make_unique<ChildProcess>(io_, cmd_.exe, cmd_.args);
    } catch (const std::exception& e) {
        res.why = "cannot start the engine '" + cmd_.exe + "': " + e.what();
        std::cerr << "loom-gateway: " << res.why << "\n";
        co_return res;
    }
    run_ = run;
    stderr_tail_.clear();
    asio::co_spawn(io_, read_stderr(run), asio::detached);

    std::string early_error;
    int early_lines = 0;
    std::string buf;
    while (true) {
        boost::system::error_code ec;
        const size_t n =
            co_await asio::async_read_until(run->proc->stdout_pipe(), asio::dynamic_buffer(buf, kMaxEngineLine), '\n',
                                            asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            if (ec == asio::error::not_found && run->fail_reason.empty())
                run->fail_reason = "the engine wrote a line longer than " + std::to_string(kMaxEngineLine) + " bytes";
            break;
        }
        if (!run->alive) break;  // stop() or a kill while this line was read
        std::string line = buf.substr(0, n);
        buf.erase(0, n);
        if (log_) {
            std::fprintf(log_.get(), "< %s", line.c_str());
            std::fflush(log_.get());
        }
        if (!res.had_hello) {
            auto parsed = protocol::parse_engine_line(line);
            const auto* el = std::get_if<protocol::EngineLine>(&parsed);
            if (el && std::holds_alternative<protocol::Hello>(*el)) {
                const auto& h = std::get<protocol::Hello>(*el);
                if (auto problem = hello_problem(h); !problem.empty()) {
                    run->fail_reason = problem;
                    break;
                }
                hello_ = h;
                hello_at_ = Clock::now();
                res.had_hello = true;
                ready_ = true;
                if (observer_) observer_->on_hello(hello_);
                if (on_ready_) on_ready_(hello_);
                if (hello_.has_cap(protocol::cap::kPing) && opts_.ping_interval.count() > 0)
                    asio::co_spawn(io_, ping_loop(run), asio::detached);
            } else if (el && std::holds_alternative<protocol::Error>(*el)) {
                early_error = cut(std::get<protocol::Error>(*el).message);
            } else if (auto* pe = std::get_if<protocol::ParseError>(&parsed); pe && line.starts_with("HELLO")) {
                run->fail_reason = "malformed HELLO: " + cut(pe->message);
                break;
            } else if (early_lines++ < kEarlyLinesLogged) {
                std::cerr << "loom-gateway: engine line before HELLO ignored: " << cut(line);
                if (line.empty() || line.back() != '\n') std::cerr << "\n";
            }
            continue;
        }
        try {
            dispatch(line);
        } catch (const std::exception& e) {  // a bug of ours: restart the engine rather than stop reading it
            run->fail_reason = "internal error on an engine line: " + cut(e.what());
            break;
        }
        if (out_bytes_ > kMaxPendingInput && run->fail_reason.empty()) {
            run->fail_reason =
                "the engine does not read its input (" + std::to_string(out_bytes_ >> 20) + " MiB waiting)";
            break;
        }
    }
    const bool was_alive = run->alive;
    run->alive = false;
    ready_ = false;
    if (run->pong_wait) run->pong_wait->cancel();
    if (stopping_ || !was_alive) {  // stop() or shutdown() reaps it
        fail_all("the gateway is shutting down");
        if (run_ == run) run_.reset();
        co_return res;
    }

    // The engine's stdout ended or the gateway gave up on it: make sure it is gone.
    std::optional<int> status;
    bool closed_output = false;
    if (!run->fail_reason.empty()) {
        run->proc->signal(SIGKILL);
        status = co_await run->proc->wait_for(std::chrono::milliseconds(5000));
    } else {
        status = co_await run->proc->wait_for(std::chrono::milliseconds(200));
        if (!status) {  // alive without its output: stop it
            closed_output = true;
            run->proc->signal(SIGTERM);
            status = co_await run->proc->wait_for(std::chrono::milliseconds(2000));
        }
    }
    if (!status) status = run->proc->kill_and_reap();
    // Its last stderr lines (they may still be in the pipe), briefly.
    asio::steady_timer t(io_);
    for (int k = 0; k < 100 && !run->stderr_done; ++k) {
        t.expires_after(std::chrono::milliseconds(2));
        boost::system::error_code ec;
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    run->proc->close_pipes();
    if (run_ == run) run_.reset();
    out_.clear();
    out_bytes_ = 0;

    const std::string st = describe_wait_status(*status);
    if (!run->fail_reason.empty()) res.why = run->fail_reason + "; the engine was stopped (" + st + ")";
    else if (!early_error.empty()) res.why = early_error + " (the engine exited, " + st + ")";
    else if (closed_output) res.why = "the engine closed its output; it was stopped (" + st + ")";
    else res.why = "the engine exited (" + st + ")";
    if (res.had_hello) res.uptime = Clock::now() - hello_at_;
    std::cerr << "loom-gateway: " << res.why << "\n";
    fail_all(res.why);
    co_return res;
}

asio::awaitable<void> EngineClient::read_stderr(std::shared_ptr<Run> run) {
    std::string buf;
    char chunk[4096];
    auto keep = [&](std::string line) {  // copied to the gateway's stderr; the tail is the current engine's
        std::cerr << line << "\n";
        if (run_ != run && run_) return;
        stderr_tail_.push_back(std::move(line));
        while (stderr_tail_.size() > kStderrLines) stderr_tail_.pop_front();
    };
    while (true) {
        boost::system::error_code ec;
        const size_t n = co_await run->proc->stderr_pipe().async_read_some(
            asio::buffer(chunk), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
        buf.append(chunk, n);
        size_t nl;
        while ((nl = buf.find('\n')) != std::string::npos || buf.size() >= kStderrLineMax) {
            const size_t len = nl == std::string::npos ? kStderrLineMax : nl;
            keep(buf.substr(0, len));
            buf.erase(0, nl == std::string::npos ? len : len + 1);
        }
    }
    if (!buf.empty()) keep(std::move(buf));
    run->stderr_done = true;
}

asio::awaitable<void> EngineClient::ping_loop(std::shared_ptr<Run> run) {
    asio::steady_timer t(io_);
    run->pong_wait = std::make_unique<asio::steady_timer>(io_);
    uint64_t k = 0;
    while (run->alive && !stopping_) {
        t.expires_after(opts_.ping_interval);
        boost::system::error_code ec;
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (!run->alive || stopping_ || run_ != run) co_return;
        run->ping_token = "p" + std::to_string(++k);
        write(protocol::format(protocol::GatewayLine{protocol::Ping{run->ping_token}}));
        run->pong_wait->expires_after(opts_.ping_timeout);
        co_await run->pong_wait->async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (!run->alive || stopping_) co_return;
        if (!run->ping_token.empty()) {  // no PONG: the engine is stuck
            run->fail_reason = "the engine did not answer PING within " + ms(opts_.ping_timeout);
            std::cerr << "loom-gateway: " << run->fail_reason << "; killing it\n";
            run->proc->signal(SIGKILL);
            co_return;
        }
    }
}

void EngineClient::fail_all(const std::string& why) {
    for (auto& [id, r] : routes_) {
        if (r.queue && observer_) observer_->on_error(id);
        if (r.queue) r.queue->push(r.choice, protocol::Error{id, why});
        r.queue.reset();
        if (ready_ && !r.cancel_sent && hello_.has_cap(protocol::cap::kCancel)) {
            r.cancel_sent = true;
            write(protocol::format(protocol::GatewayLine{protocol::Cancel{id}}));
        }
    }
    if (!ready_) routes_.clear();  // the engine is gone: nothing more will come
}

void EngineClient::abandon(const std::string& id, Route& r, const std::string& why, bool tell_client) {
    std::cerr << "loom-gateway: request " << id << ": " << why << "\n";
    // A protocol error ends the request for the metrics now; a client that stopped
    // reading is counted by the DONE its cancel brings (dispatch, abandoned routes).
    if (r.queue && tell_client && observer_) observer_->on_error(id);
    if (r.queue && tell_client) r.queue->push(r.choice, protocol::Error{id, why});
    r.queue.reset();
    r.held_token.reset();
    if (!r.cancel_sent && ready_ && hello_.has_cap(protocol::cap::kCancel)) {
        r.cancel_sent = true;
        write(protocol::format(protocol::GatewayLine{protocol::Cancel{id}}));
    }
}

void EngineClient::dispatch(const std::string& line) {
    auto parsed = protocol::parse_engine_line(line);
    if (auto* err = std::get_if<protocol::ParseError>(&parsed)) {
        std::cerr << "loom-gateway: unreadable engine line (" << err->message << "): " << cut(line);
        if (line.empty() || line.back() != '\n') std::cerr << "\n";
        auto it = routes_.find(err->id);
        if (it != routes_.end() && it->second.queue)
            abandon(err->id, it->second, "engine protocol error: " + err->message, true);
        return;
    }
    auto& el = std::get<protocol::EngineLine>(parsed);
    if (auto* pong = std::get_if<protocol::Pong>(&el)) {
        if (run_ && !run_->ping_token.empty() && pong->token == run_->ping_token) {
            run_->ping_token.clear();
            if (run_->pong_wait) run_->pong_wait->cancel();
        }
        return;
    }
    if (std::holds_alternative<protocol::Hello>(el)) {
        std::cerr << "loom-gateway: unexpected second HELLO ignored\n";
        return;
    }
    if (auto* e = std::get_if<protocol::Error>(&el); e && e->id == "-") {
        std::cerr << "loom-gateway: engine error: " << cut(e->message) << "\n";
        return;
    }
    std::visit(
        [&](auto& l) {
            using L = std::decay_t<decltype(l)>;
            if constexpr (std::is_same_v<L, protocol::Hello> || std::is_same_v<L, protocol::Pong>) {
                return;
            } else {
                auto it = routes_.find(l.id);
                if (it == routes_.end()) return;  // e.g. a line after we gave up on the request
                Route& r = it->second;
                constexpr bool terminal = std::is_same_v<L, protocol::Done> || std::is_same_v<L, protocol::Error>;
                if (!r.queue) {  // abandoned: wait for its end quietly
                    if constexpr (terminal) {
                        if (observer_) {
                            if constexpr (std::is_same_v<L, protocol::Done>) observer_->on_done(l.id, l, line);
                            else observer_->on_error(l.id);
                        }
                        routes_.erase(it);
                    }
                    return;
                }
                // The route's key, not l.id: l may be moved into the queue before an abandon below.
                const std::string& rid = it->first;
                auto bad = [&](const std::string& msg) { abandon(rid, r, "engine protocol error: " + msg, true); };
                auto in_vocab = [&](int32_t id) { return id >= 0 && id < hello_.n_vocab; };
                auto bad_pairs = [&](const std::vector<protocol::TokenLogprob>& top) {
                    for (const auto& [id, lp] : top)
                        if (!in_vocab(id)) return true;
                    return false;
                };
                bool delivered = true;
                if constexpr (std::is_same_v<L, protocol::Token>) {
                    if (!in_vocab(l.token))
                        return bad("token id " + std::to_string(l.token) + " is outside the vocabulary (n_vocab " +
                                   std::to_string(hello_.n_vocab) + ")");
                    if (r.held_token) return bad("T without its LP line");
                    if (++r.tokens > r.max_tokens)
                        return bad("more tokens than max_tokens=" + std::to_string(r.max_tokens));
                    if (r.expect_lp) {
                        r.held_token = l.token;
                    } else {
                        if (observer_) observer_->on_token(rid);
                        delivered = r.queue->push(r.choice, TokenEvent{l.token, std::nullopt});
                    }
                } else if constexpr (std::is_same_v<L, protocol::Logprobs>) {
                    if (!r.held_token) return bad("LP without a T line");
                    if (static_cast<int64_t>(l.top.size()) > r.logprobs || bad_pairs(l.top))
                        return bad("LP line with " + std::to_string(l.top.size()) +
                                   " pairs or ids outside the vocabulary (asked for " + std::to_string(r.logprobs) +
                                   ")");
                    if (observer_) observer_->on_token(rid);
                    delivered = r.queue->push(r.choice, TokenEvent{*r.held_token, std::move(l)});
                    r.held_token.reset();
                } else if constexpr (std::is_same_v<L, protocol::PromptLogprobs>) {
                    if (l.index < 0 || l.index >= r.prompt_len || bad_pairs(l.top))
                        return bad("PLP line with index " + std::to_string(l.index) + " for a prompt of " +
                                   std::to_string(r.prompt_len) + " tokens, or ids outside the vocabulary");
                    if (observer_) observer_->on_prompt_logprobs(rid);
                    delivered = r.queue->push(r.choice, std::move(l));
                } else {  // Done or Error: the one terminal line
                    if (r.held_token) return bad("T without its LP line");
                    if constexpr (std::is_same_v<L, protocol::Error>) l.message = cut(l.message);
                    if (observer_) {
                        if constexpr (std::is_same_v<L, protocol::Done>) observer_->on_done(rid, l, line);
                        else observer_->on_error(rid);
                    }
                    r.queue->push(r.choice, std::move(l));
                    routes_.erase(it);
                    return;
                }
                if (!delivered)
                    abandon(rid, r,
                            "the client does not read its response (" + std::to_string(EventQueue::kMaxEvents) +
                                " events waiting); cancelled",
                            false);
            }
        },
        el);
}

std::string EngineClient::submit(protocol::Gen gen, bool expect_lp, std::shared_ptr<EventQueue> queue, int choice) {
    gen.id = "r" + std::to_string(next_id_++);
    if (!ready_) {
        queue->push(choice, protocol::Error{gen.id, "the engine is not running"});
        return gen.id;
    }
    Route r;
    r.queue = std::move(queue);
    r.choice = choice;
    r.expect_lp = expect_lp;
    r.prompt_len = static_cast<int64_t>(gen.prompt.size());
    r.max_tokens = gen.max_tokens.value_or(hello_.n_ctx - r.prompt_len);
    r.logprobs = gen.logprobs.value_or(0);
    routes_[gen.id] = std::move(r);
    if (observer_) observer_->on_submit(gen.id, static_cast<int64_t>(gen.prompt.size()));
    write(protocol::format(protocol::GatewayLine{gen}));
    return gen.id;
}

void EngineClient::cancel(const std::string& id, bool stop_matched) {
    auto it = routes_.find(id);
    if (it != routes_.end() && it->second.queue && observer_) observer_->on_cancel(id, stop_matched);
    if (it == routes_.end() || !ready_ || it->second.cancel_sent) return;
    it->second.cancel_sent = true;
    write(protocol::format(protocol::GatewayLine{protocol::Cancel{id}}));
}

void EngineClient::write(std::string line) {
    if (!run_) return;
    line += '\n';
    if (log_) {
        std::fprintf(log_.get(), "> %s", line.c_str());
        std::fflush(log_.get());
    }
    out_bytes_ += line.size();
    out_.push_back(std::move(line));
    if (!writing_) start_writer();
}

void EngineClient::start_writer() {
    writing_ = true;
    asio::co_spawn(io_, flush_writes(), asio::detached);
}

asio::awaitable<void> EngineClient::flush_writes() {
    auto run = run_;
    while (!out_.empty() && run && run == run_ && run->proc->stdin_pipe().is_open()) {
        std::string line = std::move(out_.front());
        out_.pop_front();
        out_bytes_ -= line.size();
        boost::system::error_code ec;
        co_await asio::async_write(run->proc->stdin_pipe(), asio::buffer(line),
                                   asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;  // the reader sees the engine's death and fails the requests
    }
    writing_ = false;
    if (!out_.empty() && run_ && run_ != run) start_writer();  // lines for the engine started since
}

}  // namespace loom::gateway
