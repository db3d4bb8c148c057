// Serve loop: a reader thread parses input lines; the calling thread schedules and steps.
#include "engine/serve.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "engine/lifeline.hpp"
#include "engine/sampling_params.hpp"
#include "engine/scheduler.hpp"

namespace loom::engine {
namespace {

namespace proto = loom::protocol;

constexpr size_t kMaxLine = 64u << 20;  // longer input lines are refused
// Output pipe buffer asked for: one step of 256 rows with top-20 logprobs writes about 100 KB,
// more than a pipe's default 64 KiB, and a full pipe stalls the step loop until the reader drains
// it. 1 MiB is Linux's default /proc/sys/fs/pipe-max-size.
constexpr int kPipeBytes = 1 << 20;

// Serialises whole batches of lines: each write is one fwrite and one flush, so a T and its
// LP (and every line of one step) go out together.
class Writer {
public:
    explicit Writer(std::FILE* out) : out_(out) {}
    void lines(const std::vector<proto::EngineLine>& ls) {
        if (ls.empty()) return;
        std::string buf;
        for (const auto& l : ls) {
            buf += proto::format(l);
            buf += '\n';
        }
        std::lock_guard<std::mutex> lock(mu_);
        errno = 0;
        if (std::fwrite(buf.data(), 1, buf.size(), out_) != buf.size() || std::fflush(out_) != 0)
            output_lost(errno);  // the reader of our output is gone: stop at once
    }
    void line(const proto::EngineLine& l) { lines({l}); }

private:
    std::FILE* out_;
    std::mutex mu_;
};

struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<proto::GatewayLine> lines;
    bool eof = false;
};

void read_loop(std::FILE* in, Inbox& inbox, Writer& w) {
    char* buf = nullptr;
    size_t cap = 0;
    ssize_t n;
    while ((n = ::getline(&buf, &cap, in)) >= 0) {
        std::string_view line(buf, static_cast<size_t>(n));
        if (line.size() > kMaxLine) {
            w.line(proto::Error{"-", "line of " + std::to_string(line.size()) + " bytes exceeds the limit"});
            continue;
        }
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank: ignore
        auto parsed = proto::parse_gateway_line(line);
        if (auto* err = std::get_if<proto::ParseError>(&parsed)) {
            w.line(proto::Error{err->id, err->message});
            continue;
        }
        auto& gl = std::get<proto::GatewayLine>(parsed);
        if (auto* ping = std::get_if<proto::Ping>(&gl)) {  // answered here, whatever the scheduler does
            w.line(proto::Pong{ping->token});
            continue;
        }
        std::lock_guard<std::mutex> lock(inbox.mu);
        inbox.lines.push_back(std::move(gl));
        inbox.cv.notify_one();
    }
    std::free(buf);
    std::lock_guard<std::mutex> lock(inbox.mu);
    inbox.eof = true;
    inbox.cv.notify_one();
}

// A GEN line's fields as the scheduler takes them.
SeqRequest to_request(proto::Gen g) {
    SeqRequest r;
    r.params = sampling_params_from(g);
    r.id = std::move(g.id);
    r.prompt = std::move(g.prompt);
    r.max_tokens = g.max_tokens;
    r.seed = g.seed;
    r.prompt_logprobs = g.prompt_logprobs;
    r.ignore_eos = g.ignore_eos;
    r.grammar = std::move(g.grammar);
    return r;
}

void write_stats(std::FILE* f, const std::string& name, const SchedulerStats& s) {
    std::fprintf(f,
                 "%s: steps=%lld preemptions=%lld prompt_tokens=%lld generated_tokens=%lld "
                 "prefix_query_tokens=%lld prefix_hit_tokens=%lld kv_blocks=%lld kv_touched_blocks=%lld "
                 "kv_cached_blocks=%lld kv_evictions=%lld\n",
                 name.c_str(), static_cast<long long>(s.steps), static_cast<long long>(s.preemptions),
                 static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.generated_tokens),
                 static_cast<long long>(s.prefix_query_tokens), static_cast<long long>(s.prefix_hit_tokens),
                 static_cast<long long>(s.kv.n_blocks), static_cast<long long>(s.kv.touched_blocks),
                 static_cast<long long>(s.kv.cached_blocks), static_cast<long long>(s.kv.evictions));
    std::fflush(f);
}

}  // namespace

protocol::Hello make_hello(const ModelInfo& info, const ServeOptions& opts) {
    proto::Hello h;
    h.engine = opts.engine_name;
    h.backend = info.backend;
    h.model = info.name;
    h.n_vocab = info.n_vocab;
    h.n_ctx = info.n_ctx;
    h.bos = info.bos;
    h.eos = info.eos;
    h.eog = info.eog;
    h.caps = opts.caps;
    // Grammars need the backend's token bytes (ModelInfo::vocab_bytes).
    if (info.vocab_bytes && std::find(h.caps.begin(), h.caps.end(), proto::cap::kGrammar) == h.caps.end())
        h.caps.push_back(proto::cap::kGrammar);
    h.max_logprobs = proto::kMaxLogprobs;
    return h;
}

int serve(Backend& backend, std::FILE* in, std::FILE* out, const ServeOptions& opts) {
#if defined(F_SETPIPE_SZ)
    (void)::fcntl(::fileno(out), F_SETPIPE_SZ, kPipeBytes);  // fails harmlessly on a file or a terminal
#endif
    Scheduler sched(backend, {opts.max_parallel, opts.max_batch_tokens});
    Writer w(out);
    w.line(make_hello(sched.info(), opts));
    Inbox inbox;
    std::thread reader([&] { read_loop(in, inbox, w); });

    Scheduler::Lines lines;
    StepOutput result;
    while (true) {
        std::deque<proto::GatewayLine> batch;
        bool eof;
        {
            std::unique_lock<std::mutex> lock(inbox.mu);
            inbox.cv.wait(lock, [&] { return !inbox.lines.empty() || inbox.eof || sched.has_work(); });
            batch.swap(inbox.lines);
            eof = inbox.eof;
        }
        for (auto& l : batch) {
            if (auto* c = std::get_if<proto::Cancel>(&l)) sched.cancel(c->id, lines);
            else sched.submit(to_request(std::get<proto::Gen>(std::move(l))), lines);
        }
        sched.run_step(result, lines);  // the grammar masks are built while the device runs the forward pass
        w.lines(lines);
        lines.clear();
        if (eof && batch.empty() && !sched.has_work()) break;
    }
    reader.join();
    if (opts.stats) write_stats(opts.stats, opts.engine_name, sched.stats());
    return 0;
}

}  // namespace loom::engine
