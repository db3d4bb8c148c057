// OpenAI response JSON; see response_json.hpp.
#include "gateway/response_json.hpp"

#include "gateway/json_write.hpp"
#include "gateway/quote.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>

namespace loom::gateway {
namespace {

using json_write::logprob;
using json_write::str;
using json_write::Writer;

void bytes_array(Writer& w, const std::string& b, bool special) {
    if (special) {
        w.Null();
        return;
    }
    w.StartArray();
    for (unsigned char c : b) w.Uint(c);
    w.EndArray();
}

// The `token` string of an id, or "token_id:<id>" when the request asked for ids.
std::string display(const model::Tokenizer& tok, bool as_ids, int32_t id, const std::string& bytes, bool special) {
    return as_ids ? "token_id:" + std::to_string(id) : token_display(tok, id, bytes, special);
}

// Chat: a list of logprob entries ({token, logprob, bytes, top_logprobs}).
void entry_list(Writer& w, const model::Tokenizer& tok, const std::vector<LogprobEntry>& entries, bool as_ids) {
    w.StartArray();
    for (const LogprobEntry& e : entries) {
        w.StartObject();
        w.Key("token");
        str(w, display(tok, as_ids, e.token, e.bytes, e.special));
        w.Key("logprob");
        logprob(w, e.logprob);
        w.Key("bytes");
        bytes_array(w, e.bytes, e.special);
        w.Key("top_logprobs");
        w.StartArray();
        for (const auto& [id, lp] : e.top) {
            const bool sp = tok.vocab().is_special(id);
            const std::string& b = tok.token_bytes(id);
            w.StartObject();
            w.Key("token");
            str(w, display(tok, as_ids, id, b, sp));
            w.Key("logprob");
            logprob(w, lp);
            w.Key("bytes");
            bytes_array(w, b, sp);
            w.EndObject();
        }
        w.EndArray();
        w.EndObject();
    }
    w.EndArray();
}

// Chat: logprobs.content, and (loom's extension) one list per other part of a split
// output: reasoning_content, and tool_calls[] = {index, name, arguments}.
void chat_logprobs(Writer& w, const model::Tokenizer& tok, const ChoiceOut& c, bool as_ids) {
    w.Key("logprobs");
    w.StartObject();
    w.Key("content");
    entry_list(w, tok, c.entries, as_ids);
    w.Key("refusal");
    w.Null();
    if (!c.reasoning_entries.empty()) {
        w.Key("reasoning_content");
        entry_list(w, tok, c.reasoning_entries, as_ids);
    }
    if (!c.tool_calls.empty()) {
        w.Key("tool_calls");
        w.StartArray();
        for (const ToolCallDelta& t : c.tool_calls) {
            w.StartObject();
            w.Key("index");
            w.Int(t.index);
            w.Key("name");
            entry_list(w, tok, t.name_entries, as_ids);
            w.Key("arguments");
            entry_list(w, tok, t.arg_entries, as_ids);
            w.EndObject();
        }
        w.EndArray();
    }
    w.EndObject();
}

// message.tool_calls (complete calls) or delta.tool_calls (a header: index, id, type
// and name with empty arguments; else index and an arguments fragment).
void tool_calls(Writer& w, const ChoiceOut& c, bool chunk) {
    w.Key("tool_calls");
    w.StartArray();
    for (const ToolCallDelta& t : c.tool_calls) {
        w.StartObject();
        if (chunk) {
            w.Key("index");
            w.Int(t.index);
        }
        if (t.header || !chunk) {
            w.Key("id");
            str(w, t.id);
            w.Key("type");
            w.String("function");
        }
        w.Key("function");
        w.StartObject();
        if (t.header || !chunk) {
            w.Key("name");
            str(w, t.name);
        }
        w.Key("arguments");
        str(w, t.arguments);
        w.EndObject();
        w.EndObject();
    }
    w.EndArray();
}

// Completions: the legacy {tokens, token_logprobs, top_logprobs, text_offset}.
void legacy_logprobs(Writer& w, const model::Tokenizer& tok, const std::vector<LogprobEntry>& entries, int64_t offset,
                     bool as_ids) {
    w.Key("logprobs");
    w.StartObject();
    w.Key("tokens");
    w.StartArray();
    // An entry's bytes are exactly what it adds to `text` (a special token's text
    // included), so the tokens, joined, spell the text. With echo of a text prompt that
    // holds for the prompt as sent too: an added BOS spells "" and the first word has no
    // dummy-prefix space (OpenAI's tokens join to the text; text_offset stays true).
    for (const LogprobEntry& e : entries) str(w, display(tok, as_ids, e.token, e.bytes, false));
    w.EndArray();
    w.Key("token_logprobs");
    w.StartArray();
    for (const LogprobEntry& e : entries) {
        if (e.has_logprob) logprob(w, e.logprob);
        else w.Null();
    }
    w.EndArray();
    w.Key("top_logprobs");
    w.StartArray();
    for (size_t i = 0; i < entries.size(); ++i) {
        if (!entries[i].has_logprob) {
            w.Null();
            continue;
        }
        // Keys must be unique: two ids with the same text keep the larger logprob. The
        // sampled token is always listed (OpenAI: "up to logprobs+1 elements"; vLLM lists
        // it with logprobs 0 too).
        std::vector<std::pair<std::string, float>> keyed;
        auto add = [&](int32_t id, float lp) {
            std::string key = display(tok, as_ids, id, tok.token_bytes(id), tok.vocab().is_special(id));
            auto it = std::find_if(keyed.begin(), keyed.end(), [&](const auto& kv) { return kv.first == key; });
            if (it == keyed.end()) keyed.emplace_back(std::move(key), lp);
            else it->second = std::max(it->second, lp);
        };
        for (const auto& [id, lp] : entries[i].top) add(id, lp);
        add(entries[i].token, entries[i].logprob);
        w.StartObject();
        for (const auto& [k, lp] : keyed) {
            str(w, k);
            logprob(w, lp);
        }
        w.EndObject();
    }
    w.EndArray();
    w.Key("text_offset");
    w.StartArray();
    for (const LogprobEntry& e : entries) {
        w.Int64(offset);
        offset += utf8_chars(e.bytes);
    }
    w.EndArray();
    w.EndObject();
}

// vLLM's prompt_logprobs: per prompt position null (the first) or {"<id>": {logprob,
// rank, decoded_token}} for the prompt's token and the top alternatives. A rank is the
// token's 1-based place in the distribution; the prompt's token outside the top K gets
// null (the engine reports no rank beyond them).
void prompt_logprobs_array(Writer& w, const model::Tokenizer& tok, const ChoiceOut& c) {
    w.Key("prompt_logprobs");
    w.StartArray();
    const auto& plps = *c.prompt_logprobs;
    for (size_t i = 0; i < plps.size(); ++i) {
        const auto& p = plps[i];
        if (!p || !p->logprob || !c.prompt || i >= c.prompt->size()) {
            w.Null();
            continue;
        }
        const int32_t actual = (*c.prompt)[i];
        auto entry = [&](int32_t id, float lp, std::optional<int64_t> rank) {
            const std::string key = std::to_string(id);
            w.Key(key.c_str(), static_cast<rapidjson::SizeType>(key.size()), true);
            w.StartObject();
            w.Key("logprob");
            logprob(w, lp);
            w.Key("rank");
            if (rank) w.Int64(*rank);
            else w.Null();
            w.Key("decoded_token");
            const bool special = tok.vocab().is_special(id);
            str(w, special ? tok.vocab().tokens.at(static_cast<size_t>(id)) : sanitize_utf8(tok.token_bytes(id)));
            w.EndObject();
        };
        w.StartObject();
        bool in_top = false;
        for (const auto& [id, lp] : p->top) in_top = in_top || id == actual;
        if (!in_top) {
            std::optional<int64_t> rank;
            if (!p->top.empty() && *p->logprob >= p->top.back().second) {
                int64_t above = 0;
                for (const auto& [id, lp] : p->top) above += lp > *p->logprob;
                rank = above + 1;
            }
            entry(actual, *p->logprob, rank);
        }
        for (size_t k = 0; k < p->top.size(); ++k)
            entry(p->top[k].first, p->top[k].second, static_cast<int64_t>(k + 1));
        w.EndObject();
    }
    w.EndArray();
}

void id_list(Writer& w, const char* key, const std::vector<int32_t>& ids) {
    w.Key(key);
    w.StartArray();
    for (int32_t id : ids) w.Int(id);
    w.EndArray();
}

// The prompt's extras (vLLM): per choice for completions, at the top level for chat.
void prompt_extras(Writer& w, const model::Tokenizer& tok, const ChoiceOut& c) {
    if (c.prompt_logprobs) prompt_logprobs_array(w, tok, c);
    if (c.prompt_ids_out && c.prompt) id_list(w, "prompt_token_ids", *c.prompt);
}

void header(Writer& w, const GenerationRequest& req, const ResponseMeta& meta, bool chunk) {
    const bool chat = req.endpoint == Endpoint::ChatCompletions;
    w.Key("id");
    str(w, meta.id);
    w.Key("object");
    w.String(chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    w.Key("created");
    w.Int64(meta.created);
    w.Key("model");
    str(w, meta.model);
    w.Key("system_fingerprint");
    w.Null();
}

void usage_obj(Writer& w, const Usage& u) {
    w.Key("usage");
    w.StartObject();
    w.Key("prompt_tokens");
    w.Int64(u.prompt_tokens);
    w.Key("completion_tokens");
    w.Int64(u.completion_tokens);
    w.Key("total_tokens");
    w.Int64(u.prompt_tokens + u.completion_tokens);
    if (u.cached_tokens > 0) {
        w.Key("prompt_tokens_details");
        w.StartObject();
        w.Key("cached_tokens");
        w.Int64(u.cached_tokens);
        w.EndObject();
    }
    w.EndObject();
}

void choice(Writer& w, const GenerationRequest& req, const model::Tokenizer& tok, const ChoiceOut& c, bool chunk) {
    const bool chat = req.endpoint == Endpoint::ChatCompletions;
    w.StartObject();
    w.Key("index");
    w.Int(c.index);
    if (chat) {
        w.Key(chunk ? "delta" : "message");
        w.StartObject();
        if (!chunk || c.first_chunk) {
            w.Key("role");
            w.String("assistant");
        }
        if (!chunk || !c.text.empty() || c.first_chunk) {
            w.Key("content");
            // With tool calls or reasoning and no text, content is null (as OpenAI answers a
            // tool-only turn, and vLLM and DeepSeek one that is all reasoning).
            if (!chunk && c.text.empty() && (!c.tool_calls.empty() || !c.reasoning.empty())) w.Null();
            else str(w, c.text);
        }
        if (!c.reasoning.empty()) {
            w.Key("reasoning_content");
            str(w, c.reasoning);
        }
        if (!chunk) {
            w.Key("refusal");
            w.Null();
        }
        if (!c.tool_calls.empty()) tool_calls(w, c, chunk);
        w.EndObject();
    } else {
        w.Key("text");
        str(w, c.text);
    }
    if (req.logprobs) {
        if (chat) chat_logprobs(w, tok, c, req.tokens_as_ids);
        else legacy_logprobs(w, tok, c.entries, c.text_offset, req.tokens_as_ids);
    } else {
        w.Key("logprobs");
        w.Null();
    }
    w.Key("finish_reason");
    if (c.finish_reason) w.String(c.finish_reason->c_str());
    else w.Null();
    if (!chat) prompt_extras(w, tok, c);
    if (c.token_ids) id_list(w, "token_ids", *c.token_ids);
    w.EndObject();
}

}  // namespace

int64_t utf8_chars(std::string_view s) {
    int64_t n = 0;
    for (unsigned char c : s)
        if ((c & 0xC0) != 0x80) ++n;
    return n;
}

std::string token_display(const model::Tokenizer& tok, int32_t id, const std::string& bytes, bool special) {
    if (special) return tok.vocab().tokens.at(static_cast<size_t>(id));
    if (valid_utf8(bytes)) return bytes;
    static const char* hex = "0123456789abcdef";
    std::string out = "bytes:";
    for (unsigned char c : bytes) {
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 15];
    }
    return out;
}

std::string full_response(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                          const std::vector<ChoiceOut>& choices, const Usage& usage) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    header(w, req, meta, false);
    w.Key("choices");
    w.StartArray();
    for (const ChoiceOut& c : choices) choice(w, req, tok, c, false);
    w.EndArray();
    if (req.endpoint == Endpoint::ChatCompletions && !choices.empty()) prompt_extras(w, tok, choices[0]);
    usage_obj(w, usage);
    w.EndObject();
    return buf.GetString();
}

std::string stream_chunk(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                         const ChoiceOut* c, const Usage* usage) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    header(w, req, meta, true);
    w.Key("choices");
    w.StartArray();
    if (c) choice(w, req, tok, *c, true);
    w.EndArray();
    if (c && req.endpoint == Endpoint::ChatCompletions) prompt_extras(w, tok, *c);
    if (usage) usage_obj(w, *usage);
    else if (c && c->usage) usage_obj(w, *c->usage);
    else if (req.include_usage) {
        w.Key("usage");
        w.Null();
    }
    w.EndObject();
    return buf.GetString();
}

std::string error_body(const ApiError& e) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    w.Key("error");
    w.StartObject();
    w.Key("message");
    str(w, cut(e.message, kErrorMessageMax));
    w.Key("type");
    str(w, e.type);
    w.Key("param");
    if (e.param.empty()) w.Null();
    else str(w, cut(e.param));
    w.Key("code");
    if (e.code.empty()) w.Null();
    else str(w, e.code);
    w.EndObject();
    w.EndObject();
    return buf.GetString();
}

}  // namespace loom::gateway
