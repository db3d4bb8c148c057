// loom-gateway: serves the OpenAI HTTP API and runs an engine child process.
#include <boost/program_options.hpp>

#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>

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

}  // namespace

int main(int argc, char** argv) {
    std::signal(SIGPIPE, SIG_IGN);  // a dead engine or client must not kill the gateway
    std::string model, engine, host, model_id, api_key, engine_log, tool_parser, reasoning_parser;
    int port = 8080, ctx = 0;
    size_t max_body = 8u << 20;
    std::vector<std::string> engine_args;
    po::options_description opts(
        "loom-gateway: an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions,\n"
        "/v1/models, /tokenize, /detokenize, /health) that starts an engine process on a GGUF\n"
        "model, talks to it over the loom engine protocol, and restarts it if it dies.\n\nOptions");
    opts.add_options()
        ("help,h", "print this help and exit")
        ("model,m", po::value(&model), "GGUF model file (required)")
        ("engine", po::value(&engine), "engine executable (default: loom-engine-cpu beside loom-gateway)")
        ("engine-arg", po::value(&engine_args)->composing(), "extra argument for the engine (repeatable), e.g. --engine-arg=--threads=4")
        ("ctx", po::value(&ctx)->default_value(0), "context length passed to the engine (0: the model's)")
        ("host", po::value(&host)->default_value("127.0.0.1"), "address to listen on")
        ("port", po::value(&port)->default_value(8080), "port to listen on (0: any free port)")
        ("model-id", po::value(&model_id), "model id served on /v1/models (default: the file name without .gguf)")
        ("api-key", po::value(&api_key), "require 'Authorization: Bearer <key>' on every endpoint but /health (default: $LOOM_API_KEY, or none)")
        ("max-body", po::value(&max_body)->default_value(8u << 20), "largest request body in bytes (larger: 413)")
        ("engine-log", po::value(&engine_log), "write every protocol line to this file ('> ' sent, '< ' received)")
        ("tool-parser", po::value(&tool_parser)->default_value("auto"),
         ("syntax of the model's tool calls: auto (from its chat template) or one of " + tool_family_names()).c_str())
        ("reasoning-parser", po::value(&reasoning_parser)->default_value("auto"),
         ("syntax of the model's reasoning: auto (from its chat template) or one of " + reasoning_family_names()).c_str());
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
    if (model.empty() || port < 0 || port > 65535 || ctx < 0) {
        std::cerr << "loom-gateway: --model is required (and --port in 0..65535)\n" << opts << "\n";
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
    app.opts.model_id = model_id.empty() ? std::filesystem::path(model).stem().string() : model_id;
    app.created = static_cast<int64_t>(std::time(nullptr));
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
    try {
        app.engine = std::make_unique<EngineClient>(io, cmd);
    } catch (const std::exception& e) {
        std::cerr << "loom-gateway: " << e.what() << "\n";
        return 1;
    }
    int exit_code = 0;
    app.engine->start(
        [&](const loom::protocol::Hello& h) {
            if (h.n_vocab < app.tokenizer->n_vocab())
                std::cerr << "loom-gateway: warning: the engine has " << h.n_vocab << " logits but the vocabulary "
                          << app.tokenizer->n_vocab() << " tokens\n";
            std::cerr << "loom-gateway: engine ready: " << h.engine << " (" << h.backend << "), model " << h.model
                      << ", context " << h.n_ctx << "\n";
        },
        [&](const std::string& why) {
            std::cerr << "loom-gateway: the engine did not start: " << why << "\n";
            exit_code = 1;
            io.stop();
        });
    unsigned short bound = 0;
    try {
        bound = start_server(io, app);
    } catch (const std::exception& e) {
        std::cerr << "loom-gateway: cannot listen on " << host << ":" << port << ": " << e.what() << "\n";
        app.engine->stop();
        return 1;
    }
    std::cerr << "loom-gateway: listening on http://" << host << ":" << bound << " (model id '" << app.opts.model_id
              << "')\n";
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code&, int) {
        app.engine->stop();
        io.stop();
    });
    io.run();
    app.engine->stop();
    return exit_code;
}
