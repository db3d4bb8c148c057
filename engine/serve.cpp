// Serve loop: a reader thread parses input lines; the calling thread schedules.
#include "engine/serve.hpp"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "engine/lifeline.hpp"
#include "engine/sampling_params.hpp"

namespace loom::engine {
namespace {

namespace proto = loom::protocol;

constexpr size_t kMaxLine = 64u << 20;  // longer input lines are refused

// Serialises whole lines (a T and its LP go out in one write and one flush).
class Writer {
public:
    explicit Writer(std::FILE* out) : out_(out) {}
    void lines(std::initializer_list<proto::EngineLine> ls) {
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
    void error(const std::string& id, const std::string& msg) { line(proto::Error{id, msg}); }

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

struct Request {
    proto::Gen gen;
    std::unique_ptr<Sequence> seq;
    SamplingParams params;
    TokenHistory history;
    std::mt19937_64 rng;
    int64_t capacity = 0;
    int64_t max_tokens = 0;
    int64_t generated = 0;
    int32_t last = -1;  // last emitted token, evaluated at the next step
};

// Uniform double in [0, 1) from 53 random bits (identical on every platform).
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

void read_loop(std::FILE* in, Inbox& inbox, Writer& w) {
    char* buf = nullptr;
    size_t cap = 0;
    ssize_t n;
    while ((n = ::getline(&buf, &cap, in)) >= 0) {
        std::string_view line(buf, static_cast<size_t>(n));
        if (line.size() > kMaxLine) {
            w.error("-", "line of " + std::to_string(line.size()) + " bytes exceeds the limit");
            continue;
        }
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank: ignore
        auto parsed = proto::parse_gateway_line(line);
        if (auto* err = std::get_if<proto::ParseError>(&parsed)) {
            w.error(err->id, err->message);
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

class Scheduler {
public:
    Scheduler(Backend& b, Writer& w, const ServeOptions& o) : backend_(b), w_(w), opts_(o) {}

    void run(Inbox& inbox) {
        while (true) {
            std::deque<proto::GatewayLine> lines;
            bool eof;
            {
                std::unique_lock<std::mutex> lock(inbox.mu);
                inbox.cv.wait(lock, [&] {
                    return !inbox.lines.empty() || inbox.eof || !active_.empty() || !waiting_.empty();
                });
                lines.swap(inbox.lines);
                eof = inbox.eof;
            }
            for (auto& l : lines) {
                if (auto* c = std::get_if<proto::Cancel>(&l)) cancel(c->id);
                else accept(std::get<proto::Gen>(std::move(l)));
            }
            admit();
            step();
            if (eof && active_.empty() && waiting_.empty()) return;
        }
    }

private:
    bool in_use(const std::string& id) const {
        for (const auto& r : active_)
            if (r->gen.id == id) return true;
        for (const auto& g : waiting_)
            if (g.id == id) return true;
        return false;
    }

    void accept(proto::Gen g) {
        const ModelInfo& info = backend_.info();
        auto bad_id = [&](const std::vector<int32_t>& ids) {
            return std::any_of(ids.begin(), ids.end(), [&](int32_t t) { return t < 0 || t >= info.n_vocab; });
        };
        std::string err;
        if (in_use(g.id)) err = "request id is already in use";
        else if (bad_id(g.prompt)) err = "prompt token id out of range 0.." + std::to_string(info.n_vocab - 1);
        else if (bad_id(g.allowed)) err = "allowed token id out of range 0.." + std::to_string(info.n_vocab - 1);
        else if (static_cast<int64_t>(g.prompt.size()) > info.n_ctx)
            err = "prompt of " + std::to_string(g.prompt.size()) + " tokens exceeds the context of " +
                  std::to_string(info.n_ctx);
        for (const auto& [id, b] : g.logit_bias)
            if (err.empty() && (id < 0 || id >= info.n_vocab)) err = "logit_bias token id out of range";
        if (!err.empty()) {
            w_.error(g.id, err);
            return;
        }
        waiting_.push_back(std::move(g));
    }

    void cancel(const std::string& id) {
        for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
            if (it->id == id) {
                w_.line(proto::Done{id, "cancelled", static_cast<int64_t>(it->prompt.size()), 0});
                waiting_.erase(it);
                return;
            }
        for (auto it = active_.begin(); it != active_.end(); ++it)
            if ((*it)->gen.id == id) {
                finish(**it, "cancelled");
                active_.erase(it);
                return;
            }
        // Unknown id: the request already ended (its DONE crossed the CANCEL). Ignore.
    }

    void finish(const Request& r, const char* reason) {
        w_.line(proto::Done{r.gen.id, reason, static_cast<int64_t>(r.gen.prompt.size()), r.generated});
    }

    // Starts waiting requests while there is room: allocate, prefill, first token.
    void admit() {
        while (static_cast<int>(active_.size()) < opts_.max_parallel && !waiting_.empty()) {
            auto r = std::make_unique<Request>();
            r->gen = std::move(waiting_.front());
            waiting_.pop_front();
            try {
                start(*r);
            } catch (const std::exception& e) {
                w_.error(r->gen.id, std::string("request failed: ") + e.what());
                continue;
            }
            if (r->seq) active_.push_back(std::move(r));
        }
    }

    void start(Request& r) {
        const ModelInfo& info = backend_.info();
        const proto::Gen& g = r.gen;
        const auto n_prompt = static_cast<int64_t>(g.prompt.size());
        r.max_tokens = g.max_tokens.value_or(info.n_ctx);
        r.capacity = std::min<int64_t>(info.n_ctx, n_prompt + std::max<int64_t>(r.max_tokens, 1));
        r.params = sampling_params_from(g);
        r.history.prompt = g.prompt;
        r.rng.seed(g.seed ? *g.seed : std::random_device{}());

        r.seq = backend_.new_sequence(r.capacity);
        std::vector<SampleResult> scores;
        backend_.eval(*r.seq, g.prompt, g.prompt_logprobs ? &scores : nullptr, g.prompt_logprobs.value_or(0));
        if (g.prompt_logprobs) {
            w_.line(proto::PromptLogprobs{g.id, 0, std::nullopt, {}});
            for (size_t i = 0; i < scores.size(); ++i)
                w_.line(proto::PromptLogprobs{g.id, static_cast<int64_t>(i + 1), scores[i].logprob, scores[i].top});
        }
        if (r.max_tokens == 0 || n_prompt >= info.n_ctx) {
            finish(r, "length");
            r.seq.reset();
            return;
        }
        if (!emit(r)) r.seq.reset();
    }

    // Samples and writes one token; returns false when the request has ended.
    bool emit(Request& r) {
        const SampleResult s = backend_.sample(*r.seq, r.params, r.history, uniform(r.rng));
        if (!r.gen.ignore_eos && std::find(backend_.info().eog.begin(), backend_.info().eog.end(), s.token) !=
                                     backend_.info().eog.end()) {
            finish(r, "stop");
            return false;
        }
        r.history.add_output(s.token);
        ++r.generated;
        r.last = s.token;
        if (r.params.n_logprobs >= 0)
            w_.lines({proto::Token{r.gen.id, s.token}, proto::Logprobs{r.gen.id, s.logprob, s.top}});
        else
            w_.line(proto::Token{r.gen.id, s.token});
        // prompt + completion never exceeds the capacity (<= n_ctx), as the API counts context.
        if (r.generated >= r.max_tokens || static_cast<int64_t>(r.gen.prompt.size()) + r.generated >= r.capacity) {
            finish(r, "length");
            return false;
        }
        return true;
    }

    // One decode step for every active request.
    void step() {
        if (active_.empty()) return;
        std::vector<Sequence*> seqs;
        std::vector<int32_t> toks;
        for (auto& r : active_) {
            seqs.push_back(r->seq.get());
            toks.push_back(r->last);
        }
        try {
            backend_.decode_batch(seqs, toks);
        } catch (const std::exception& e) {
            for (auto& r : active_) w_.error(r->gen.id, std::string("decode failed: ") + e.what());
            active_.clear();
            return;
        }
        for (auto it = active_.begin(); it != active_.end();) {
            bool alive;
            try {
                alive = emit(**it);
            } catch (const std::exception& e) {
                w_.error((*it)->gen.id, std::string("sampling failed: ") + e.what());
                alive = false;
            }
            it = alive ? it + 1 : active_.erase(it);
        }
    }

    Backend& backend_;
    Writer& w_;
    const ServeOptions& opts_;
    std::deque<proto::Gen> waiting_;
    std::vector<std::unique_ptr<Request>> active_;
};

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
    h.max_logprobs = proto::kMaxLogprobs;
    return h;
}

int serve(Backend& backend, std::FILE* in, std::FILE* out, const ServeOptions& opts) {
    Writer w(out);
    w.line(make_hello(backend.info(), opts));
    Inbox inbox;
    std::thread reader([&] { read_loop(in, inbox, w); });
    Scheduler(backend, w, opts).run(inbox);
    reader.join();
    return 0;
}

}  // namespace loom::engine
