// Validation of OpenAI request bodies; see request_parser.hpp.
#include "gateway/request_parser.hpp"

#include <rapidjson/error/en.h>

#include <cmath>
#include <limits>

namespace loom::gateway {
namespace {

using rapidjson::Value;

[[noreturn]] void bad(const std::string& param, const std::string& msg, const std::string& code = {}) {
    throw ApiError(400, msg, param, code);
}

const Value* field(const Value& obj, const char* name) {
    auto it = obj.FindMember(name);
    if (it == obj.MemberEnd() || it->value.IsNull()) return nullptr;
    return &it->value;
}

double number(const Value& obj, const char* name, double fallback, double lo, double hi) {
    const Value* v = field(obj, name);
    if (!v) return fallback;
    if (!v->IsNumber()) bad(name, std::string("'") + name + "' must be a number");
    const double d = v->GetDouble();
    if (!(d >= lo && d <= hi))
        bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                      ", got " + std::to_string(d));
    return d;
}

std::optional<int64_t> integer(const Value& obj, const char* name, int64_t lo, int64_t hi) {
    const Value* v = field(obj, name);
    if (!v) return std::nullopt;
    if (!v->IsInt64() && !(v->IsDouble() && std::floor(v->GetDouble()) == v->GetDouble() &&
                           std::fabs(v->GetDouble()) < 9e15))
        bad(name, std::string("'") + name + "' must be an integer");
    const int64_t i = v->IsInt64() ? v->GetInt64() : static_cast<int64_t>(v->GetDouble());
    if (i < lo || i > hi)
        bad(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                      ", got " + std::to_string(i));
    return i;
}

bool boolean(const Value& obj, const char* name, bool fallback) {
    const Value* v = field(obj, name);
    if (!v) return fallback;
    if (!v->IsBool()) bad(name, std::string("'") + name + "' must be a boolean");
    return v->GetBool();
}

int32_t token_id(const Value& v, const std::string& param, const ModelContext& ctx) {
    if (!v.IsInt64()) bad(param, "'" + param + "' must hold integer token ids");
    const int64_t id = v.GetInt64();
    if (id < 0 || id >= ctx.tokenizer->n_vocab())
        bad(param, "token id " + std::to_string(id) + " in '" + param + "' is outside the vocabulary (0.." +
                       std::to_string(ctx.tokenizer->n_vocab() - 1) + ")");
    return static_cast<int32_t>(id);
}

std::vector<int32_t> id_array(const Value& v, const std::string& param, const ModelContext& ctx) {
    std::vector<int32_t> out;
    for (const Value& e : v.GetArray()) out.push_back(token_id(e, param, ctx));
    return out;
}

bool all_ints(const Value& arr) {
    for (const Value& e : arr.GetArray())
        if (!e.IsInt64()) return false;
    return true;
}

std::vector<std::vector<int32_t>> completion_prompts(const Value& body, const ModelContext& ctx) {
    const Value* p = field(body, "prompt");
    if (!p) bad("prompt", "'prompt' is required");
    const model::Tokenizer& tok = *ctx.tokenizer;
    auto encode = [&](const Value& s) { return tok.encode(std::string_view(s.GetString(), s.GetStringLength()), true, true); };
    std::vector<std::vector<int32_t>> out;
    if (p->IsString()) {
        out.push_back(encode(*p));
    } else if (p->IsArray() && !p->Empty()) {
        const Value& first = (*p)[0];
        if (first.IsString()) {
            for (const Value& s : p->GetArray()) {
                if (!s.IsString()) bad("prompt", "'prompt' array must hold only strings, or only token ids");
                out.push_back(encode(s));
            }
        } else if (first.IsInt64() && all_ints(*p)) {
            out.push_back(id_array(*p, "prompt", ctx));
        } else if (first.IsArray()) {
            for (const Value& a : p->GetArray()) {
                if (!a.IsArray() || a.Empty() || !all_ints(a))
                    bad("prompt", "'prompt' arrays of token ids must be non-empty arrays of integers");
                out.push_back(id_array(a, "prompt", ctx));
            }
        } else {
            bad("prompt", "'prompt' must be a string, an array of strings, an array of token ids, or an array of "
                          "arrays of token ids");
        }
    } else {
        bad("prompt", "'prompt' must be a string, an array of strings, an array of token ids, or an array of arrays "
                      "of token ids (not empty)");
    }
    if (out.size() > 64) bad("prompt", "at most 64 prompts per request");
    for (const auto& ids : out)
        if (ids.empty()) bad("prompt", "the prompt is empty after tokenization");
    return out;
}

std::vector<std::string> stops(const Value& body) {
    const Value* s = field(body, "stop");
    std::vector<std::string> out;
    if (!s) return out;
    if (s->IsString()) {
        out.emplace_back(s->GetString(), s->GetStringLength());
    } else if (s->IsArray()) {
        if (s->Size() > 4) bad("stop", "'stop' takes at most 4 sequences");
        for (const Value& e : s->GetArray()) {
            if (!e.IsString()) bad("stop", "'stop' must be a string or an array of strings");
            out.emplace_back(e.GetString(), e.GetStringLength());
        }
    } else {
        bad("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& x : out)
        if (x.empty()) bad("stop", "stop sequences must not be empty");
    return out;
}

}  // namespace

void validate_messages(const rapidjson::Value& msgs) {
    using rapidjson::Value;
    if (!msgs.IsArray() || msgs.Empty()) bad("messages", "'messages' must be a non-empty array");
    size_t i = 0;
    for (const Value& m : msgs.GetArray()) {
        const std::string where = "messages[" + std::to_string(i++) + "]";
        if (!m.IsObject()) bad(where, where + " must be an object");
        const Value* role = field(m, "role");
        if (!role || !role->IsString()) bad(where + ".role", where + ".role must be a string");
        const std::string r = role->GetString();
        if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
            bad(where + ".role", where + ".role must be one of system, developer, user, assistant, tool; got '" + r + "'");
        const Value* content = field(m, "content");
        if (content && !content->IsString() && !content->IsArray())
            bad(where + ".content", where + ".content must be a string or an array of content parts");
        if (content && content->IsArray())
            for (const Value& part : content->GetArray()) {
                const Value* type = part.IsObject() ? field(part, "type") : nullptr;
                if (!type || !type->IsString() || std::string(type->GetString()) != "text" || !field(part, "text") ||
                    !(*field(part, "text")).IsString())
                    bad(where + ".content", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
            }
        if (!content && !(r == "assistant" && field(m, "tool_calls")))
            bad(where + ".content", where + ".content is required");
    }
}

GenerationRequest parse_generation_request(std::string_view body_text, Endpoint endpoint, const ModelContext& ctx) {
    rapidjson::Document doc;
    doc.Parse(body_text.data(), body_text.size());
    if (doc.HasParseError())
        bad("", std::string("the request body is not valid JSON: ") + rapidjson::GetParseError_En(doc.GetParseError()) +
                    " (at byte " + std::to_string(doc.GetErrorOffset()) + ")");
    if (!doc.IsObject()) bad("", "the request body must be a JSON object");
    const Value& body = doc;
    GenerationRequest r;
    r.endpoint = endpoint;
    const bool chat = endpoint == Endpoint::ChatCompletions;

    const Value* model = field(body, "model");
    if (!model || !model->IsString()) bad("model", "'model' is required and must be a string");
    r.model = model->GetString();
    if (r.model != ctx.model_id)
        throw ApiError(404, "The model '" + r.model + "' does not exist; this server serves '" + ctx.model_id + "'",
                       "model", "model_not_found");

    r.n = static_cast<int>(integer(body, "n", 1, 128).value_or(1));
    if (auto b = integer(body, "best_of", 1, 128); b && *b != r.n) bad("best_of", "'best_of' must equal 'n' if given");

    auto& g = r.sampling;
    g.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0));
    g.top_p = static_cast<float>(number(body, "top_p", 1.0, 0.0, 1.0));
    if (g.top_p <= 0.0f) bad("top_p", "'top_p' must be greater than 0");
    const int64_t top_k = integer(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0);
    g.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
    g.min_p = static_cast<float>(number(body, "min_p", 0.0, 0.0, 1.0));
    if (const Value* sv = field(body, "seed"); sv && sv->IsUint64())  // 64-bit seeds above INT64_MAX too
        g.seed = sv->GetUint64();
    else if (auto s = integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        g.seed = static_cast<uint64_t>(*s);
    g.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0.0, -2.0, 2.0));
    g.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
    g.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 1.0, 1e-3, 100.0));

    if (const Value* lb = field(body, "logit_bias")) {
        if (!lb->IsObject()) bad("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
        for (auto it = lb->MemberBegin(); it != lb->MemberEnd(); ++it) {
            const std::string key = it->name.GetString();
            char* end = nullptr;
            const long long id = std::strtoll(key.c_str(), &end, 10);
            if (key.empty() || *end != '\0' || id < 0 || id >= ctx.tokenizer->n_vocab())
                bad("logit_bias", "logit_bias key '" + key + "' is not a token id in the vocabulary");
            if (!it->value.IsNumber() || it->value.GetDouble() < -100 || it->value.GetDouble() > 100)
                bad("logit_bias", "logit_bias values must be numbers between -100 and 100");
            g.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(it->value.GetDouble()));
        }
    }
    if (const Value* al = field(body, "allowed_token_ids")) {
        if (!al->IsArray() || al->Empty()) bad("allowed_token_ids", "'allowed_token_ids' must be a non-empty array of token ids");
        g.allowed = id_array(*al, "allowed_token_ids", ctx);
    }
    if (const Value* mode = field(body, "logprobs_mode")) {
        const std::string m = mode->IsString() ? mode->GetString() : "";
        if (m == "processed" || m == "processed_logprobs") g.processed_logprobs = true;
        else if (m != "raw" && m != "raw_logprobs") bad("logprobs_mode", "'logprobs_mode' must be \"raw\" or \"processed\"");
    }

    // Logprobs: chat takes a boolean plus top_logprobs; completions an integer.
    if (chat) {
        r.logprobs = boolean(body, "logprobs", false);
        if (auto tl = integer(body, "top_logprobs", 0, protocol::kMaxLogprobs)) {
            if (!r.logprobs) bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
            r.top_logprobs = static_cast<int>(*tl);
        }
    } else {
        if (const Value* lp = field(body, "logprobs")) {
            if (lp->IsBool()) bad("logprobs", "'logprobs' must be an integer between 0 and 20 for completions");
            r.top_logprobs = static_cast<int>(*integer(body, "logprobs", 0, protocol::kMaxLogprobs));
            r.logprobs = true;
        }
        r.echo = boolean(body, "echo", false);
        if (field(body, "suffix")) bad("suffix", "'suffix' is not supported");
    }

    r.stream = boolean(body, "stream", false);
    if (const Value* so = field(body, "stream_options")) {
        if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (!so->IsObject()) bad("stream_options", "'stream_options' must be an object");
        r.include_usage = boolean(*so, "include_usage", false);
    }
    r.stop = stops(body);
    r.tokens_as_ids = boolean(body, "return_tokens_as_token_ids", false);
    g.ignore_eos = boolean(body, "ignore_eos", false);  // vLLM's extension

    const int64_t max_ctx = ctx.n_ctx;
    std::optional<int64_t> mt = integer(body, "max_completion_tokens", 0, max_ctx);
    if (!mt) mt = integer(body, "max_tokens", 0, max_ctx);
    if (mt) r.max_tokens = *mt;
    else if (!chat) r.max_tokens = 16;  // the completions API's default
    if (chat && r.max_tokens && *r.max_tokens == 0)
        bad("max_tokens", "'max_tokens' must be at least 1 for chat completions");

    if (chat) {
        const Value* msgs = field(body, "messages");
        if (!msgs) bad("messages", "'messages' is required");
        validate_messages(*msgs);
        const Value* tools = field(body, "tools");
        if (tools && !tools->IsArray()) bad("tools", "'tools' must be an array");
        const Value* kwargs = field(body, "chat_template_kwargs");
        if (kwargs && !kwargs->IsObject()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        const bool add_gen = boolean(body, "add_generation_prompt", true);
        const std::string text = ctx.render_chat(*msgs, tools, add_gen, kwargs);
        r.prompts.push_back(ctx.tokenizer->encode(text, !ctx.template_adds_bos, true));
        if (r.prompts.back().empty()) bad("messages", "the rendered chat prompt is empty");
    } else {
        r.prompts = completion_prompts(body, ctx);
    }

    for (const auto& p : r.prompts) {
        const auto n = static_cast<int64_t>(p.size());
        if (n >= max_ctx && !(r.echo && r.max_tokens == 0 && n <= max_ctx))
            throw ApiError(400, "This model's maximum context length is " + std::to_string(max_ctx) +
                                    " tokens. However, your prompt has " + std::to_string(n) + " tokens.",
                           chat ? "messages" : "prompt", "context_length_exceeded");
        if (r.max_tokens && n + *r.max_tokens > max_ctx)
            throw ApiError(400, "This model's maximum context length is " + std::to_string(max_ctx) +
                                    " tokens. However, you requested " + std::to_string(n + *r.max_tokens) +
                                    " tokens (" + std::to_string(n) + " in the prompt, " +
                                    std::to_string(*r.max_tokens) + " for the completion).",
                           "max_tokens", "context_length_exceeded");
    }
    return r;
}

}  // namespace loom::gateway
