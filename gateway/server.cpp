// Listener, sessions and routing; see server.hpp.
#include "gateway/server.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <iostream>

#include "gateway/response_json.hpp"
#include "gateway/text_assembler.hpp"

namespace loom::gateway {
namespace {

std::string models_body(const App& app) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    w.Key("object");
    w.String("list");
    w.Key("data");
    w.StartArray();
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
    w.EndArray();
    w.EndObject();
    return buf.GetString();
}

// POST /tokenize {"model"?, "prompt" | "messages", "add_special_tokens"?} ->
// {"count", "max_model_len", "tokens"}; POST /detokenize {"model"?, "tokens"} -> {"prompt"}
// (vLLM's extension endpoints). Throws ApiError(400) on bad input.
std::string tokenize_body(const App& app, const std::string& body, bool detokenize) {
    rapidjson::Document d;
    d.Parse(body.data(), body.size());
    if (d.HasParseError() || !d.IsObject()) throw ApiError(400, "the request body must be a JSON object");
    if (d.HasMember("model") && (!d["model"].IsString() || app.opts.model_id != d["model"].GetString()))
        throw ApiError(404, "The model does not exist; this server serves '" + app.opts.model_id + "'", "model",
                       "model_not_found");
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    if (detokenize) {
        if (!d.HasMember("tokens") || !d["tokens"].IsArray()) throw ApiError(400, "'tokens' must be an array", "tokens");
        std::vector<int32_t> ids;
        for (const auto& v : d["tokens"].GetArray()) {
            if (!v.IsInt64() || v.GetInt64() < 0 || v.GetInt64() >= app.tokenizer->n_vocab())
                throw ApiError(400, "'tokens' must hold token ids of the vocabulary", "tokens");
            ids.push_back(static_cast<int32_t>(v.GetInt64()));
        }
        const std::string text = sanitize_utf8(app.tokenizer->decode(ids));
        w.Key("prompt");
        w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
    } else {
        bool add_special = true;
        if (d.HasMember("add_special_tokens")) {
            if (!d["add_special_tokens"].IsBool()) throw ApiError(400, "'add_special_tokens' must be a boolean", "add_special_tokens");
            add_special = d["add_special_tokens"].GetBool();
        }
        std::string text;
        if (d.HasMember("prompt") && d["prompt"].IsString()) {
            text.assign(d["prompt"].GetString(), d["prompt"].GetStringLength());
        } else if (d.HasMember("messages") && d["messages"].IsArray()) {
            text = app.chat->render(d["messages"], nullptr, true, nullptr);
            add_special = add_special && !app.chat->has_template();
        } else {
            throw ApiError(400, "give 'prompt' (a string) or 'messages'", "prompt");
        }
        const auto ids = app.tokenizer->encode(text, add_special, true);
        w.Key("count");
        w.Int64(static_cast<int64_t>(ids.size()));
        w.Key("max_model_len");
        w.Int64(app.engine->ready() ? app.engine->hello().n_ctx : 0);
        w.Key("tokens");
        w.StartArray();
        for (int32_t id : ids) w.Int(id);
        w.EndArray();
    }
    w.EndObject();
    return buf.GetString();
}

asio::awaitable<void> write_error(beast::tcp_stream& stream, const ApiError& e, bool keep_alive, unsigned version) {
    co_await write_json(stream, static_cast<http::status>(e.status), error_body(e), keep_alive, version);
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

asio::awaitable<void> session(tcp::socket socket, App& app) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buf;
    while (true) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(app.opts.max_body_bytes);
        parser.header_limit(64 * 1024);
        stream.expires_after(std::chrono::seconds(60));
        boost::system::error_code ec;
        co_await http::async_read(stream, buf, parser, asio::redirect_error(asio::use_awaitable, ec));
        if (ec == http::error::body_limit) {
            co_await write_error(stream,
                                 ApiError(413, "the request body exceeds " + std::to_string(app.opts.max_body_bytes) +
                                                   " bytes", "", "request_too_large"),
                                 false, 11);
            break;
        }
        if (ec) break;  // closed, timed out or not HTTP
        stream.expires_never();
        const auto& req = parser.get();
        const bool keep = req.keep_alive();
        std::string path(req.target());
        if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
        const bool is_get = req.method() == http::verb::get, is_post = req.method() == http::verb::post;

        if (!app.opts.api_key.empty() && path != "/health") {
            const auto auth_bs = req[http::field::authorization];
            const std::string_view auth(auth_bs.data(), auth_bs.size());
            const std::string_view prefix = "Bearer ";
            const bool ok = auth.substr(0, prefix.size()) == prefix &&
                            same_secret(auth.substr(prefix.size()), app.opts.api_key);
            if (!ok) {
                co_await write_error(stream,
                                     ApiError(401, "Incorrect API key provided. Send it as 'Authorization: Bearer <key>'.",
                                              "", "invalid_api_key"),
                                     keep, req.version());
                if (!keep) break;
                continue;
            }
        }

        bool keep_going = keep;
        if (path == "/health" && is_get) {
            if (app.engine->ready()) co_await write_json(stream, http::status::ok, R"({"status":"ok"})", keep, req.version());
            else co_await write_json(stream, http::status::service_unavailable, R"({"status":"loading"})", keep, req.version());
        } else if (path == "/v1/models" && is_get) {
            co_await write_json(stream, http::status::ok, models_body(app), keep, req.version());
        } else if ((path == "/v1/completions" || path == "/v1/chat/completions") && is_post) {
            const Endpoint ep = path == "/v1/completions" ? Endpoint::Completions : Endpoint::ChatCompletions;
            keep_going = co_await handle_generation(app, stream, req, ep) && keep;
        } else if ((path == "/tokenize" || path == "/detokenize") && is_post) {
            std::optional<ApiError> err;
            std::string out;
            try {
                out = tokenize_body(app, req.body(), path == "/detokenize");
            } catch (const ApiError& e) {
                err = e;
            }
            if (err) co_await write_error(stream, *err, keep, req.version());
            else co_await write_json(stream, http::status::ok, std::move(out), keep, req.version());
        } else if (path == "/health" || path == "/v1/models" || path == "/v1/completions" ||
                   path == "/v1/chat/completions" || path == "/tokenize" || path == "/detokenize") {
            co_await write_error(stream, ApiError(405, "method " + std::string(req.method_string()) + " is not allowed on " + path,
                                                  "", "method_not_allowed"),
                                 keep, req.version());
        } else {
            co_await write_error(stream, ApiError(404, "no such endpoint: " + path, "", "not_found"), keep, req.version());
        }
        if (!keep_going) break;
    }
    boost::system::error_code ignore;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignore);
}

asio::awaitable<void> listen(tcp::acceptor acceptor, App& app) {
    while (true) {
        boost::system::error_code ec;
        tcp::socket s = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
            if (ec == asio::error::operation_aborted) co_return;
            continue;
        }
        asio::co_spawn(acceptor.get_executor(), session(std::move(s), app), asio::detached);
    }
}

}  // namespace

ModelContext App::model_context() const {
    ModelContext ctx;
    ctx.model_id = opts.model_id;
    ctx.tokenizer = tokenizer.get();
    ctx.n_ctx = engine->hello().n_ctx;
    ctx.template_adds_bos = chat->has_template();
    const ChatRenderer* c = chat.get();
    ctx.render_chat = [c](const rapidjson::Value& m, const rapidjson::Value* t, bool g, const rapidjson::Value* k) {
        return c->render(m, t, g, k);
    };
    return ctx;
}

asio::awaitable<void> write_json(beast::tcp_stream& stream, http::status status, std::string body, bool keep_alive,
                                 unsigned version) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::server, "loom");
    res.set(http::field::content_type, "application/json");
    res.keep_alive(keep_alive);
    res.body() = std::move(body);
    res.prepare_payload();
    boost::system::error_code ec;
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
}

unsigned short start_server(asio::io_context& io, App& app) {
    tcp::endpoint ep(asio::ip::make_address(app.opts.host), app.opts.port);
    tcp::acceptor acceptor(io);
    acceptor.open(ep.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen();
    const unsigned short port = acceptor.local_endpoint().port();
    asio::co_spawn(io, listen(std::move(acceptor), app), asio::detached);
    return port;
}

}  // namespace loom::gateway
