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
#include "gateway/request_parser.hpp"
#include "model/tokenizer.hpp"

namespace loom::gateway {

struct ServerOptions {
    std::string host = "127.0.0.1";
    unsigned short port = 8080;           ///< 0: any free port (printed at start)
    std::string model_id;                 ///< id served on /v1/models
    std::string api_key;                  ///< "": no authentication
    size_t max_body_bytes = 8u << 20;     ///< larger bodies get 413
};

/// Everything a request handler needs, shared by all connections (one thread).
struct App {
    ServerOptions opts;
    std::unique_ptr<model::Tokenizer> tokenizer;
    std::unique_ptr<ChatRenderer> chat;
    std::unique_ptr<EngineClient> engine;
    int64_t created = 0;  ///< Unix time the gateway started (the model's "created")
    uint64_t next_response = 1;

    /// ModelContext for request validation (valid once the engine is ready).
    ModelContext model_context() const;
};

/// Binds the listener (throws boost::system::system_error when it cannot) and starts
/// accepting connections; returns the bound port.
unsigned short start_server(asio::io_context& io, App& app);

/// Handles POST /v1/completions and /v1/chat/completions on `stream` (gateway/generate.cpp).
/// Returns false when the connection must close.
asio::awaitable<bool> handle_generation(App& app, beast::tcp_stream& stream,
                                        const http::request<http::string_body>& req, Endpoint endpoint);

/// Writes a complete JSON response.
asio::awaitable<void> write_json(beast::tcp_stream& stream, http::status status, std::string body, bool keep_alive,
                                 unsigned version);

}  // namespace loom::gateway
