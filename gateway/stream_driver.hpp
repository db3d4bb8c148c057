// Carries the engine events of one generation request to its client: as server-sent
// events when it streams, else into its choices for one whole response. Owns the SSE
// writing, the cancellation of the engine requests and the watch for a client that
// goes away.
//
// Source: the OpenAI API reference (streamed responses: `data: <chunk>` events ending
// with `data: [DONE]`; stream_options.include_usage), the WHATWG HTML standard's
// server-sent events (text/event-stream), RFC 9112 (chunked transfer coding).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/choice.hpp"
#include "gateway/engine_client.hpp"
#include "gateway/net.hpp"
#include "gateway/response_json.hpp"
#include "gateway/responses_json.hpp"

namespace loom::gateway {

/// Server-sent events over a chunked HTTP/1.1 response. Each call returns false when
/// the write failed: the client went away, or did not take the bytes within
/// `write_timeout` (then the connection is closed and the timeout logged).
class SseWriter {
public:
    SseWriter(beast::tcp_stream& s, std::chrono::milliseconds write_timeout) : s_(s), timeout_(write_timeout) {}
    /// The 200 header: text/event-stream, no-cache, chunked.
    asio::awaitable<bool> header(unsigned version);
    /// One event, `data: <data>\n\n`, as one chunk.
    asio::awaitable<bool> event(const std::string& data);
    /// One named event, `event: <name>\ndata: <data>\n\n`, as one chunk.
    asio::awaitable<bool> event(const std::string& name, const std::string& data);
    /// The last (empty) chunk.
    asio::awaitable<bool> end();

private:
    // Writes one chunk: first a non-blocking send, which takes a whole event in one system call
    // and no timer while the socket's send buffer has room (nearly always); what it leaves (a
    // client that reads slowly) goes by async_write under the write timeout. False when it failed.
    template <class Buffers>
    asio::awaitable<bool> write(const Buffers& chunk);
    // Ends a write that ran under the timeout; returns false (logging a timeout) when it failed.
    bool after_write(const boost::system::error_code& ec);

    beast::tcp_stream& s_;
    std::chrono::milliseconds timeout_;
};

/// Time limits of one generation request (main.cpp's --write-timeout, --request-timeout).
struct StreamLimits {
    std::chrono::milliseconds write_timeout{30000};  ///< one write to the client at most
    std::chrono::milliseconds request_timeout{0};    ///< the whole generation at most; 0: no limit
};

/// Drives one generation request whose choices are all submitted to `engine` with
/// their events routed to `queue`. All on the gateway's one io_context thread.
class StreamDriver {
public:
    /// Starts watching `stream`'s socket: when the client closes its end, Disconnected
    /// is pushed to `queue`; and, with a request timeout, the clock: when it passes,
    /// DeadlinePassed is. Every argument must outlive the driver.
    StreamDriver(beast::tcp_stream& stream, EngineClient& engine, std::shared_ptr<EventQueue> queue,
                 std::vector<std::unique_ptr<Choice>>& choices, const GenerationRequest& req, const ResponseMeta& meta,
                 const model::Tokenizer& tok, StreamLimits limits = {});
    /// Stops the watch.
    ~StreamDriver();
    StreamDriver(const StreamDriver&) = delete;
    StreamDriver& operator=(const StreamDriver&) = delete;

    /// Streamed requests, before run(): writes the SSE header and, for chat, each
    /// choice's first chunk (the role). When a write fails, cancels every engine
    /// request, stops the watch and returns false.
    asio::awaitable<bool> begin(unsigned version);

    /// Handles the queue's events until every choice has ended, the engine failed one
    /// or the request timeout passed (failure() is set: the 503 to answer), or the
    /// client went away or read too slowly (client_gone()).
    /// A streamed request's releases are sent as chunks as they come; otherwise they are
    /// kept in the choices. A choice whose stop string matched is cancelled at once; on
    /// failure or disconnect, so is every choice still open. Stops the watch.
    asio::awaitable<void> run();

    /// Streamed requests, after run(): the error event (after a failure) or the usage
    /// chunk (include_usage), then `data: [DONE]` and the last chunk. Returns false when
    /// a write failed.
    asio::awaitable<bool> end(const Usage& usage);

    /// Whole (non-streamed) Responses API requests, after run() without failure: the
    /// response object, whose output items were built as a stream would have sent them.
    std::string responses_object(const Usage& usage);

    bool client_gone() const { return client_gone_; }
    const std::optional<ApiError>& failure() const { return failure_; }

private:
    asio::awaitable<bool> on_event(Choice& c, const EngineEvent& ev);
    asio::awaitable<bool> deliver(Choice& c, Released rel, std::optional<std::string> finish);
    void cancel_open();
    void stop_watch();

    beast::tcp_stream& stream_;
    EngineClient& engine_;
    std::shared_ptr<EventQueue> queue_;
    std::vector<std::unique_ptr<Choice>>& choices_;
    const GenerationRequest& req_;
    const ResponseMeta& meta_;
    const model::Tokenizer& tok_;
    SseWriter sse_;
    std::unique_ptr<ResponsesStream> responses_;  // the Responses API's events (endpoint Responses)
    StreamLimits limits_;
    std::shared_ptr<bool> live_ = std::make_shared<bool>(true);  // the watch still matters
    std::shared_ptr<asio::steady_timer> deadline_;
    std::optional<ApiError> failure_;
    bool client_gone_ = false;
};

}  // namespace loom::gateway
