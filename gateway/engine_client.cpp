// Engine process supervision and line routing; see engine_client.hpp.
#include "gateway/engine_client.hpp"

#include <iostream>

namespace loom::gateway {
namespace {

constexpr size_t kMaxEngineLine = 64u << 20;

}  // namespace

EngineClient::EngineClient(asio::io_context& io, EngineCommand cmd) : io_(io), cmd_(std::move(cmd)) {
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
    std::error_code ec;
    if (child_ && child_->running(ec)) child_->terminate(ec);
    if (from_engine_) from_engine_->close();
    if (to_engine_) to_engine_->close();
}

asio::awaitable<void> EngineClient::supervise() {
    auto backoff = std::chrono::milliseconds(200);
    bool first = true;
    while (!stopping_) {
        const bool had_hello = co_await run_once(first);
        if (stopping_) break;
        if (first && !had_hello) co_return;  // on_fatal was called
        first = false;
        if (had_hello) backoff = std::chrono::milliseconds(200);
        else backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
        std::cerr << "loom-gateway: restarting the engine in " << backoff.count() << " ms\n";
        asio::steady_timer t(io_, backoff);
        co_await t.async_wait(asio::use_awaitable);
    }
}

asio::awaitable<bool> EngineClient::run_once(bool first) {
    to_engine_ = std::make_unique<bp::async_pipe>(io_);
    from_engine_ = std::make_unique<bp::async_pipe>(io_);
    std::error_code spawn_ec;
    try {
        child_ = std::make_unique<bp::child>(bp::exe = cmd_.exe, bp::args = cmd_.args, bp::std_in < *to_engine_,
                                             bp::std_out > *from_engine_, spawn_ec);
    } catch (const std::exception& e) {
        spawn_ec = std::make_error_code(std::errc::no_such_file_or_directory);
    }
    if (spawn_ec) {
        const std::string msg = "cannot start the engine '" + cmd_.exe + "': " + spawn_ec.message();
        std::cerr << "loom-gateway: " << msg << "\n";
        if (first && on_fatal_) on_fatal_(msg);
        co_return false;
    }
    bool had_hello = false;
    std::string early_error;
    std::string buf;
    while (true) {
        boost::system::error_code ec;
        const size_t n = co_await asio::async_read_until(*from_engine_, asio::dynamic_buffer(buf, kMaxEngineLine), '\n',
                                                          asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
        std::string line = buf.substr(0, n);
        buf.erase(0, n);
        if (log_) {
            std::fprintf(log_.get(), "< %s", line.c_str());
            std::fflush(log_.get());
        }
        if (!had_hello) {
            auto parsed = protocol::parse_engine_line(line);
            const auto* el = std::get_if<protocol::EngineLine>(&parsed);
            if (el && std::holds_alternative<protocol::Hello>(*el)) {
                hello_ = std::get<protocol::Hello>(*el);
                if (hello_.version != protocol::kVersion) {
                    early_error = "the engine speaks protocol version " + std::to_string(hello_.version) +
                                  ", this gateway version " + std::to_string(protocol::kVersion);
                    break;
                }
                had_hello = true;
                ready_ = true;
                if (observer_) observer_->on_hello(hello_);
                if (on_ready_) on_ready_(hello_);
            } else if (el && std::holds_alternative<protocol::Error>(*el)) {
                early_error = std::get<protocol::Error>(*el).message;
            } else {
                std::cerr << "loom-gateway: engine line before HELLO ignored: " << line;
            }
            continue;
        }
        dispatch(line);
    }
    ready_ = false;
    std::error_code ignore;
    if (child_->running(ignore)) child_->terminate(ignore);
    child_->wait(ignore);
    const int status = child_->exit_code();
    boost::system::error_code close_ec;
    to_engine_->close(close_ec);
    from_engine_->close(close_ec);
    out_.clear();
    const std::string why = !early_error.empty() ? early_error
                                                 : "the engine exited (status " + std::to_string(status) + ")";
    if (!stopping_) std::cerr << "loom-gateway: " << why << "\n";
    fail_all(why);
    if (first && !had_hello && on_fatal_) on_fatal_(why);
    co_return had_hello;
}

void EngineClient::fail_all(const std::string& why) {
    auto routes = std::move(routes_);
    routes_.clear();
    for (auto& [id, r] : routes) {
        if (observer_) observer_->on_error(id);
        r.queue->push(r.choice, protocol::Error{id, why});
    }
}

void EngineClient::dispatch(const std::string& line) {
    auto parsed = protocol::parse_engine_line(line);
    if (auto* err = std::get_if<protocol::ParseError>(&parsed)) {
        std::cerr << "loom-gateway: unreadable engine line (" << err->message << "): " << line;
        auto it = routes_.find(err->id);
        if (it != routes_.end()) {
            if (observer_) observer_->on_error(err->id);
            it->second.queue->push(it->second.choice, protocol::Error{err->id, "engine protocol error: " + err->message});
            routes_.erase(it);
        }
        return;
    }
    auto& el = std::get<protocol::EngineLine>(parsed);
    std::visit(
        [&](auto& l) {
            using L = std::decay_t<decltype(l)>;
            if constexpr (std::is_same_v<L, protocol::Hello>) {
                std::cerr << "loom-gateway: unexpected second HELLO ignored\n";
            } else {
                if constexpr (std::is_same_v<L, protocol::Error>) {
                    if (l.id == "-") {
                        std::cerr << "loom-gateway: engine error: " << l.message << "\n";
                        return;
                    }
                }
                auto it = routes_.find(l.id);
                if (it == routes_.end()) return;  // e.g. a line after we gave up on the request
                Route& r = it->second;
                auto fail = [&](const std::string& msg) {
                    if (observer_) observer_->on_error(l.id);
                    r.queue->push(r.choice, protocol::Error{l.id, msg});
                    routes_.erase(it);
                };
                if constexpr (std::is_same_v<L, protocol::Token>) {
                    if (r.held_token) return fail("engine protocol error: T without its LP line");
                    if (r.expect_lp) {
                        r.held_token = l.token;
                    } else {
                        if (observer_) observer_->on_token(l.id);
                        r.queue->push(r.choice, TokenEvent{l.token, std::nullopt});
                    }
                } else if constexpr (std::is_same_v<L, protocol::Logprobs>) {
                    if (!r.held_token) return fail("engine protocol error: LP without a T line");
                    if (observer_) observer_->on_token(l.id);
                    r.queue->push(r.choice, TokenEvent{*r.held_token, std::move(l)});
                    r.held_token.reset();
                } else if constexpr (std::is_same_v<L, protocol::PromptLogprobs>) {
                    if (observer_) observer_->on_prompt_logprobs(l.id);
                    r.queue->push(r.choice, std::move(l));
                } else {  // Done or Error: the one terminal line
                    if (r.held_token) return fail("engine protocol error: T without its LP line");
                    if (observer_) {
                        if constexpr (std::is_same_v<L, protocol::Done>) observer_->on_done(l.id, l, line);
                        else observer_->on_error(l.id);
                    }
                    r.queue->push(r.choice, std::move(l));
                    routes_.erase(it);
                }
            }
        },
        el);
}

std::string EngineClient::submit(protocol::Gen gen, bool expect_lp, std::shared_ptr<EventQueue> queue, int choice) {
    gen.id = "r" + std::to_string(next_id_++);
    routes_[gen.id] = Route{std::move(queue), choice, expect_lp, std::nullopt};
    if (observer_) observer_->on_submit(gen.id, static_cast<int64_t>(gen.prompt.size()));
    write(protocol::format(protocol::GatewayLine{gen}));
    return gen.id;
}

void EngineClient::cancel(const std::string& id, bool stop_matched) {
    if (routes_.count(id) && observer_) observer_->on_cancel(id, stop_matched);
    if (routes_.count(id) && ready_) write(protocol::format(protocol::GatewayLine{protocol::Cancel{id}}));
}

void EngineClient::write(std::string line) {
    line += '\n';
    if (log_) {
        std::fprintf(log_.get(), "> %s", line.c_str());
        std::fflush(log_.get());
    }
    out_.push_back(std::move(line));
    if (!writing_) {
        writing_ = true;
        asio::co_spawn(io_, flush_writes(), asio::detached);
    }
}

asio::awaitable<void> EngineClient::flush_writes() {
    while (!out_.empty() && to_engine_ && to_engine_->is_open()) {
        std::string line = std::move(out_.front());
        out_.pop_front();
        boost::system::error_code ec;
        co_await asio::async_write(*to_engine_, asio::buffer(line), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;  // the reader sees the engine's death and fails the requests
    }
    writing_ = false;
}

}  // namespace loom::gateway
