// Listener, sessions and routing; see server.hpp.
#include "gateway/server.hpp"

#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <random>
#include <unordered_map>

#include "gateway/http_read.hpp"
#include "gateway/json_input.hpp"
#include "gateway/off_io.hpp"
#include "gateway/quote.hpp"
#include "gateway/response_json.hpp"
#include "gateway/serving_chat.hpp"
#include "gateway/static_assets.hpp"
#include "gateway/text_assembler.hpp"
#include "gateway/tool_request.hpp"

namespace loom::gateway {
namespace {

// The request id of each connection's current request (one at a time per connection:
// HTTP/1.1 answers in order). Only the io_context thread touches it.
std::unordered_map<const beast::tcp_stream*, std::string>& request_ids() {
    static std::unordered_map<const beast::tcp_stream*, std::string> ids;
    return ids;
}

// The client's x-request-id when it is 1..200 visible ASCII characters, else 32 random
// hex digits (as vLLM answers with a random id when the client sent none).
std::string choose_request_id(std::string_view sent) {
    const bool usable = !sent.empty() && sent.size() <= 200 &&
                        std::all_of(sent.begin(), sent.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (usable) return std::string(sent);
    static std::mt19937_64 rng{std::random_device{}()};
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(rng()));
    return buf;
}

// Most bytes of a request's header, and of a chunk-size line or trailer section (431, 400).
constexpr size_t kHeaderLimit = 64 * 1024;

const App* g_app = nullptr;  // the one server's App (write_json's timeout and drain state)

// The model object (OpenAI "Models" reference) or, with single=false, the list
// holding it. max_model_len (vLLM's extension) once the engine has said its context.
std::string models_body(const App& app, bool single) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    if (!single) {
        w.StartObject();
        w.Key("object");
        w.String("list");
        w.Key("data");
        w.StartArray();
    }
    w.StartObject();
    w.Key("id");
    w.String(app.opts.model_id.c_str());
    w.Key("object");
    w.String("model");
    w.Key("created");
    w.Int64(app.created);
    w.Key("owned_by");
    w.String("loom");
    if (app.engine->ready()) {
        w.Key("max_model_len");
        w.Int64(app.engine->hello().n_ctx);
    }
    w.EndObject();
    if (!single) {
        w.EndArray();
        w.EndObject();
    }
    return buf.GetString();
}

// POST /tokenize {"model"?, "prompt" | "messages", "add_special_tokens"?} ->
// {"count", "max_model_len", "tokens"}; POST /detokenize {"model"?, "tokens"} -> {"prompt"}
// (vLLM's extension endpoints). Throws ApiError(400) on bad input. Runs on a prep thread
// (gateway/off_io.hpp): it reads only `ctx`, `max_model_len` (0 while no engine runs), both
// made on the io thread, and the immutable tokenizer and chat renderer `ctx` points to.
std::string tokenize_body(const ModelContext& ctx, int64_t max_model_len, const std::string& body, bool detokenize) {
    rapidjson::Document d;
    parse_json_body(d, body);
    if (!d.IsObject()) throw ApiError(400, "the request body must be a JSON object");
    if (d.HasMember("model") && (!d["model"].IsString() || ctx.model_id != d["model"].GetString()))
        throw ApiError(404, "The model does not exist; this server serves '" + ctx.model_id + "'", "model",
                       "model_not_found");
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    if (detokenize) {
        if (!d.HasMember("tokens") || !d["tokens"].IsArray())
            throw ApiError(400, "'tokens' must be an array", "tokens");
        std::vector<int32_t> ids;
        for (const auto& v : d["tokens"].GetArray()) {
            if (!v.IsInt64() || v.GetInt64() < 0 || v.GetInt64() >= ctx.tokenizer->n_vocab())
                throw ApiError(400, "'tokens' must hold token ids of the vocabulary", "tokens");
            ids.push_back(static_cast<int32_t>(v.GetInt64()));
        }
        const std::string text = sanitize_utf8(ctx.tokenizer->decode(ids));
        w.Key("prompt");
        w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
    } else {
        bool add_special = true;
        if (d.HasMember("add_special_tokens")) {
            if (!d["add_special_tokens"].IsBool())
                throw ApiError(400, "'add_special_tokens' must be a boolean", "add_special_tokens");
            add_special = d["add_special_tokens"].GetBool();
        }
        std::string text;
        if (d.HasMember("prompt")) {
            if (!d["prompt"].IsString()) throw ApiError(400, "'prompt' must be a string", "prompt");
            text.assign(d["prompt"].GetString(), d["prompt"].GetStringLength());
        } else if (d.HasMember("messages")) {
            // Exactly what /v1/chat/completions renders: the same messages, `tools`,
            // `chat_template_kwargs` (with `reasoning_effort`, checked as chat checks them)
            // and `add_generation_prompt`, so that `count` equals that request's
            // usage.prompt_tokens.
            const OutputRequest out = parse_output_request(d, true, ctx.chat_format, ctx.chat_template);
            text = render_chat_prompt(d, ctx, &out.template_kwargs);
            add_special = add_special && !ctx.template_adds_bos;
        } else {
            throw ApiError(400, "give 'prompt' (a string) or 'messages'", "prompt");
        }
        const auto ids = ctx.tokenizer->encode(text, add_special, true);
        w.Key("count");
        w.Int64(static_cast<int64_t>(ids.size()));
        w.Key("max_model_len");
        w.Int64(max_model_len);
        w.Key("tokens");
        w.StartArray();
        for (int32_t id : ids) w.Int(id);
        w.EndArray();
    }
    w.EndObject();
    return buf.GetString();
}

asio::awaitable<void> write_error(beast::tcp_stream& stream, const ApiError& e, bool keep_alive, unsigned version,
                                  std::string_view allow = {}) {
    co_await write_json(stream, static_cast<http::status>(e.status), error_body(e), keep_alive, version, allow);
}

// Compares in time independent of where the strings first differ.
bool same_secret(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return diff == 0;
}

// True when `auth` (an Authorization header) is "Bearer <key>" (the scheme is
// case-insensitive, RFC 7235) and the key matches, compared in constant time.
bool authorized(std::string_view auth, const std::string& key) {
    const std::string_view scheme = "bearer ";
    if (auth.size() < scheme.size()) return false;
    for (size_t i = 0; i < scheme.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(auth[i])) != scheme[i]) return false;
    std::string_view token = auth.substr(scheme.size());
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    return same_secret(token, key);
}

// The methods each known path takes; empty for an unknown path.
std::string_view allowed_methods(std::string_view path) {
    if (path == "/health" || path == "/metrics" || path == "/v1/models" || path.starts_with("/v1/models/"))
        return "GET";
    if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses" || path == "/tokenize" ||
        path == "/detokenize")
        return "POST";
    return {};
}

// After an error answered before the body was read (413): stop sending, then read and
// discard what the client still sends (bounded in bytes and time), so that closing
// does not reset the connection before the client has read the answer.
asio::awaitable<void> drain_and_close(beast::tcp_stream& stream) {
    boost::system::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.expires_after(std::chrono::seconds(10));
    std::vector<char> sink(64 * 1024);
    size_t total = 0;
    while (total < (256u << 20)) {
        const size_t n =
            co_await stream.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
        total += n;
    }
    stream.socket().close(ec);
}

// Answers one request; returns false when the connection must close. Throws only on
// internal failures (the session answers those with 500 when it still can).
asio::awaitable<bool> route(App& app, beast::tcp_stream& stream, const http::request<http::string_body>& req,
                            bool& started) {
    const bool keep = req.keep_alive();
    const unsigned version = req.version();
    std::string path(req.target());
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);

    // The playground's files hold no data: a browser fetches them without a key (the
    // page sends the key the user types with its API requests).
    StaticAsset asset;
    const bool is_asset = find_static_asset(path, asset);
    if (!app.opts.api_key.empty() && path != "/health" && !is_asset) {
        const auto auth = req[http::field::authorization];
        if (!authorized(std::string_view(auth.data(), auth.size()), app.opts.api_key)) {
            co_await write_error(stream,
                                 ApiError(401, "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
                                          "", "invalid_api_key"),
                                 keep, version);
            co_return keep;
        }
    }

    const std::string_view allow = is_asset ? "GET" : allowed_methods(path);
    if (allow.empty()) {
        co_await write_error(stream, ApiError(404, "no such endpoint: " + quoted(path), "", "not_found"), keep,
                             version);
        co_return keep;
    }
    const auto method = req.method_string();
    if (std::string_view(method.data(), method.size()) != allow) {
        co_await write_error(stream,
                             ApiError(405,
                                      "method " + quoted(std::string_view(method.data(), method.size())) +
                                          " is not allowed on " + path + "; use " + std::string(allow),
                                      "", "method_not_allowed"),
                             keep, version, allow);
        co_return keep;
    }

    if (is_asset) {
        co_await write_body(stream, http::status::ok, std::string(asset.body), asset.content_type, keep, version);
    } else if (path == "/health") {
        const auto [status, body] = health_body(app);
        co_await write_json(stream, status, body, keep, version);
    } else if (path == "/metrics") {
        co_await write_body(stream, http::status::ok, app.metrics->render(), "text/plain; version=0.0.4; charset=utf-8",
                            keep, version);
    } else if (path == "/v1/models") {
        co_await write_json(stream, http::status::ok, models_body(app, false), keep, version);
    } else if (path.starts_with("/v1/models/")) {
        if (path.substr(11) == app.opts.model_id)
            co_await write_json(stream, http::status::ok, models_body(app, true), keep, version);
        else
            co_await write_error(stream,
                                 ApiError(404,
                                          "The model " + quoted(path.substr(11)) +
                                              " does not exist; this server serves '" + app.opts.model_id + "'",
                                          "model", "model_not_found"),
                                 keep, version);
    } else if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses") {
        const Endpoint ep = path == "/v1/completions" ? Endpoint::Completions
                            : path == "/v1/responses" ? Endpoint::Responses
                                                      : Endpoint::ChatCompletions;
        co_return co_await handle_generation(app, stream, req, ep, started) && keep;
    } else {  // /tokenize, /detokenize
        std::optional<ApiError> err;
        std::string out;
        const ModelContext ctx = app.model_context();
        const int64_t max_model_len = app.engine->ready() ? app.engine->hello().n_ctx : 0;
        const bool detokenize = path == "/detokenize";
        try {
            out = co_await run_off_io(app.prep.get(),
                                      [&] { return tokenize_body(ctx, max_model_len, req.body(), detokenize); });
        } catch (const ApiError& e) { err = e; }
        if (err) co_await write_error(stream, *err, keep, version);
        else co_await write_json(stream, http::status::ok, std::move(out), keep, version);
    }
    co_return keep;
}

// Marks a session's connection in App::connections for its lifetime.
struct Registered {
    std::shared_ptr<Connections> conns;
    std::list<Connections::Entry>::iterator it;
    Registered(std::shared_ptr<Connections> c, beast::tcp_stream* s) : conns(std::move(c)) {
        it = conns->list.insert(conns->list.end(), Connections::Entry{s, false});
    }
    ~Registered() { conns->list.erase(it); }
};

asio::awaitable<void> session(tcp::socket socket, App& app) {
    beast::tcp_stream stream(std::move(socket));
    Registered reg(app.connections, &stream);
    struct Forget {  // the connection's request id goes with it, however the session ends
        const beast::tcp_stream* s;
        ~Forget() { request_ids().erase(s); }
    } forget{&stream};
    beast::flat_buffer buf;
    while (!app.connections->draining) {
        request_ids().erase(&stream);
        http::request_parser<http::string_body> parser;
        parser.body_limit(app.opts.max_body_bytes);
        parser.header_limit(kHeaderLimit);
        stream.expires_after(std::chrono::seconds(60));
        // gateway/http_read.hpp: Beast's parser, strict about the framing (a refusal: 400, close).
        ReadResult read = co_await read_request_header(stream, buf, parser);
        boost::system::error_code& ec = read.ec;
        if (!ec && read.refusal.empty() && !parser.is_done()) {
            // A client that waits for "100 Continue" before sending the body (curl does).
            const auto expect = parser.get()[http::field::expect];
            if (beast::iequals(expect, "100-continue")) {
                http::response<http::empty_body> cont{http::status::continue_, parser.get().version()};
                co_await http::async_write(stream, cont, asio::redirect_error(asio::use_awaitable, ec));
            }
            if (!ec) read = co_await read_request_body(stream, buf, parser, kHeaderLimit);
        }
        if (!read.refusal.empty()) {
            if (parser.is_header_done()) {
                const auto sent = parser.get()["x-request-id"];
                request_ids()[&stream] = choose_request_id(std::string_view(sent.data(), sent.size()));
            } else {
                request_ids()[&stream] = choose_request_id({});
            }
            co_await write_error(stream, ApiError(400, "malformed HTTP request: " + read.refusal, "", "bad_http"),
                                 false, 11);
            co_await drain_and_close(stream);
            co_return;
        }
        if (!ec || ec == http::error::body_limit) {
            const auto sent = parser.get()["x-request-id"];
            request_ids()[&stream] = choose_request_id(std::string_view(sent.data(), sent.size()));
        } else if (ec != http::error::end_of_stream) {
            request_ids()[&stream] = choose_request_id({});
        }
        if (ec == http::error::body_limit) {
            co_await write_error(
                stream,
                ApiError(413, "the request body exceeds " + std::to_string(app.opts.max_body_bytes) + " bytes", "",
                         "request_too_large"),
                false, 11);
            co_await drain_and_close(stream);
            co_return;
        }
        if (ec == http::error::header_limit) {
            co_await write_error(stream, ApiError(431, "the request headers exceed 64 KiB", "", "headers_too_large"),
                                 false, 11);
            co_await drain_and_close(stream);
            co_return;
        }
        if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
            ec != http::error::end_of_stream && ec != http::error::partial_message) {
            co_await write_error(stream, ApiError(400, "malformed HTTP request: " + ec.message(), "", "bad_http"),
                                 false, 11);
            co_await drain_and_close(stream);
            co_return;
        }
        if (ec) break;  // closed or timed out
        stream.expires_never();

        bool started = false, keep_going = false;
        std::optional<std::string> internal;
        reg.it->busy = true;
        try {
            keep_going = co_await route(app, stream, parser.get(), started);
        } catch (const std::exception& e) { internal = cut(e.what()); }
        if (internal) {
            std::cerr << "loom-gateway: internal error: " << *internal << "\n";
            if (!started)
                co_await write_error(
                    stream, ApiError(500, "internal error: " + *internal, "", "internal_error", "server_error"), false,
                    parser.get().version());
        }
        reg.it->busy = false;
        if (app.trimmer) app.trimmer->request_ended();
        if (internal || !keep_going) break;
    }
    boost::system::error_code ignore;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignore);
}

// Errors that mean "no resources for another connection now": back off, do not spin.
bool out_of_resources(const boost::system::error_code& ec) {
    return ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
           ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

asio::awaitable<void> listen(App& app) {
    tcp::acceptor& acceptor = *app.acceptor;
    asio::steady_timer pause(acceptor.get_executor());
    const auto first_delay = std::chrono::milliseconds(10);
    auto delay = first_delay;
    bool starved = false;
    while (acceptor.is_open()) {
        boost::system::error_code ec;
        tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
        if (ec && out_of_resources(ec)) {
            if (!starved)
                std::cerr << "loom-gateway: cannot accept connections (" << ec.message()
                          << "); pausing accepts, open connections are still served\n";
            starved = true;
            pause.expires_after(delay);
            co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            delay = std::min(delay * 2, std::chrono::milliseconds(1000));
            continue;
        }
        if (ec) continue;  // e.g. a connection reset before it was accepted
        if (starved) std::cerr << "loom-gateway: accepting connections again\n";
        starved = false;
        delay = first_delay;
        if (app.connections->draining) continue;  // closes it
        // Each SSE event is one small write. With Nagle's algorithm a write waits while
        // an earlier one is unacknowledged, and a client that only reads delays its ACKs
        // (up to 40 ms on Linux), so events would stall behind each other.
        s.set_option(tcp::no_delay(true), ec);
        asio::co_spawn(acceptor.get_executor(), session(std::move(s), app), asio::detached);
    }
}

}  // namespace

size_t Connections::busy() const {
    size_t n = 0;
    for (const auto& e : list) n += e.busy;
    return n;
}

std::pair<http::status, std::string> health_body(const App& app) {
    if (app.connections->draining) return {http::status::service_unavailable, R"({"status":"draining"})"};
    const EngineHealth h = app.engine->health();
    if (h.state == EngineHealth::State::Ok) return {http::status::ok, R"({"status":"ok"})"};
    if (h.state == EngineHealth::State::Loading) return {http::status::service_unavailable, R"({"status":"loading"})"};
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    auto str = [&](const std::string& s) {
        const std::string v = sanitize_utf8(s);
        w.String(v.data(), static_cast<rapidjson::SizeType>(v.size()));
    };
    w.StartObject();
    w.Key("status");
    w.String("unhealthy");
    w.Key("reason");
    str(h.reason);
    w.Key("engine_stderr");
    w.StartArray();
    for (const auto& l : h.stderr_tail) str(l);
    w.EndArray();
    w.EndObject();
    return {http::status::service_unavailable, buf.GetString()};
}

size_t begin_drain(App& app) {
    app.connections->draining = true;
    boost::system::error_code ec;
    if (app.acceptor) app.acceptor->close(ec);
    size_t busy = 0;
    for (auto& e : app.connections->list) {
        if (e.busy) ++busy;
        else e.stream->socket().close(ec);  // waiting for a request: its read ends, the session closes
    }
    return busy;
}

ModelContext App::model_context() const {
    ModelContext ctx;
    ctx.model_id = opts.model_id;
    ctx.tokenizer = tokenizer.get();
    ctx.n_ctx = engine->hello().n_ctx;
    ctx.template_adds_bos = chat->has_template();
    ctx.chat_format = chat_format;
    ctx.chat_template = tokenizer->vocab().chat_template;
    const ChatRenderer* c = chat.get();
    ctx.render_chat = [c](const rapidjson::Value& m, const rapidjson::Value* t, bool g, const rapidjson::Value* k) {
        return c->render(m, t, g, k);
    };
    return ctx;
}

asio::awaitable<void> write_json(beast::tcp_stream& stream, http::status status, std::string body, bool keep_alive,
                                 unsigned version, std::string_view allow) {
    co_await write_body(stream, status, std::move(body), "application/json", keep_alive, version, allow);
}

asio::awaitable<void> write_body(beast::tcp_stream& stream, http::status status, std::string body,
                                 std::string_view content_type, bool keep_alive, unsigned version,
                                 std::string_view allow) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::server, "loom");
    res.set(http::field::content_type, std::string(content_type));
    if (const auto id = request_id(stream); !id.empty()) res.set("x-request-id", std::string(id));
    if (!allow.empty()) res.set(http::field::allow, std::string(allow));
    res.keep_alive(keep_alive && !(g_app && g_app->connections->draining));
    res.body() = std::move(body);
    res.prepare_payload();
    boost::system::error_code ec;
    stream.expires_after(g_app ? g_app->opts.write_timeout : std::chrono::milliseconds(30000));
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    stream.expires_never();
}

std::string_view request_id(const beast::tcp_stream& stream) {
    const auto it = request_ids().find(&stream);
    return it == request_ids().end() ? std::string_view() : std::string_view(it->second);
}

unsigned short start_server(asio::io_context& io, App& app) {
    tcp::endpoint ep(asio::ip::make_address(app.opts.host), app.opts.port);
    app.acceptor = std::make_unique<tcp::acceptor>(io);
    tcp::acceptor& acceptor = *app.acceptor;
    acceptor.open(ep.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen(asio::socket_base::max_listen_connections);
    const unsigned short port = acceptor.local_endpoint().port();
    g_app = &app;
    asio::co_spawn(io, listen(app), asio::detached);
    return port;
}

}  // namespace loom::gateway
