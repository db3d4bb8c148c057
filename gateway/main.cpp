// loom-gateway: serves the OpenAI HTTP API and runs an engine child process.
#include <boost/program_options.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "gateway/model_preload.hpp"
#include "gateway/server.hpp"
#include "model/gguf/gguf.hpp"

namespace po = boost::program_options;
using namespace loom::gateway;

namespace {

std::string default_engine(const char* argv0) {
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) self = std::filesystem::absolute(argv0);
    return (self.parent_path() / "loom-engine-cpu").string();
}

// Opens /dev/null on whichever of fds 0, 1, 2 is closed, so that no pipe or socket
// the gateway makes later lands on a standard descriptor.
void ensure_std_fds() {
    for (int fd = 0; fd < 3; ++fd)
        if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            const int n = ::open("/dev/null", O_RDWR);
            if (n >= 0 && n != fd) ::close(n);  // cannot happen: open takes the lowest free fd
        }
}

// Seconds from the command line as milliseconds; throws for a negative or non-finite value.
std::chrono::milliseconds seconds(double s, const char* name) {
    if (!(s >= 0) || !std::isfinite(s) || s > 1e9)
        throw std::runtime_error(std::string("--") + name + " must be >= 0 seconds");
    return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000)));
}

// The API key in `path`: its content without trailing newlines or spaces.
std::string read_key_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read the API key file " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string key = ss.str();
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ' || key.back() == '\t'))
        key.pop_back();
    if (key.empty()) throw std::runtime_error("the API key file " + path + " is empty");
    if (key.find_first_of("\r\n") != std::string::npos)
        throw std::runtime_error("the API key file " + path + " holds more than one line");
    return key;
}

// The graceful half of shutdown (see main): drains, then stops the engine and the loop.
asio::awaitable<void> drain(asio::io_context& io, App& app, int sig, std::chrono::milliseconds grace) {
    const size_t busy = begin_drain(app);
    std::cerr << "loom-gateway: SIG" << sigabbrev_np(sig) << ": shutting down: no new connections; " << busy
              << " request(s) in flight get up to " << grace.count() << " ms to finish\n";
    asio::steady_timer t(io);
    auto wait_idle = [&](std::chrono::steady_clock::time_point until) -> asio::awaitable<void> {
        while (app.connections->busy() > 0 && std::chrono::steady_clock::now() < until) {
            t.expires_after(std::chrono::milliseconds(10));
            boost::system::error_code ec;
            co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
    };
    co_await wait_idle(std::chrono::steady_clock::now() + grace);
    if (const size_t left = app.connections->busy(); left > 0) {
        std::cerr << "loom-gateway: shutdown timeout: failing " << left << " request(s) still in flight\n";
        app.engine->fail_all("the gateway is shutting down");
        co_await wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(2));
    }
    co_await app.engine->shutdown(std::chrono::seconds(5));
    std::cerr << "loom-gateway: stopped\n";
    io.stop();
}

}  // namespace

int main(int argc, char** argv) {
    std::signal(SIGPIPE, SIG_IGN);  // a dead engine or client must not kill the gateway
    tune_malloc();                  // gateway/memory_trim.hpp: memory comes back after bursts
    ensure_std_fds();
    std::string model, engine, host, model_id, api_key, api_key_file, engine_log, tool_parser, reasoning_parser;
    int port = 8080, ctx = 0, restart_limit = 5, prep_threads = 4;
    size_t max_body = 8u << 20;
    RequestLimits limits;
    double request_timeout = 0, shutdown_timeout = 30, write_timeout = 30, ping_interval = 5, ping_timeout = 10;
    std::vector<std::string> engine_args;
    po::options_description opts(
        "loom-gateway: an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions,\n"
        "/v1/responses, /v1/models, /tokenize, /detokenize, /health, /metrics, and a playground\n"
        "page at /) that reads a GGUF model file ahead (showing progress), starts an engine\n"
        "process on it, talks to it over the loom engine protocol, and restarts it if it dies.\n\nOptions");
    // clang-format off  (one option a line reads better than the chained calls clang-format makes)
    opts.add_options()("help,h", "print this help and exit")("model,m", po::value(&model),
                                                             "GGUF model file (required)")(
        "engine", po::value(&engine), "engine executable (default: loom-engine-cpu beside loom-gateway)")(
        "engine-arg", po::value(&engine_args)->composing(),
        "extra argument for the engine (repeatable), e.g. --engine-arg=--threads=4")(
        "ctx", po::value(&ctx)->default_value(0), "context length passed to the engine (0: the model's)")(
        "host", po::value(&host)->default_value("127.0.0.1"), "address to listen on")(
        "port", po::value(&port)->default_value(8080), "port to listen on (0: any free port)")(
        "model-id", po::value(&model_id), "model id served on /v1/models (default: the file name without .gguf)")(
        "api-key", po::value(&api_key),
        "require 'Authorization: Bearer <key>' on every endpoint but /health (default: $LOOM_API_KEY, or none); "
        "a key on the command line is visible to every user in ps: prefer --api-key-file or $LOOM_API_KEY")(
        "api-key-file", po::value(&api_key_file),
        "read the API key from this file (one line; trailing newline ignored)")(
        "max-body", po::value(&max_body)->default_value(8u << 20), "largest request body in bytes (larger: 413)")(
        "max-n", po::value(&limits.max_n)->default_value(limits.max_n),
        "most choices ('n') per prompt, 1..128 (more: 400)")(
        "max-request-tokens", po::value(&limits.max_request_tokens)->default_value(limits.max_request_tokens),
        "most tokens one request may ask for: its prompts plus n x max_tokens per prompt, a missing max_tokens "
        "counting as the rest of the context (more: 400; one prompt with n 1 is only bounded by the context)")(
        "max-response-bytes", po::value(&limits.max_response_bytes)->default_value(limits.max_response_bytes),
        "largest response a request may ask for, estimated before it runs from n x max_tokens tokens and the "
        "logprobs and top_logprobs alternatives of each (more: 400)")(
        "request-timeout", po::value(&request_timeout)->default_value(0),
        "seconds a generation may take; longer: 503 (a stream: an error event, then [DONE]) and it is cancelled (0: no "
        "limit)")("write-timeout", po::value(&write_timeout)->default_value(30),
                  "seconds one response write may block on a client that does not read; then the request is cancelled "
                  "and the connection closed")(
        "shutdown-timeout", po::value(&shutdown_timeout)->default_value(30),
        "on SIGTERM or SIGINT: seconds in-flight requests get to finish before they are failed and the engine is "
        "stopped (a second signal stops at once)")(
        "engine-ping-interval", po::value(&ping_interval)->default_value(5),
        "seconds between liveness checks of an engine that announces 'ping' (PING/PONG, docs/protocol.md; 0: none)")(
        "engine-ping-timeout", po::value(&ping_timeout)->default_value(10),
        "seconds an engine has to answer PING; then it is killed and restarted")(
        "engine-restart-limit", po::value(&restart_limit)->default_value(5),
        "engines dying young (before HELLO or within 3 s of it) this many times in a row make /health report "
        "'unhealthy' (restarts go on, the delay doubling from 200 ms to 30 s)")(
        "prep-threads", po::value(&prep_threads)->default_value(4),
        "threads that parse requests, render chat templates and tokenize prompts, so that a long prompt does not "
        "stall the other streams on the io thread; request constraints (response_format, guided_*, tools) compile "
        "on 2 threads of their own (0: all of it on the io thread)")(
        "engine-log", po::value(&engine_log), "write every protocol line to this file ('> ' sent, '< ' received)")(
        "tool-parser", po::value(&tool_parser)->default_value("auto"),
        ("syntax of the model's tool calls: auto (from its chat template) or one of " + tool_family_names()).c_str())(
        "reasoning-parser", po::value(&reasoning_parser)->default_value("auto"),
        ("syntax of the model's reasoning: auto (from its chat template) or one of " + reasoning_family_names())
            .c_str());
    // clang-format on
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, opts), vm);
        po::notify(vm);
    } catch (const std::exception& e) {
        std::cerr << "loom-gateway: " << e.what() << "\n" << opts << "\n";
        return 2;
    }
    if (vm.count("help")) {
        std::cout << opts << "\n";
        return 0;
    }
    if (model.empty() || port < 0 || port > 65535 || ctx < 0 || restart_limit < 1 || prep_threads < 0 ||
        prep_threads > 256 || limits.max_n < 1 || limits.max_n > 128 || limits.max_request_tokens < 1 ||
        limits.max_response_bytes < 1) {
        std::cerr << "loom-gateway: --model is required (and --port in 0..65535, --engine-restart-limit >= 1, "
                     "--prep-threads in 0..256, --max-n in 1..128, --max-request-tokens and --max-response-bytes "
                     ">= 1)\n"
                  << opts << "\n";
        return 2;
    }
    SupervisionOptions sup;
    std::chrono::milliseconds shutdown_grace;
    try {
        if (!api_key_file.empty()) {
            if (!api_key.empty()) throw std::runtime_error("give --api-key or --api-key-file, not both");
            api_key = read_key_file(api_key_file);
        }
        sup.ping_interval = seconds(ping_interval, "engine-ping-interval");
        sup.ping_timeout = seconds(ping_timeout, "engine-ping-timeout");
        sup.restart_limit = restart_limit;
        shutdown_grace = seconds(shutdown_timeout, "shutdown-timeout");
        seconds(request_timeout, "request-timeout");
        seconds(write_timeout, "write-timeout");
        if (sup.ping_interval.count() > 0 && sup.ping_timeout.count() == 0)
            throw std::runtime_error("--engine-ping-timeout must be > 0");
        if (seconds(write_timeout, "write-timeout").count() == 0)
            throw std::runtime_error("--write-timeout must be > 0");
    } catch (const std::exception& e) {
        std::cerr << "loom-gateway: " << e.what() << "\n";
        return 2;
    }
    if (api_key.empty())
        if (const char* k = std::getenv("LOOM_API_KEY")) api_key = k;
    const auto tools = tool_parser == "auto" ? std::optional<ToolFamily>() : tool_family_from_name(tool_parser);
    const auto reasoning =
        reasoning_parser == "auto" ? std::optional<ReasoningFamily>() : reasoning_family_from_name(reasoning_parser);
    if ((tool_parser != "auto" && !tools) || (reasoning_parser != "auto" && !reasoning)) {
        std::cerr << "loom-gateway: --tool-parser takes auto, " << tool_family_names()
                  << "; --reasoning-parser takes auto, " << reasoning_family_names() << "\n";
        return 2;
    }

    // The io_context outlives the App: the engine's pipes must be closed (in
    // ~EngineClient) while the io_context that owns their reactor still exists.
    asio::io_context io;
    App app;
    app.opts.host = host;
    app.opts.port = static_cast<unsigned short>(port);
    app.opts.api_key = api_key;
    app.opts.max_body_bytes = max_body;
    app.opts.limits = limits;
    app.opts.write_timeout = seconds(write_timeout, "write-timeout");
    app.opts.request_timeout = seconds(request_timeout, "request-timeout");
    app.opts.model_id = model_id.empty() ? std::filesystem::path(model).stem().string() : model_id;
    app.created = static_cast<int64_t>(std::time(nullptr));
    app.trimmer = std::make_unique<MemoryTrimmer>(io.get_executor());
    if (prep_threads > 0) {
        app.prep = std::make_unique<asio::thread_pool>(static_cast<size_t>(prep_threads));
        app.compile = std::make_unique<asio::thread_pool>(kCompileThreads);
    }
    try {
        // The gateway reads only the vocabulary; the engine maps the weights.
        auto file = loom::model::GgufFile::open(model);
        app.tokenizer = loom::model::Tokenizer::from_gguf(file);
        app.chat = std::make_unique<ChatRenderer>(app.tokenizer->vocab());
        const std::string& tmpl = app.tokenizer->vocab().chat_template;
        app.chat_format.tools = tools.value_or(detect_tool_family(tmpl));
        app.chat_format.reasoning = reasoning.value_or(detect_reasoning_family(tmpl));
        std::cerr << "loom-gateway: chat output: tool calls " << tool_family_name(app.chat_format.tools)
                  << ", reasoning " << reasoning_family_name(app.chat_format.reasoning) << "\n";
    } catch (const std::exception& e) {
        std::cerr << "loom-gateway: cannot use " << model << ": " << e.what() << "\n";
        return 1;
    }

    EngineCommand cmd{engine.empty() ? default_engine(argv[0]) : engine, {"--model", model}, engine_log};
    if (ctx > 0) {
        cmd.args.push_back("--ctx");
        cmd.args.push_back(std::to_string(ctx));
    }
    for (const auto& a : engine_args) cmd.args.push_back(a);
    app.metrics = std::make_unique<Metrics>(app.opts.model_id);
    try {
        app.engine = std::make_unique<EngineClient>(io, cmd, sup);
        app.engine->set_observer(app.metrics.get());
    } catch (const std::exception& e) {
        std::cerr << "loom-gateway: " << e.what() << "\n";
        return 1;
    }
    int exit_code = 0;
    unsigned short bound = 0;
    uint64_t hellos = 0;
    auto start_engine = [&] {
        app.engine->start(
            [&](const loom::protocol::Hello& h) {
                if (h.n_vocab < app.tokenizer->n_vocab())
                    std::cerr << "loom-gateway: warning: the engine has " << h.n_vocab << " logits but the vocabulary "
                              << app.tokenizer->n_vocab() << " tokens\n";
                // One line that says the server is ready, with the URL to open.
                std::cerr << "loom-gateway: " << (hellos++ ? "ready again (engine restarted)" : "ready")
                          << " on http://" << host << ":" << bound << " (model '" << app.opts.model_id << "', "
                          << h.engine << " on " << h.backend << ", context " << h.n_ctx
                          << "; the playground is at /)\n";
            },
            [&](const std::string& why) {
                std::cerr << "loom-gateway: the engine did not start: " << why << "\n";
                exit_code = 1;
                io.stop();
            });
    };
    try {
        bound = start_server(io, app);
    } catch (const std::exception& e) {
        std::cerr << "loom-gateway: cannot listen on " << host << ":" << port << ": " << e.what() << "\n";
        app.engine->stop();
        return 1;
    }
    std::cerr << "loom-gateway: listening on http://" << host << ":" << bound << " (model id '" << app.opts.model_id
              << "')\n";
    // Read the model file ahead of the engine (with progress) on a thread of its own, so
    // that /health answers "loading" meanwhile; then start the engine on the io thread.
    std::atomic<bool> cancel_preload{false};
    std::thread preload([&] {
        preload_model(model, stderr, ::isatty(STDERR_FILENO) == 1, cancel_preload);
        if (!cancel_preload) asio::post(io, start_engine);
    });
    // SIGTERM/SIGINT: drain (stop accepting, let requests in flight finish within
    // --shutdown-timeout, then end the engine cleanly); a second signal: stop at once.
    asio::signal_set signals(io, SIGINT, SIGTERM);
    int signals_seen = 0;
    std::function<void()> arm;
    arm = [&] {
        signals.async_wait([&](const boost::system::error_code& ec, int sig) {
            if (ec) return;
            cancel_preload = true;
            if (++signals_seen == 1) {
                asio::co_spawn(io, drain(io, app, sig, shutdown_grace), asio::detached);
                arm();
            } else {
                std::cerr << "loom-gateway: SIG" << sigabbrev_np(sig) << " again: stopping at once\n";
                app.engine->stop();
                exit_code = 1;
                io.stop();
            }
        });
    };
    arm();
    io.run();
    cancel_preload = true;
    preload.join();
    for (auto* pool : {app.prep.get(), app.compile.get()})
        if (pool) {  // a request being prepared ends; its coroutine is destroyed with the io_context
            pool->stop();
            pool->join();
        }
    app.engine->stop();
    return exit_code;
}
