// The gateway's HTTP/1.1 server (Boost.Beast): one coroutine per connection, routing
// the OpenAI endpoints to the engine.
//
// Source: Boost.Beast's advanced server example (a session per connection, limits set
// on the parser) and the OpenAI API reference for the endpoints and their JSON.
#pragma once

#include <memory>
#include <string>

#include "gateway/chat_prompt.hpp"
#include "gateway/engine_client.hpp"
#include "gateway/net.hpp"
#include "gateway/output_options.hpp"
#include "gateway/request_parser.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// What the HTTP server is told on the command line (see main.cpp's --help).
struct ServerOptions {
    std::string host = "127.0.0.1";
    unsigned short port = 8080;           ///< 0: any free port (printed at start)
    std::string model_id;                 ///< id served on /v1/models
    std::string api_key;                  ///< "": no authentication
    size_t max_body_bytes = 8u << 20;     ///< larger bodies get 413
};

/// Everything a request handler needs, shared by all connections (one thread): the
/// options, the model's tokenizer and chat renderer, and the engine.
struct App {
    ServerOptions opts;
    std::unique_ptr<model::Tokenizer> tokenizer;
    std::unique_ptr<ChatRenderer> chat;
    ChatFormat chat_format;  ///< tool-call and reasoning syntax of the model's chat output
    std::unique_ptr<EngineClient> engine;
    int64_t created = 0;  ///< Unix time the gateway started (the model's "created")
    uint64_t next_response = 1;

    /// ModelContext for request validation (valid once the engine is ready).
    ModelContext model_context() const;
};

/// Binds the listener (throws boost::system::system_error when it cannot) and starts
/// accepting connections; returns the bound port.
unsigned short start_server(asio::io_context& io, App& app);

/// Handles POST /v1/completions and /v1/chat/completions on `stream` (gateway/generate.cpp):
/// validation errors are answered with OpenAI's error JSON (400, 404, 503); an engine
/// failure with 503, or, once a stream has begun, with an error event and `[DONE]`.
/// Sets `started` once it has begun a streamed response (an exception after that
/// cannot be answered with a status code). Returns false when the connection must
/// close (the client went away, or it asked to close).
asio::awaitable<bool> handle_generation(App& app, beast::tcp_stream& stream,
                                        const http::request<http::string_body>& req, Endpoint endpoint,
                                        bool& started);

/// Writes a complete JSON response with `status`; `allow` (when not empty) is sent as
/// the Allow header (405 answers). Write errors are ignored: the session notices them
/// on its next read.
asio::awaitable<void> write_json(beast::tcp_stream& stream, http::status status, std::string body, bool keep_alive,
                                 unsigned version, std::string_view allow = {});

}  // namespace loom::gateway
