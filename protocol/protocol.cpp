// Formatting and parsing of protocol lines; docs/protocol.md is the spec.
#include "protocol/protocol.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace loom::protocol {
namespace {

// Input quoted in an error message: at most 64 bytes of it, then how long it was (an
// ERR line must not echo a 64 MiB field back).
std::string shown(std::string_view v) {
    constexpr size_t kMax = 64;
    if (v.size() <= kMax) return std::string(v);
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(v[cut]) & 0xC0) == 0x80) --cut;  // a UTF-8 boundary
    return std::string(v.substr(0, cut)) + "... (" + std::to_string(v.size()) + " bytes)";
}

// ----- writing ---------------------------------------------------------------

void require_id(std::string_view id) {
    if (!valid_id(id)) throw std::invalid_argument("invalid request id '" + shown(id) + "'");
}

// Values may hold any byte; bytes that would break the line are percent-encoded (and
// ',' too in an item of a comma-separated list, so the list reads back the same).
std::string encode_value(std::string_view v, bool list_item = false) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : v) {
        if (c <= 0x20 || c == '%' || c == 0x7f || (list_item && c == ',')) {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

template <typename T>
std::string join_ints(const std::vector<T>& v) {
    std::string out;
    for (size_t k = 0; k < v.size(); ++k) {
        if (k) out += ',';
        out += std::to_string(v[k]);
    }
    return out;
}

void append_pairs(std::string& out, const std::vector<TokenLogprob>& top) {
    for (const auto& [tok, lp] : top) {
        out += ' ';
        out += std::to_string(tok);
        out += ':';
        out += format_float(lp);
    }
}

// Grammar kinds: 1..32 bytes of [a-z0-9_].
bool valid_grammar_kind(std::string_view k) {
    if (k.empty() || k.size() > 32) return false;
    return std::all_of(k.begin(), k.end(),
                       [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

std::string format_one(const Hello& h) {
    std::string s = "HELLO loom/" + std::to_string(h.version);
    s += " engine=" + encode_value(h.engine);
    s += " backend=" + encode_value(h.backend);
    s += " model=" + encode_value(h.model);
    s += " n_vocab=" + std::to_string(h.n_vocab);
    s += " n_ctx=" + std::to_string(h.n_ctx);
    s += " bos=" + std::to_string(h.bos);
    s += " eos=" + std::to_string(h.eos);
    s += " eog=" + join_ints(h.eog);
    std::string caps;
    for (size_t k = 0; k < h.caps.size(); ++k) {
        if (k) caps += ',';
        caps += encode_value(h.caps[k], true);
    }
    s += " caps=" + caps;
    s += " max_logprobs=" + std::to_string(h.max_logprobs);
    return s;
}
std::string format_one(const Token& t) {
    require_id(t.id);
    return "T " + t.id + " " + std::to_string(t.token);
}
std::string format_one(const Logprobs& l) {
    require_id(l.id);
    std::string s = "LP " + l.id + " " + format_float(l.logprob);
    append_pairs(s, l.top);
    return s;
}
std::string format_one(const PromptLogprobs& p) {
    require_id(p.id);
    std::string s =
        "PLP " + p.id + " " + std::to_string(p.index) + " " + (p.logprob ? format_float(*p.logprob) : std::string("-"));
    append_pairs(s, p.top);
    return s;
}
std::string format_one(const Done& d) {
    require_id(d.id);
    if (!valid_id(d.finish)) throw std::invalid_argument("invalid finish reason");
    return "DONE " + d.id + " " + d.finish + " prompt_tokens=" + std::to_string(d.prompt_tokens) +
           " completion_tokens=" + std::to_string(d.completion_tokens) +
           (d.cached_tokens > 0 ? " cached_tokens=" + std::to_string(d.cached_tokens) : std::string());
}
std::string format_one(const Error& e) {
    if (e.id != "-") require_id(e.id);
    // Line breaks become spaces and leading blanks go (a reader skips them), so the
    // message reads back exactly as written.
    std::string msg = e.message;
    std::replace_if(
        msg.begin(), msg.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
    msg.erase(0, std::min(msg.size(), msg.find_first_not_of(" \t")));
    if (msg.empty()) msg = "error";
    return "ERR " + e.id + " " + msg;
}
std::string format_one(const Pong& p) {
    if (!valid_id(p.token)) throw std::invalid_argument("invalid PONG token");
    return "PONG " + p.token;
}
std::string format_one(const Ping& p) {
    if (!valid_id(p.token)) throw std::invalid_argument("invalid PING token");
    return "PING " + p.token;
}
std::string format_one(const Gen& g) {
    require_id(g.id);
    if (g.prompt.empty()) throw std::invalid_argument("GEN needs a non-empty prompt");
    std::string s = "GEN " + g.id + " prompt=" + join_ints(g.prompt);
    if (g.max_tokens) s += " max_tokens=" + std::to_string(*g.max_tokens);
    s += " temperature=" + format_float(g.temperature);
    if (g.top_k != 0) s += " top_k=" + std::to_string(g.top_k);
    if (g.top_p != 1.0f) s += " top_p=" + format_float(g.top_p);
    if (g.min_p != 0.0f) s += " min_p=" + format_float(g.min_p);
    if (g.seed) s += " seed=" + std::to_string(*g.seed);
    if (g.logprobs) s += " logprobs=" + std::to_string(*g.logprobs);
    if (g.prompt_logprobs) s += " prompt_logprobs=" + std::to_string(*g.prompt_logprobs);
    if (!g.allowed.empty()) s += " allowed=" + join_ints(g.allowed);
    if (g.presence_penalty != 0.0f) s += " presence_penalty=" + format_float(g.presence_penalty);
    if (g.frequency_penalty != 0.0f) s += " frequency_penalty=" + format_float(g.frequency_penalty);
    if (g.repetition_penalty != 1.0f) s += " repetition_penalty=" + format_float(g.repetition_penalty);
    if (!g.logit_bias.empty()) {
        s += " logit_bias=";
        for (size_t k = 0; k < g.logit_bias.size(); ++k) {
            if (k) s += ',';
            s += std::to_string(g.logit_bias[k].first);
            s += ':';
            s += format_float(g.logit_bias[k].second);
        }
    }
    if (g.processed_logprobs) s += " logprobs_mode=processed";
    if (g.ignore_eos) s += " ignore_eos=1";
    if (g.grammar) {
        if (!valid_grammar_kind(g.grammar->kind))
            throw std::invalid_argument("invalid grammar kind '" + g.grammar->kind + "'");
        s += " grammar=" + g.grammar->kind + ":" + base64_encode(g.grammar->source);
        const GrammarSpec& r = *g.grammar;
        if (r.reasoning_close.empty() && !r.reasoning_open.empty())
            throw std::invalid_argument("a grammar's reasoning open marker without a close marker");
        if (!r.reasoning_close.empty())
            s += " grammar_reasoning=" + (r.reasoning_open.empty() ? "" : base64_encode(r.reasoning_open) + ",") +
                 base64_encode(r.reasoning_close);
    }
    return s;
}
std::string format_one(const Cancel& c) {
    require_id(c.id);
    return "CANCEL " + c.id;
}

// ----- reading ---------------------------------------------------------------

struct Bad {
    std::string message;
};

std::vector<std::string_view> split(std::string_view line) {
    std::vector<std::string_view> out;
    size_t k = 0;
    while (k < line.size()) {
        while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
        size_t e = k;
        while (e < line.size() && line[e] != ' ' && line[e] != '\t') ++e;
        if (e > k) out.push_back(line.substr(k, e - k));
        k = e;
    }
    return out;
}

template <typename T>
T parse_int(std::string_view s, std::string_view what) {
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty())
        throw Bad{std::string(what) + ": '" + shown(s) + "' is not an integer in range"};
    return v;
}

float parse_float(std::string_view s, std::string_view what, bool allow_neg_inf = false) {
    float v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty())
        throw Bad{std::string(what) + ": '" + shown(s) + "' is not a number"};
    if (std::isnan(v) || (std::isinf(v) && !(allow_neg_inf && v < 0)))
        throw Bad{std::string(what) + ": '" + shown(s) + "' is not finite"};
    return v;
}

std::vector<TokenId> parse_ids(std::string_view s, std::string_view what) {
    std::vector<TokenId> out;
    if (s.empty()) return out;
    size_t k = 0;
    while (true) {
        size_t e = s.find(',', k);
        std::string_view part = s.substr(k, e == std::string_view::npos ? std::string_view::npos : e - k);
        TokenId id = parse_int<TokenId>(part, what);
        if (id < 0) throw Bad{std::string(what) + ": token id " + std::to_string(id) + " is negative"};
        out.push_back(id);
        if (e == std::string_view::npos) break;
        k = e + 1;
    }
    return out;
}

std::string decode_value(std::string_view v) {
    std::string out;
    for (size_t k = 0; k < v.size(); ++k) {
        if (v[k] == '%' && k + 2 < v.size()) {
            auto hexv = [](char c) -> int {
                if (c >= '0' && c <= '9') return c - '0';
                if (c >= 'A' && c <= 'F') return c - 'A' + 10;
                if (c >= 'a' && c <= 'f') return c - 'a' + 10;
                return -1;
            };
            int hi = hexv(v[k + 1]), lo = hexv(v[k + 2]);
            if (hi >= 0 && lo >= 0) {
                out += static_cast<char>(hi * 16 + lo);
                k += 2;
                continue;
            }
        }
        out += v[k];
    }
    return out;
}

// key=value fields after the fixed ones. Duplicate keys are an error.
std::vector<std::pair<std::string_view, std::string_view>> fields(const std::vector<std::string_view>& parts,
                                                                  size_t from) {
    std::vector<std::pair<std::string_view, std::string_view>> out;
    for (size_t k = from; k < parts.size(); ++k) {
        size_t eq = parts[k].find('=');
        if (eq == std::string_view::npos || eq == 0) throw Bad{"field '" + shown(parts[k]) + "' is not key=value"};
        std::string_view key = parts[k].substr(0, eq);
        for (const auto& f : out)
            if (f.first == key) throw Bad{"duplicate key '" + shown(key) + "'"};
        out.emplace_back(key, parts[k].substr(eq + 1));
    }
    return out;
}

std::vector<TokenLogprob> parse_pairs(const std::vector<std::string_view>& parts, size_t from) {
    std::vector<TokenLogprob> out;
    for (size_t k = from; k < parts.size(); ++k) {
        size_t c = parts[k].rfind(':');
        if (c == std::string_view::npos) throw Bad{"'" + shown(parts[k]) + "' is not token:logprob"};
        TokenId t = parse_int<TokenId>(parts[k].substr(0, c), "token");
        if (t < 0) throw Bad{"negative token id"};
        out.emplace_back(t, parse_float(parts[k].substr(c + 1), "logprob", true));
    }
    return out;
}

void need_parts(const std::vector<std::string_view>& parts, size_t n, std::string_view verb) {
    if (parts.size() < n) throw Bad{shown(verb) + " has too few fields"};
}

// The token of a PING or PONG line (`<verb> <token>`, nothing after it).
std::string lone_token(const std::vector<std::string_view>& parts, std::string_view verb) {
    if (!valid_id(parts[1])) throw Bad{"invalid " + std::string(verb) + " token"};
    if (parts.size() > 2) throw Bad{std::string(verb) + " takes only a token"};
    return std::string(parts[1]);
}

std::string id_of(const std::vector<std::string_view>& parts) {
    if (parts.size() >= 2 && valid_id(parts[1])) return std::string(parts[1]);
    return "-";
}

EngineLine parse_engine(const std::vector<std::string_view>& parts) {
    const std::string_view verb = parts[0];
    if (verb == "HELLO") {
        need_parts(parts, 2, verb);
        Hello h;
        if (parts[1].substr(0, 5) != "loom/") throw Bad{"HELLO must start with loom/<version>"};
        h.version = parse_int<int>(parts[1].substr(5), "version");
        for (auto [k, v] : fields(parts, 2)) {
            if (k == "engine") h.engine = decode_value(v);
            else if (k == "backend") h.backend = decode_value(v);
            else if (k == "model") h.model = decode_value(v);
            else if (k == "n_vocab") h.n_vocab = parse_int<int64_t>(v, k);
            else if (k == "n_ctx") h.n_ctx = parse_int<int64_t>(v, k);
            else if (k == "bos") h.bos = parse_int<TokenId>(v, k);
            else if (k == "eos") h.eos = parse_int<TokenId>(v, k);
            else if (k == "eog") h.eog = parse_ids(v, k);
            else if (k == "max_logprobs") h.max_logprobs = parse_int<int>(v, k);
            else if (k == "caps") {
                h.caps.clear();
                size_t s = 0;
                while (s <= v.size() && !v.empty()) {
                    size_t e = v.find(',', s);
                    std::string_view c = v.substr(s, e == std::string_view::npos ? std::string_view::npos : e - s);
                    if (!c.empty()) h.caps.push_back(decode_value(c));
                    if (e == std::string_view::npos) break;
                    s = e + 1;
                }
            }
        }
        return h;
    }
    need_parts(parts, 2, verb);
    if (verb == "PONG") return Pong{lone_token(parts, verb)};
    if (!valid_id(parts[1])) throw Bad{"invalid request id '" + shown(parts[1]) + "'"};
    const std::string id(parts[1]);
    if (verb == "T") {
        need_parts(parts, 3, verb);
        if (parts.size() > 3) throw Bad{"T has extra fields"};
        TokenId t = parse_int<TokenId>(parts[2], "token");
        if (t < 0) throw Bad{"negative token id"};
        return Token{id, t};
    }
    if (verb == "LP") {
        need_parts(parts, 3, verb);
        return Logprobs{id, parse_float(parts[2], "logprob", true), parse_pairs(parts, 3)};
    }
    if (verb == "PLP") {
        need_parts(parts, 4, verb);
        PromptLogprobs p{id, parse_int<int64_t>(parts[2], "index"), std::nullopt, {}};
        if (parts[3] != "-") p.logprob = parse_float(parts[3], "logprob", true);
        p.top = parse_pairs(parts, 4);
        return p;
    }
    if (verb == "DONE") {
        need_parts(parts, 3, verb);
        if (!valid_id(parts[2])) throw Bad{"invalid finish reason '" + shown(parts[2]) + "'"};
        Done d{id, std::string(parts[2]), 0, 0, 0};
        for (auto [k, v] : fields(parts, 3)) {
            if (k == "prompt_tokens") d.prompt_tokens = parse_int<int64_t>(v, k);
            else if (k == "completion_tokens") d.completion_tokens = parse_int<int64_t>(v, k);
            else if (k == "cached_tokens") d.cached_tokens = parse_int<int64_t>(v, k);
        }
        return d;
    }
    throw Bad{"unknown line type '" + shown(verb) + "'"};
}

GatewayLine parse_gateway(const std::vector<std::string_view>& parts) {
    const std::string_view verb = parts[0];
    if (verb != "GEN" && verb != "CANCEL" && verb != "PING") throw Bad{"unknown command '" + shown(verb) + "'"};
    need_parts(parts, 2, verb);
    if (verb == "PING") return Ping{lone_token(parts, verb)};
    if (!valid_id(parts[1])) throw Bad{"invalid request id '" + shown(parts[1]) + "'"};
    const std::string id(parts[1]);
    if (verb == "CANCEL") {
        if (parts.size() > 2) throw Bad{"CANCEL takes only an id"};
        return Cancel{id};
    }
    Gen g;
    g.id = id;
    bool have_prompt = false;
    std::optional<std::pair<std::string, std::string>> reasoning;  // grammar_reasoning=: open, close
    for (auto [k, v] : fields(parts, 2)) {
        if (k == "prompt") {
            g.prompt = parse_ids(v, k);
            have_prompt = true;
        } else if (k == "max_tokens") {
            g.max_tokens = parse_int<int64_t>(v, k);
            if (*g.max_tokens < 0) throw Bad{"max_tokens must be >= 0"};
        } else if (k == "temperature") {
            g.temperature = parse_float(v, k);
            if (g.temperature < 0) throw Bad{"temperature must be >= 0"};
        } else if (k == "top_k") {
            g.top_k = parse_int<int32_t>(v, k);
            if (g.top_k < 0) throw Bad{"top_k must be >= 0"};
        } else if (k == "top_p") {
            g.top_p = parse_float(v, k);
            if (!(g.top_p > 0 && g.top_p <= 1)) throw Bad{"top_p must be in (0, 1]"};
        } else if (k == "min_p") {
            g.min_p = parse_float(v, k);
            if (!(g.min_p >= 0 && g.min_p <= 1)) throw Bad{"min_p must be in [0, 1]"};
        } else if (k == "seed") {
            g.seed = parse_int<uint64_t>(v, k);
        } else if (k == "logprobs" || k == "prompt_logprobs") {
            int n = parse_int<int>(v, k);
            if (n < 0 || n > kMaxLogprobs) throw Bad{std::string(k) + " must be in 0.." + std::to_string(kMaxLogprobs)};
            (k == "logprobs" ? g.logprobs : g.prompt_logprobs) = n;
        } else if (k == "allowed") {
            g.allowed = parse_ids(v, k);
            if (g.allowed.empty()) throw Bad{"allowed must name at least one token"};
        } else if (k == "presence_penalty") {
            g.presence_penalty = parse_float(v, k);
        } else if (k == "frequency_penalty") {
            g.frequency_penalty = parse_float(v, k);
        } else if (k == "repetition_penalty") {
            g.repetition_penalty = parse_float(v, k);
            if (g.repetition_penalty <= 0) throw Bad{"repetition_penalty must be > 0"};
        } else if (k == "logit_bias") {
            size_t s = 0;
            while (!v.empty()) {
                size_t e = v.find(',', s);
                std::string_view item = v.substr(s, e == std::string_view::npos ? std::string_view::npos : e - s);
                size_t c = item.find(':');
                if (c == std::string_view::npos) throw Bad{"logit_bias item '" + shown(item) + "' is not id:bias"};
                TokenId t = parse_int<TokenId>(item.substr(0, c), k);
                if (t < 0) throw Bad{"logit_bias: negative token id"};
                g.logit_bias.emplace_back(t, parse_float(item.substr(c + 1), k));
                if (e == std::string_view::npos) break;
                s = e + 1;
            }
        } else if (k == "logprobs_mode") {
            if (v == "processed") g.processed_logprobs = true;
            else if (v == "raw") g.processed_logprobs = false;
            else throw Bad{"logprobs_mode must be raw or processed"};
        } else if (k == "ignore_eos") {
            g.ignore_eos = parse_int<int>(v, k) != 0;
        } else if (k == "grammar") {
            const size_t colon = v.find(':');
            if (colon == std::string_view::npos) throw Bad{"grammar must be <kind>:<base64 of the source>"};
            const std::string_view kind = v.substr(0, colon);
            if (!valid_grammar_kind(kind))
                throw Bad{"grammar kind '" + std::string(kind) + "' is not 1..32 bytes of [a-z0-9_]"};
            auto source = base64_decode(v.substr(colon + 1));
            if (!source) throw Bad{"grammar source is not base64"};
            g.grammar = GrammarSpec{std::string(kind), std::move(*source)};
        } else if (k == "grammar_reasoning") {
            const size_t comma = v.find(',');
            auto open =
                comma == std::string_view::npos ? std::optional<std::string>("") : base64_decode(v.substr(0, comma));
            auto close = base64_decode(comma == std::string_view::npos ? v : v.substr(comma + 1));
            if (!open || !close || close->empty() || (comma != std::string_view::npos && open->empty()))
                throw Bad{"grammar_reasoning must be [<base64 of the open marker>,]<base64 of the close marker>"};
            reasoning = {std::move(*open), std::move(*close)};
        }
        // Unknown keys are skipped (forward compatibility).
    }
    if (!have_prompt || g.prompt.empty()) throw Bad{"GEN needs a non-empty prompt=<ids>"};
    if (reasoning) {
        if (!g.grammar) throw Bad{"grammar_reasoning needs grammar="};
        g.grammar->reasoning_open = std::move(reasoning->first);
        g.grammar->reasoning_close = std::move(reasoning->second);
    }
    return g;
}

template <typename Line, typename Fn>
std::variant<Line, ParseError> parse_with(std::string_view line, Fn fn) {
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    auto parts = split(line);
    if (parts.empty()) return ParseError{"-", "empty line"};
    if constexpr (std::is_same_v<Line, EngineLine>) {
        if (parts[0] == "ERR") {
            if (parts.size() < 2) return ParseError{"-", "ERR needs an id"};
            if (parts[1] != "-" && !valid_id(parts[1])) return ParseError{"-", "invalid request id"};
            // The message is the rest of the line after "ERR <id> ".
            size_t at = line.find(parts[1], 3) + parts[1].size();
            while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
            return Line{Error{std::string(parts[1]), std::string(line.substr(at))}};
        }
    }
    try {
        return Line{fn(parts)};
    } catch (const Bad& b) { return ParseError{id_of(parts), b.message}; }
}

}  // namespace

bool Hello::has_cap(std::string_view c) const { return std::find(caps.begin(), caps.end(), c) != caps.end(); }

bool valid_id(std::string_view id) {
    if (id.empty() || id.size() > 64) return false;
    return std::all_of(id.begin(), id.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
    });
}

std::string base64_encode(std::string_view bytes) {
    static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (size_t i = 0; i < bytes.size(); i += 3) {
        const size_t n = std::min<size_t>(3, bytes.size() - i);
        uint32_t w = 0;
        for (size_t j = 0; j < 3; ++j) w = (w << 8) | (j < n ? static_cast<unsigned char>(bytes[i + j]) : 0u);
        for (size_t j = 0; j < 4; ++j) out += j <= n ? abc[(w >> (18 - 6 * j)) & 63] : '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
    auto value = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+') return 62;
        if (c == '/') return 63;
        return -1;
    };
    if (text.size() % 4 != 0) return std::nullopt;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        size_t pad = 0;
        if (last) pad = static_cast<size_t>(text[i + 3] == '=') + static_cast<size_t>(text[i + 2] == '=');
        if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=y=" style
        uint32_t w = 0;
        for (size_t j = 0; j < 4; ++j) {
            const int v = j < 4 - pad ? value(text[i + j]) : 0;
            if (v < 0) return std::nullopt;
            w = (w << 6) | static_cast<uint32_t>(v);
        }
        // Canonical: the bits that padding drops are zero.
        if ((pad == 1 && (w & 0xff) != 0) || (pad == 2 && (w & 0xffff) != 0)) return std::nullopt;
        for (size_t j = 0; j < 3 - pad; ++j) out += static_cast<char>((w >> (16 - 8 * j)) & 0xff);
    }
    return out;
}

std::string format_float(float v) {
    if (std::isnan(v)) throw std::invalid_argument("NaN cannot be written to the protocol");
    if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
    char buf[32];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
    (void)ec;
    return std::string(buf, p);
}

std::string format(const EngineLine& line) {
    return std::visit([](const auto& l) { return format_one(l); }, line);
}

std::string format(const GatewayLine& line) {
    return std::visit([](const auto& l) { return format_one(l); }, line);
}

std::variant<EngineLine, ParseError> parse_engine_line(std::string_view line) {
    return parse_with<EngineLine>(line, parse_engine);
}

std::variant<GatewayLine, ParseError> parse_gateway_line(std::string_view line) {
    return parse_with<GatewayLine>(line, parse_gateway);
}

}  // namespace loom::protocol
