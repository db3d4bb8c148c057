// The gateway's HTTP/1.1 server (Boost.Beast): one coroutine per connection, routing
// the OpenAI endpoints to the engine.
//
// Source: Boost.Beast's advanced server example (a session per connection, limits set
// on the parser) and the OpenAI API reference for the endpoints and their JSON.
#pragma once

#include <chrono>
#include <list>
#include <memory>
#include <string>

#include "gateway/chat_prompt.hpp"
#include "gateway/engine_client.hpp"
#include "gateway/memory_trim.hpp"
#include "gateway/metrics.hpp"
#include "gateway/net.hpp"
#include "gateway/output_options.hpp"
#include "gateway/request_limits.hpp"
#include "gateway/request_parser.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// What the HTTP server is told on the command line (see main.cpp's --help).
struct ServerOptions {
    std::string host = "127.0.0.1";
    unsigned short port = 8080;                      ///< 0: any free port (printed at start)
    std::string model_id;                            ///< id served on /v1/models
    std::string api_key;                             ///< "": no authentication
    size_t max_body_bytes = 8u << 20;                ///< larger bodies get 413
    std::chrono::milliseconds write_timeout{30000};  ///< a response write that takes longer: the request is cancelled
    std::chrono::milliseconds request_timeout{0};    ///< 0: none; else a generation that takes longer gets 503
    RequestLimits limits;                            ///< --max-n, --max-request-tokens, --max-response-bytes
};

/// Threads compiling request constraints (each within grammar::GrammarLimits' time and
/// memory), and the most requests that may wait for them or be on them (more: 503 at once).
inline constexpr size_t kCompileThreads = 2;
inline constexpr size_t kMaxCompilesWaiting = 16;

/// The connections being served, so that a shutdown can close the idle ones and let
/// the busy ones finish. Shared (sessions hold it) so that a session coroutine
/// destroyed with the io_context never touches a destroyed App.
struct Connections {
    struct Entry {
        beast::tcp_stream* stream = nullptr;
        bool busy = false;  ///< between reading a request and finishing its response
    };
    std::list<Entry> list;
    bool draining = false;  ///< shutting down: no new requests, close after the current one
    /// Connections with a request in progress.
    size_t busy() const;
};

/// Everything a request handler needs, shared by all connections (one io thread): the
/// options, the model's tokenizer and chat renderer, and the engine. Only `tokenizer` and
/// `chat` (immutable once loaded) are read by the `prep` threads too.
struct App {
    ServerOptions opts;
    std::unique_ptr<model::Tokenizer> tokenizer;
    std::unique_ptr<ChatRenderer> chat;
    std::unique_ptr<Metrics> metrics;  ///< GET /metrics; declared before engine, which reports to it
    ChatFormat chat_format;            ///< tool-call and reasoning syntax of the model's chat output
    std::unique_ptr<EngineClient> engine;
    int64_t created = 0;  ///< Unix time the gateway started (the model's "created")
    uint64_t next_response = 1;
    std::shared_ptr<Connections> connections = std::make_shared<Connections>();
    std::unique_ptr<tcp::acceptor> acceptor;
    std::unique_ptr<MemoryTrimmer> trimmer;  ///< told when each request ends; null: no trimming
    size_t compiles_waiting = 0;  ///< requests whose constraint waits for or is on `compile` (io thread only)
    /// Threads that prepare requests (parse, render, tokenize) off the io thread
    /// (gateway/off_io.hpp; --prep-threads), and kCompileThreads that compile their
    /// constraints; null: on the io thread (--prep-threads 0). Declared last, so that they are
    /// joined before the members their tasks read are destroyed.
    std::unique_ptr<asio::thread_pool> prep, compile;

    /// ModelContext for request validation (valid once the engine is ready).
    ModelContext model_context() const;
};

/// Binds the listener (throws boost::system::system_error when it cannot) and starts
/// accepting connections; returns the bound port. Out of file descriptors (EMFILE,
/// ENFILE), accepting pauses with a growing delay (10 ms to 1 s), logged once per
/// episode, while open connections go on being served.
unsigned short start_server(asio::io_context& io, App& app);

/// GET /health: 200 {"status":"ok"}; 503 {"status":"loading"}, {"status":"draining"}, or
/// {"status":"unhealthy","reason":...,"engine_stderr":[...]} (EngineClient::health).
std::pair<http::status, std::string> health_body(const App& app);

/// Begins a graceful shutdown: closes the listener and the idle connections; busy
/// connections close after their current response (sent with Connection: close), and
/// /health says "draining". Returns the number of busy connections.
size_t begin_drain(App& app);

/// Handles POST /v1/completions and /v1/chat/completions on `stream` (gateway/generate.cpp):
/// validation errors are answered with OpenAI's error JSON (400, 404, 503); an engine
/// failure with 503, or, once a stream has begun, with an error event and `[DONE]`.
/// Sets `started` once it has begun a streamed response (an exception after that
/// cannot be answered with a status code). Returns false when the connection must
/// close (the client went away, or it asked to close).
asio::awaitable<bool> handle_generation(App& app, beast::tcp_stream& stream,
                                        const http::request<http::string_body>& req, Endpoint endpoint, bool& started);

/// The x-request-id of the request `stream` is answering now (set by the session for
/// each request: the client's own when it sent a usable one, else a new random id);
/// every response on the connection carries it. Empty outside a request.
std::string_view request_id(const beast::tcp_stream& stream);

/// Writes a complete response with `status` and `content_type`; `extra`: further
/// headers. Write errors are ignored: the session notices them on its next read.
asio::awaitable<void> write_body(beast::tcp_stream& stream, http::status status, std::string body,
                                 std::string_view content_type, bool keep_alive, unsigned version,
                                 std::string_view allow = {});

/// Writes a complete JSON response with `status`; `allow` (when not empty) is sent as
/// the Allow header (405 answers). The write gets the --write-timeout (after it the
/// connection is closed). Write errors are ignored: the session notices them on its
/// next read. While draining, keep_alive is turned off.
asio::awaitable<void> write_json(beast::tcp_stream& stream, http::status status, std::string body, bool keep_alive,
                                 unsigned version, std::string_view allow = {});

}  // namespace loom::gateway
