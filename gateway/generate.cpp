// POST /v1/completions and /v1/chat/completions: build the request (serving_completions,
// serving_chat), check it against the engine, send one GEN per choice, let the stream
// driver carry the engine's events to the client, and answer as one JSON body or as
// server-sent events (data: <chunk>, ..., data: [DONE]).
//
// Source: the OpenAI API reference (completions and chat completions, streamed and
// not; `n`, `echo`, `stop`, `stream_options.include_usage`; the error object), and
// vLLM's serving layer (one request builder per endpoint in front of a shared engine).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <variant>

#include "gateway/choice.hpp"
#include "gateway/grammar_spec.hpp"
#include "gateway/off_io.hpp"
#include "gateway/request_limits.hpp"
#include "gateway/response_json.hpp"
#include "gateway/sampling_params.hpp"
#include "gateway/server.hpp"
#include "gateway/serving_chat.hpp"
#include "gateway/responses_json.hpp"
#include "gateway/serving_completions.hpp"
#include "gateway/serving_responses.hpp"
#include "gateway/stream_driver.hpp"

namespace loom::gateway {
namespace {

// Most choices (prompts x n) one request may ask for: each is one engine request.
constexpr size_t kMaxChoices = 256;

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
    need(g.prompt_logprobs.has_value(), cap::kPromptLogprobs, "prompt_logprobs", "prompt_logprobs");
    need(!s.allowed.empty(), cap::kAllowed, "allowed_token_ids", "allowed_token_ids");
    need(!s.logit_bias.empty(), cap::kLogitBias, "logit_bias", "logit_bias");
    need(s.presence_penalty != 0 || s.frequency_penalty != 0 || s.repetition_penalty != 1, cap::kPenalties, "penalties",
         "presence_penalty");
    need(s.processed_logprobs, cap::kProcessedLogprobs, "logprobs_mode=processed", "logprobs_mode");
    need(s.seed.has_value(), cap::kSeed, "seed", "seed");
    if (g.constraint)  // tool_request.hpp builds the constraint, grammar_spec.hpp the GEN key
        need(true, cap::kGrammar,
             (std::string("grammar-constrained decoding, which '") + g.constraint->param + "' needs").c_str(),
             g.constraint->param.c_str());
    if (g.logprobs && g.top_logprobs > h.max_logprobs)
        throw ApiError(400, "the engine returns at most " + std::to_string(h.max_logprobs) + " top logprobs",
                       "top_logprobs");
    for (const auto& p : g.prompts)
        for (int32_t id : p)
            if (id >= h.n_vocab)
                throw ApiError(400, "token id " + std::to_string(id) + " is outside the engine's vocabulary", "prompt");
    const size_t choices = g.prompts.size() * static_cast<size_t>(g.n);
    if (choices > kMaxChoices)
        throw ApiError(400,
                       "at most " + std::to_string(kMaxChoices) + " choices (prompts x n) per request, got " +
                           std::to_string(choices),
                       "n");
}

// The validated request (its constraint not yet compiled), or the error to answer with. Runs
// on a prep thread (gateway/off_io.hpp): it reads only `ctx`, `hello` (copies made on the io
// thread), `limits` (set before the server starts) and the immutable tokenizer and chat
// renderer that `ctx` points to.
std::variant<GenerationRequest, ApiError> build_request(const ModelContext& ctx, const protocol::Hello& hello,
                                                        const std::string& body, Endpoint endpoint,
                                                        const RequestLimits& limits) {
    try {
        GenerationRequest g = endpoint == Endpoint::ChatCompletions ? build_chat_request(body, ctx)
                              : endpoint == Endpoint::Responses     ? build_responses_request(body, ctx)
                                                                    : build_completion_request(body, ctx);
        check_against_engine(g, hello);
        check_request_limits(g, ctx.n_ctx, limits);
        return g;
    } catch (const ApiError& e) { return e; }
}

// The GEN key of g's constraint (grammar_spec.hpp: 400 for what cannot be enforced), compiled
// on the compile threads (App::compile), so that at most kCompileThreads constraints compile at
// once and requests without one never wait behind them; past kMaxCompilesWaiting waiting or
// compiling, 503 at once.
asio::awaitable<std::variant<GenerationRequest, ApiError>> compile_constraint(App& app, GenerationRequest g) {
    if (app.compiles_waiting >= kMaxCompilesWaiting)
        co_return ApiError(503, "the server is compiling too many constraints at once; retry shortly",
                           g.constraint->param, "server_busy", "server_error");
    ++app.compiles_waiting;
    auto out = co_await run_off_io(app.compile.get(), [&]() -> std::variant<GenerationRequest, ApiError> {
        try {
            g.sampling.grammar = grammar_spec(*g.constraint);
            return std::move(g);
        } catch (const ApiError& e) { return e; }
    });
    --app.compiles_waiting;
    co_return out;
}

// One engine request per choice (index = prompt_index * n + i), its events to `queue`.
std::vector<std::unique_ptr<Choice>> submit_choices(App& app, const GenerationRequest& g,
                                                    const std::shared_ptr<EventQueue>& queue) {
    std::vector<std::unique_ptr<Choice>> choices;
    const int64_t n_ctx = app.engine->hello().n_ctx;
    for (size_t p = 0; p < g.prompts.size(); ++p)
        for (int i = 0; i < g.n; ++i) {
            auto c = std::make_unique<Choice>(*app.tokenizer, g, static_cast<int>(choices.size()), p);
            c->engine_id = app.engine->submit(gen_for_choice(g, p, i, n_ctx), g.logprobs, queue, c->index());
            choices.push_back(std::move(c));
        }
    return choices;
}

Usage usage_of(const GenerationRequest& g, const std::vector<std::unique_ptr<Choice>>& choices) {
    Usage u;
    for (const auto& p : g.prompts) u.prompt_tokens += static_cast<int64_t>(p.size());  // once per prompt, whatever n
    std::vector<int64_t> cached(g.prompts.size(), 0);  // per prompt, counted once like prompt_tokens
    for (const auto& c : choices) {
        u.completion_tokens += c->completion_tokens();
        cached[c->prompt_index()] = std::max(cached[c->prompt_index()], c->cached_tokens());
    }
    for (int64_t n : cached) u.cached_tokens += n;
    return u;
}

std::string response_id(App& app, Endpoint ep) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08llx%08llx", static_cast<unsigned long long>(app.created & 0xffffffff),
                  static_cast<unsigned long long>(app.next_response++));
    return std::string(ep == Endpoint::ChatCompletions ? "chatcmpl-"
                       : ep == Endpoint::Responses     ? "resp_"
                                                       : "cmpl-") +
           buf;
}

}  // namespace

asio::awaitable<bool> handle_generation(App& app, beast::tcp_stream& stream,
                                        const http::request<http::string_body>& req, Endpoint endpoint, bool& started) {
    const unsigned version = req.version();
    const bool keep = req.keep_alive();
    std::variant<GenerationRequest, ApiError> built =
        ApiError(503, "the engine is not ready; retry shortly", "", "engine_unavailable", "server_error");
    if (app.engine->ready()) {
        // Parsing, the chat template and tokenization off the io thread; the engine may stop
        // meanwhile, and then submit() fails each choice as it would a moment later.
        const ModelContext ctx = app.model_context();
        const protocol::Hello hello = app.engine->hello();
        built = co_await run_off_io(app.prep.get(),
                                    [&] { return build_request(ctx, hello, req.body(), endpoint, app.opts.limits); });
        if (auto* g = std::get_if<GenerationRequest>(&built); g && g->constraint)
            built = co_await compile_constraint(app, std::move(*g));
    }
    if (const auto* e = std::get_if<ApiError>(&built)) {
        co_await write_json(stream, static_cast<http::status>(e->status), error_body(*e), keep, version);
        co_return true;
    }
    const GenerationRequest& g = std::get<GenerationRequest>(built);
    auto queue = std::make_shared<EventQueue>(stream.get_executor());
    auto choices = submit_choices(app, g, queue);
    const ResponseMeta meta{response_id(app, endpoint), static_cast<int64_t>(std::time(nullptr)), app.opts.model_id};

    StreamDriver driver(stream, *app.engine, queue, choices, g, meta, *app.tokenizer,
                        StreamLimits{app.opts.write_timeout, app.opts.request_timeout});
    if (g.stream) {
        started = true;
        if (!co_await driver.begin(version)) co_return false;
    }
    co_await driver.run();
    if (driver.client_gone()) co_return false;
    const Usage usage = usage_of(g, choices);
    if (g.stream) co_return co_await driver.end(usage) && keep;
    if (const auto& f = driver.failure()) {
        co_await write_json(stream, static_cast<http::status>(f->status), error_body(*f), keep, version);
        co_return true;
    }
    std::vector<ChoiceOut> outs;
    if (endpoint != Endpoint::Responses)
        for (auto& c : choices) outs.push_back(c->take_whole());
    const std::string body = endpoint == Endpoint::Responses ? driver.responses_object(usage)
                                                             : full_response(g, meta, *app.tokenizer, outs, usage);
    co_await write_json(stream, http::status::ok, body, keep, version);
    co_return true;
}

}  // namespace loom::gateway
