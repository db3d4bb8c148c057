// POST /v1/completions and /v1/chat/completions: validate, send one GEN per choice,
// assemble text and logprobs per choice, and answer as one JSON body or as
// server-sent events (data: <chunk>, ..., data: [DONE]).
//
// Source: the OpenAI API reference (completions and chat completions, streamed and
// not; `n`, `echo`, `stop`, `stream_options.include_usage`; the error object).
#include <sys/socket.h>

#include <cerrno>
#include <ctime>

#include "gateway/response_json.hpp"
#include "gateway/sampling_params.hpp"
#include "gateway/server.hpp"
#include "gateway/serving_chat.hpp"
#include "gateway/serving_completions.hpp"
#include "gateway/text_assembler.hpp"

namespace loom::gateway {
namespace {

// Most choices (prompts x n) one request may ask for: each is one engine request.
constexpr size_t kMaxChoices = 256;

struct Choice {
    Choice(const model::Tokenizer& tok, std::vector<std::string> stops, bool specials_as_text)
        : text_asm(tok, std::move(stops), specials_as_text) {}
    int index = 0;
    size_t prompt_index = 0;
    std::string engine_id;
    TextAssembler text_asm;
    std::string text;                       // non-streamed: all released text
    std::vector<LogprobEntry> entries;      // non-streamed: all released entries
    bool echo = false;                      // completions echo: the prompt goes first
    size_t echo_next = 0;                   // next prompt token to echo
    std::optional<std::string> finish;
    int64_t engine_tokens = 0;              // completion_tokens from DONE
    int64_t char_offset = 0;                // characters already sent (text_offset)
    bool done = false;
};

// Refuses (400) what the engine cannot serve: a capability it did not announce, more
// top logprobs than it returns, token ids past its logits, too many choices.
void check_against_engine(const GenerationRequest& g, const protocol::Hello& h) {
    auto need = [&](bool used, const char* cap, const char* what, const char* param) {
        if (used && !h.has_cap(cap))
            throw ApiError(400, std::string("the engine (") + h.engine + ") does not support " + what, param,
                           "unsupported_by_engine");
    };
    namespace cap = protocol::cap;
    const auto& s = g.sampling;
    need(g.logprobs, cap::kLogprobs, "logprobs", "logprobs");
    need(g.echo && g.logprobs, cap::kPromptLogprobs, "prompt logprobs (echo with logprobs)", "echo");
    need(!s.allowed.empty(), cap::kAllowed, "allowed_token_ids", "allowed_token_ids");
    need(!s.logit_bias.empty(), cap::kLogitBias, "logit_bias", "logit_bias");
    need(s.presence_penalty != 0 || s.frequency_penalty != 0 || s.repetition_penalty != 1, cap::kPenalties,
         "penalties", "presence_penalty");
    need(s.processed_logprobs, cap::kProcessedLogprobs, "logprobs_mode=processed", "logprobs_mode");
    need(s.seed.has_value(), cap::kSeed, "seed", "seed");
    if (g.logprobs && g.top_logprobs > h.max_logprobs)
        throw ApiError(400, "the engine returns at most " + std::to_string(h.max_logprobs) + " top logprobs",
                       "top_logprobs");
    for (const auto& p : g.prompts)
        for (int32_t id : p)
            if (id >= h.n_vocab)
                throw ApiError(400, "token id " + std::to_string(id) + " is outside the engine's vocabulary",
                               "prompt");
    const size_t choices = g.prompts.size() * static_cast<size_t>(g.n);
    if (choices > kMaxChoices)
        throw ApiError(400, "at most " + std::to_string(kMaxChoices) + " choices (prompts x n) per request, got " +
                                std::to_string(choices),
                       "n");
}

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

std::string response_id(App& app, Endpoint ep) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08llx%08llx", static_cast<unsigned long long>(app.created & 0xffffffff),
                  static_cast<unsigned long long>(app.next_response++));
    return std::string(ep == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-") + buf;
}

// Server-sent events over a chunked HTTP/1.1 response.
class SseWriter {
public:
    explicit SseWriter(beast::tcp_stream& s) : s_(s) {}
    asio::awaitable<bool> header(unsigned version) {
        http::response<http::empty_body> res{http::status::ok, version};
        res.set(http::field::server, "loom");
        res.set(http::field::content_type, "text/event-stream");
        res.set(http::field::cache_control, "no-cache");
        res.chunked(true);
        http::response_serializer<http::empty_body> sr{res};
        boost::system::error_code ec;
        co_await http::async_write_header(s_, sr, asio::redirect_error(asio::use_awaitable, ec));
        co_return !ec;
    }
    asio::awaitable<bool> event(const std::string& data) {
        std::string payload = "data: " + data + "\n\n";
        boost::system::error_code ec;
        co_await asio::async_write(s_, http::make_chunk(asio::buffer(payload)), asio::redirect_error(asio::use_awaitable, ec));
        co_return !ec;
    }
    asio::awaitable<bool> end() {
        boost::system::error_code ec;
        co_await asio::async_write(s_, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
        co_return !ec;
    }

private:
    beast::tcp_stream& s_;
};

}  // namespace

asio::awaitable<bool> handle_generation(App& app, beast::tcp_stream& stream,
                                        const http::request<http::string_body>& req, Endpoint endpoint,
                                        bool& started) {
    const unsigned version = req.version();
    const bool keep = req.keep_alive();
    if (!app.engine->ready()) {
        co_await write_json(stream, http::status::service_unavailable,
                            error_body(ApiError(503, "the engine is not ready; retry shortly", "", "engine_unavailable",
                                                "server_error")),
                            keep, version);
        co_return true;
    }
    GenerationRequest g;
    std::optional<ApiError> invalid;
    try {
        g = endpoint == Endpoint::ChatCompletions ? build_chat_request(req.body(), app.model_context())
                                                  : build_completion_request(req.body(), app.model_context());
        check_against_engine(g, app.engine->hello());
    } catch (const ApiError& e) {
        invalid = e;
    }
    if (invalid) {
        co_await write_json(stream, static_cast<http::status>(invalid->status), error_body(*invalid), keep, version);
        co_return true;
    }

    const bool chat = endpoint == Endpoint::ChatCompletions;
    const model::Tokenizer& tok = *app.tokenizer;
    const int64_t n_ctx = app.engine->hello().n_ctx;
    auto queue = std::make_shared<EventQueue>(stream.get_executor());
    std::vector<std::unique_ptr<Choice>> choices;
    Usage usage;
    for (size_t p = 0; p < g.prompts.size(); ++p) {
        const auto& prompt = g.prompts[p];
        usage.prompt_tokens += static_cast<int64_t>(prompt.size());  // once per prompt, whatever n
        for (int i = 0; i < g.n; ++i) {
            // Completions spell special tokens with their text; chat gives them no bytes.
            auto c = std::make_unique<Choice>(tok, g.stop, !chat);
            c->index = static_cast<int>(choices.size());
            c->prompt_index = p;
            c->echo = g.echo;
            c->engine_id = app.engine->submit(gen_for_choice(g, p, i, n_ctx), g.logprobs, queue, c->index);
            choices.push_back(std::move(c));
        }
    }
    const ResponseMeta meta{response_id(app, endpoint), static_cast<int64_t>(std::time(nullptr)), app.opts.model_id};

    auto live = std::make_shared<bool>(true);
    tcp::socket& sock = stream.socket();
    asio::co_spawn(stream.get_executor(), watch_disconnect(sock, queue, live), asio::detached);
    auto cancel_all = [&] {
        for (auto& c : choices)
            if (!c->done) app.engine->cancel(c->engine_id);
    };
    auto stop_watch = [&] {
        *live = false;
        boost::system::error_code ignore;
        sock.cancel(ignore);
    };

    SseWriter sse(stream);
    if (g.stream) {
        started = true;
        bool ok = co_await sse.header(version);
        if (ok && chat)
            for (auto& c : choices) {
                ChoiceOut out;
                out.index = c->index;
                out.first_chunk = true;
                if (!(ok = co_await sse.event(stream_chunk(g, meta, tok, &out, nullptr)))) break;
            }
        if (!ok) {
            cancel_all();
            stop_watch();
            co_return false;
        }
    }

    // Sends (stream) or keeps (non-stream) what a choice released.
    auto deliver = [&](Choice& c, Released rel, std::optional<std::string> finish) -> asio::awaitable<bool> {
        if (!g.stream) {
            c.text += rel.text;
            for (auto& e : rel.entries) c.entries.push_back(std::move(e));
            co_return true;
        }
        if (rel.empty() && !finish) co_return true;
        ChoiceOut out;
        out.index = c.index;
        out.text = std::move(rel.text);
        out.entries = std::move(rel.entries);
        out.finish_reason = std::move(finish);
        out.text_offset = c.char_offset;
        c.char_offset += utf8_chars(out.text);
        co_return co_await sse.event(stream_chunk(g, meta, tok, &out, nullptr));
    };
    // The prompt tokens whose PLP line did not come (all of them without logprobs)
    // are echoed, without logprobs, before the first generated token.
    auto echo_rest = [&](Choice& c) {
        Released all;
        if (!c.echo) return all;
        const auto& prompt = g.prompts[c.prompt_index];
        for (; c.echo_next < prompt.size(); ++c.echo_next) {
            Released r = c.text_asm.push_prompt(prompt[c.echo_next], nullptr);
            all.text += r.text;
            for (auto& e : r.entries) all.entries.push_back(std::move(e));
        }
        c.echo = false;
        return all;
    };

    std::optional<ApiError> failure;
    bool client_gone = false;
    size_t open = choices.size();
    while (open > 0) {
        auto [ci, ev] = co_await queue->next();
        if (std::holds_alternative<Disconnected>(ev)) {
            client_gone = true;
            break;
        }
        Choice& c = *choices[static_cast<size_t>(ci)];
        if (c.done) continue;
        bool ok = true;
        if (auto* t = std::get_if<TokenEvent>(&ev)) {
            if (c.text_asm.stopped()) continue;
            Released rel = echo_rest(c);
            Released more = c.text_asm.push(t->token, t->lp ? &*t->lp : nullptr);
            rel.text += more.text;
            for (auto& e : more.entries) rel.entries.push_back(std::move(e));
            if (c.text_asm.stopped()) app.engine->cancel(c.engine_id);
            ok = co_await deliver(c, std::move(rel), std::nullopt);
        } else if (auto* plp = std::get_if<protocol::PromptLogprobs>(&ev)) {
            const auto& prompt = g.prompts[c.prompt_index];
            if (c.echo && plp->index == static_cast<int64_t>(c.echo_next) && c.echo_next < prompt.size()) {
                Released rel = c.text_asm.push_prompt(prompt[c.echo_next], plp);
                ++c.echo_next;
                ok = co_await deliver(c, std::move(rel), std::nullopt);
            }
        } else if (auto* d = std::get_if<protocol::Done>(&ev)) {
            c.done = true;
            --open;
            c.engine_tokens = d->completion_tokens;
            c.finish = (c.text_asm.stopped() || d->finish != "length") ? "stop" : "length";
            Released rel = echo_rest(c);
            Released more = c.text_asm.finish();
            rel.text += more.text;
            for (auto& e : more.entries) rel.entries.push_back(std::move(e));
            ok = co_await deliver(c, std::move(rel), c.finish);
        } else if (auto* err = std::get_if<protocol::Error>(&ev)) {
            c.done = true;
            --open;
            failure = ApiError(503, "the engine failed this request: " + err->message, "", "engine_error", "server_error");
            break;
        }
        if (!ok) {
            client_gone = true;
            break;
        }
    }
    stop_watch();
    if (client_gone || failure) cancel_all();
    if (client_gone) co_return false;

    for (const auto& c : choices)
        usage.completion_tokens += c->text_asm.stopped() ? c->text_asm.generated() : c->engine_tokens;
    if (g.stream) {
        // An engine failure mid-stream: an error event (the OpenAI error object), then
        // the usual end of the stream.
        if (failure) co_await sse.event(error_body(*failure));
        else if (g.include_usage) co_await sse.event(stream_chunk(g, meta, tok, nullptr, &usage));
        co_return co_await sse.event("[DONE]") && co_await sse.end() && keep;
    }
    if (failure) {
        co_await write_json(stream, static_cast<http::status>(failure->status), error_body(*failure), keep, version);
        co_return true;
    }
    std::vector<ChoiceOut> outs;
    for (auto& c : choices) {
        ChoiceOut o;
        o.index = c->index;
        o.text = std::move(c->text);
        o.entries = std::move(c->entries);
        o.finish_reason = c->finish;
        outs.push_back(std::move(o));
    }
    co_await write_json(stream, http::status::ok, full_response(g, meta, tok, outs, usage), keep, version);
    co_return true;
}

}  // namespace loom::gateway
