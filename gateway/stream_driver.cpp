// Event loop, SSE, cancellation and the disconnect watch; see stream_driver.hpp.
#include "gateway/stream_driver.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <iostream>

#include "gateway/server.hpp"

namespace loom::gateway {
namespace {

// Completes when the client closes its end (or sends more bytes, which ends the
// watch); pushes Disconnected in the first case. Cancelled with socket.cancel().
asio::awaitable<void> watch_disconnect(tcp::socket& s, std::shared_ptr<EventQueue> q, std::shared_ptr<bool> live) {
    boost::system::error_code ec;
    co_await s.async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !*live) co_return;
    char c;
    const ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) q->push(-1, Disconnected{});
}

// Pushes DeadlinePassed when `t` expires (not when it is cancelled).
asio::awaitable<void> watch_deadline(std::shared_ptr<asio::steady_timer> t, std::shared_ptr<EventQueue> q,
                                     std::shared_ptr<bool> live) {
    boost::system::error_code ec;
    co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && *live) q->push(-1, DeadlinePassed{});
}

}  // namespace

asio::awaitable<bool> SseWriter::header(unsigned version) {
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "loom");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    if (const auto id = request_id(s_); !id.empty()) res.set("x-request-id", std::string(id));
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    boost::system::error_code ec;
    s_.expires_after(timeout_);
    co_await http::async_write_header(s_, sr, asio::redirect_error(asio::use_awaitable, ec));
    co_return after_write(ec);
}

template <class Buffers>
asio::awaitable<bool> SseWriter::write(const Buffers& chunk) {
    boost::system::error_code ec;
    tcp::socket& sock = s_.socket();
    if (!sock.non_blocking()) sock.non_blocking(true, ec);  // write_some below must not block
    const size_t n = ec ? 0 : sock.write_some(chunk, ec);
    if (!ec && n == beast::buffer_bytes(chunk)) co_return true;
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) co_return false;  // the client is gone
    beast::buffers_suffix<Buffers> rest(chunk);
    rest.consume(n);
    ec = {};
    s_.expires_after(timeout_);
    co_await asio::async_write(s_, rest, asio::redirect_error(asio::use_awaitable, ec));
    co_return after_write(ec);
}

asio::awaitable<bool> SseWriter::event(const std::string& data) {
    const std::string payload = "data: " + data + "\n\n";
    co_return co_await write(http::make_chunk(asio::buffer(payload)));
}

asio::awaitable<bool> SseWriter::event(const std::string& name, const std::string& data) {
    const std::string payload = "event: " + name + "\ndata: " + data + "\n\n";
    co_return co_await write(http::make_chunk(asio::buffer(payload)));
}

asio::awaitable<bool> SseWriter::end() { co_return co_await write(http::make_chunk_last()); }

bool SseWriter::after_write(const boost::system::error_code& ec) {
    s_.expires_never();
    if (ec == beast::error::timeout)
        std::cerr << "loom-gateway: a client did not read its stream for " << timeout_.count()
                  << " ms: its request is cancelled and the connection closed\n";
    return !ec;
}

StreamDriver::StreamDriver(beast::tcp_stream& stream, EngineClient& engine, std::shared_ptr<EventQueue> queue,
                           std::vector<std::unique_ptr<Choice>>& choices, const GenerationRequest& req,
                           const ResponseMeta& meta, const model::Tokenizer& tok, StreamLimits limits)
    : stream_(stream),
      engine_(engine),
      queue_(std::move(queue)),
      choices_(choices),
      req_(req),
      meta_(meta),
      tok_(tok),
      sse_(stream, limits.write_timeout),
      limits_(limits) {
    if (req.endpoint == Endpoint::Responses) responses_ = std::make_unique<ResponsesStream>(req, meta, tok);
    asio::co_spawn(stream_.get_executor(), watch_disconnect(stream_.socket(), queue_, live_), asio::detached);
    if (limits_.request_timeout.count() > 0) {
        deadline_ = std::make_shared<asio::steady_timer>(stream_.get_executor(), limits_.request_timeout);
        asio::co_spawn(stream_.get_executor(), watch_deadline(deadline_, queue_, live_), asio::detached);
    }
}

StreamDriver::~StreamDriver() { stop_watch(); }

void StreamDriver::stop_watch() {
    if (!*live_) return;
    *live_ = false;
    boost::system::error_code ignore;
    stream_.socket().cancel(ignore);
    if (deadline_) deadline_->cancel();
}

void StreamDriver::cancel_open() {
    for (auto& c : choices_)
        if (!c->done()) engine_.cancel(c->engine_id);
}

asio::awaitable<bool> StreamDriver::begin(unsigned version) {
    bool ok = co_await sse_.header(version);
    if (ok && responses_)
        for (const auto& [name, data] : responses_->begin())
            if (!(ok = co_await sse_.event(name, data))) break;
    if (ok && req_.endpoint == Endpoint::ChatCompletions)
        for (auto& c : choices_) {
            ChoiceOut out;
            out.index = c->index();
            out.first_chunk = true;
            if (req_.continuous_usage)
                out.usage = Usage{static_cast<int64_t>(req_.prompts[c->prompt_index()].size()), 0, 0};
            if (!(ok = co_await sse_.event(stream_chunk(req_, meta_, tok_, &out, nullptr)))) break;
        }
    if (!ok) {
        cancel_open();
        stop_watch();
    }
    co_return ok;
}

asio::awaitable<void> StreamDriver::run() {
    size_t open = choices_.size();
    while (open > 0) {
        auto [ci, ev] = co_await queue_->next();
        if (std::holds_alternative<Disconnected>(ev)) {
            client_gone_ = true;
            break;
        }
        if (std::holds_alternative<DeadlinePassed>(ev)) {
            failure_ = ApiError(503,
                                "the request took longer than the server's request timeout (" +
                                    std::to_string(limits_.request_timeout.count()) + " ms); it was cancelled",
                                "", "request_timeout", "server_error");
            break;
        }
        Choice& c = *choices_[static_cast<size_t>(ci)];
        if (c.done()) continue;
        const bool ok = co_await on_event(c, ev);
        if (c.done()) --open;
        if (failure_) break;
        if (!ok) {
            client_gone_ = true;
            break;
        }
    }
    stop_watch();
    if (client_gone_ || failure_) cancel_open();
}

// Returns false when a write to the client failed.
asio::awaitable<bool> StreamDriver::on_event(Choice& c, const EngineEvent& ev) {
    if (const auto* t = std::get_if<TokenEvent>(&ev)) {
        if (c.stopped()) co_return true;  // sent before the engine saw our CANCEL
        Released rel = c.on_token(t->token, t->lp ? &*t->lp : nullptr);
        if (c.stopped()) engine_.cancel(c.engine_id, true);
        const bool ok = co_await deliver(c, std::move(rel), std::nullopt);
        if (c.take_output_end()) engine_.cancel(c.engine_id);  // parallel_tool_calls: false, first call done
        co_return ok;
    }
    if (const auto* plp = std::get_if<protocol::PromptLogprobs>(&ev))
        co_return co_await deliver(c, c.on_prompt_logprobs(*plp), std::nullopt);
    if (const auto* d = std::get_if<protocol::Done>(&ev)) {
        Released rel = c.on_done(*d);
        co_return co_await deliver(c, std::move(rel), c.finish_reason());
    }
    if (const auto* err = std::get_if<protocol::Error>(&ev)) {
        c.on_error();
        failure_ = ApiError(503, "the engine failed this request: " + err->message, "", "engine_error", "server_error");
    }
    co_return true;
}

// Sends (stream) or keeps (whole response) what a choice released.
asio::awaitable<bool> StreamDriver::deliver(Choice& c, Released rel, std::optional<std::string> finish) {
    if (responses_) {
        // The output items are built from the chunks, streamed or not, so that both agree.
        for (const ChoiceOut& out : c.chunks(std::move(rel), std::nullopt))
            for (const auto& [name, data] : responses_->add(out))
                if (req_.stream && !co_await sse_.event(name, data)) co_return false;
        co_return true;
    }
    if (!req_.stream) {
        c.keep(std::move(rel));
        co_return true;
    }
    for (const ChoiceOut& out : c.chunks(std::move(rel), std::move(finish)))
        if (!co_await sse_.event(stream_chunk(req_, meta_, tok_, &out, nullptr))) co_return false;
    co_return true;
}

std::string StreamDriver::responses_object(const Usage& usage) {
    if (!responses_) return {};
    responses_->end(choices_.at(0)->finish_reason(), usage, std::nullopt);
    return responses_->object(usage);
}

asio::awaitable<bool> StreamDriver::end(const Usage& usage) {
    if (responses_) {  // no [DONE]: response.completed (or .incomplete, .failed) ends it
        for (const auto& [name, data] : responses_->end(choices_.at(0)->finish_reason(), usage, failure_))
            if (!co_await sse_.event(name, data)) co_return false;
        co_return co_await sse_.end();
    }
    // An engine failure mid-stream: an error event (the OpenAI error object), then the
    // usual end of the stream.
    if (failure_) co_await sse_.event(error_body(*failure_));
    else if (req_.include_usage) co_await sse_.event(stream_chunk(req_, meta_, tok_, nullptr, &usage));
    co_return co_await sse_.event("[DONE]") && co_await sse_.end();
}

}  // namespace loom::gateway
