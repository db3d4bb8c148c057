// The Responses API's JSON; see responses_json.hpp.
#include "gateway/responses_json.hpp"

#include "gateway/json_write.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>

namespace loom::gateway {
namespace {

using json_write::logprob;
using json_write::str;
using json_write::Writer;

std::string message_id(const ResponseMeta& meta) { return "msg_" + meta.id.substr(meta.id.find('_') + 1); }

// {token, logprob, bytes} of one token (a special token: its text, no bytes).
void token_fields(Writer& w, const model::Tokenizer& tok, bool as_ids, int32_t id, const std::string& bytes,
                  bool special) {
    w.Key("token");
    str(w, as_ids ? "token_id:" + std::to_string(id) : token_display(tok, id, bytes, special));
    w.Key("bytes");
    w.StartArray();
    if (!special)
        for (unsigned char c : bytes) w.Uint(c);
    w.EndArray();
}

void logprobs_array(Writer& w, const model::Tokenizer& tok, const GenerationRequest& req,
                    const std::vector<LogprobEntry>& entries) {
    w.StartArray();
    for (const LogprobEntry& e : entries) {
        w.StartObject();
        token_fields(w, tok, req.tokens_as_ids, e.token, e.bytes, e.special);
        w.Key("logprob");
        logprob(w, e.logprob);
        w.Key("top_logprobs");
        w.StartArray();
        for (const auto& [id, lp] : e.top) {
            w.StartObject();
            token_fields(w, tok, req.tokens_as_ids, id, tok.token_bytes(id), tok.vocab().is_special(id));
            w.Key("logprob");
            logprob(w, lp);
            w.EndObject();
        }
        w.EndArray();
        w.EndObject();
    }
    w.EndArray();
}

// The output_text content part.
// The event fields that name the one message item and its one text part.
void part_ids(Writer& w, const ResponseMeta& meta) {
    w.Key("item_id");
    str(w, message_id(meta));
    w.Key("output_index");
    w.Int(0);
    w.Key("content_index");
    w.Int(0);
}

// A text event's logprobs: the entries when the request asked for them, else [].
void text_logprobs(Writer& w, const model::Tokenizer& tok, const GenerationRequest& req,
                   const std::vector<LogprobEntry>& entries) {
    if (req.logprobs) logprobs_array(w, tok, req, entries);
    else {
        w.StartArray();
        w.EndArray();
    }
}

void text_part(Writer& w, const GenerationRequest& req, const model::Tokenizer& tok, const ChoiceOut* out) {
    w.StartObject();
    w.Key("type");
    w.String("output_text");
    w.Key("text");
    str(w, out ? out->text : "");
    w.Key("annotations");
    w.StartArray();
    w.EndArray();
    w.Key("logprobs");
    if (req.logprobs && out) logprobs_array(w, tok, req, out->entries);
    else {
        w.StartArray();
        w.EndArray();
    }
    w.EndObject();
}

std::string item_status(const ChoiceOut* out) {
    if (!out || !out->finish_reason) return "in_progress";
    return *out->finish_reason == "length" ? "incomplete" : "completed";
}

// The assistant message output item (content empty until `with_content`).
void message_item(Writer& w, const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                  const ChoiceOut* out, bool with_content) {
    w.StartObject();
    w.Key("id");
    str(w, message_id(meta));
    w.Key("type");
    w.String("message");
    w.Key("status");
    str(w, item_status(out));
    w.Key("role");
    w.String("assistant");
    w.Key("content");
    w.StartArray();
    if (with_content) text_part(w, req, tok, out);
    w.EndArray();
    w.EndObject();
}

void response_fields(Writer& w, const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                     const ChoiceOut* out, const Usage* usage, const std::string& status, const ApiError* error) {
    w.StartObject();
    w.Key("id");
    str(w, meta.id);
    w.Key("object");
    w.String("response");
    w.Key("created_at");
    w.Int64(meta.created);
    w.Key("status");
    str(w, status);
    w.Key("background");
    w.Bool(false);
    w.Key("error");
    if (error) {
        w.StartObject();
        w.Key("code");
        str(w, error->code.empty() ? "server_error" : error->code);
        w.Key("message");
        str(w, error->message);
        w.EndObject();
    } else {
        w.Null();
    }
    w.Key("incomplete_details");
    if (status == "incomplete") {
        w.StartObject();
        w.Key("reason");
        w.String("max_output_tokens");
        w.EndObject();
    } else {
        w.Null();
    }
    w.Key("instructions");
    if (req.instructions) str(w, *req.instructions);
    else w.Null();
    w.Key("max_output_tokens");
    if (req.max_tokens) w.Int64(*req.max_tokens);
    else w.Null();
    w.Key("metadata");
    w.RawValue(req.metadata_json.data(), req.metadata_json.size(), rapidjson::kObjectType);
    w.Key("model");
    str(w, meta.model);
    w.Key("output");
    w.StartArray();
    if (out) message_item(w, req, meta, tok, out, true);
    w.EndArray();
    w.Key("parallel_tool_calls");
    w.Bool(false);
    w.Key("previous_response_id");
    w.Null();
    w.Key("reasoning");
    w.Null();
    w.Key("store");
    w.Bool(false);
    w.Key("temperature");
    w.Double(req.sampling.temperature);
    w.Key("text");
    w.StartObject();
    w.Key("format");
    w.StartObject();
    w.Key("type");
    w.String("text");
    w.EndObject();
    w.EndObject();
    w.Key("tool_choice");
    w.String("none");
    w.Key("tools");
    w.StartArray();
    w.EndArray();
    w.Key("top_logprobs");
    w.Int(req.logprobs ? req.top_logprobs : 0);
    w.Key("top_p");
    w.Double(req.sampling.top_p);
    w.Key("truncation");
    w.String("disabled");
    w.Key("usage");
    if (usage) {
        w.StartObject();
        w.Key("input_tokens");
        w.Int64(usage->prompt_tokens);
        w.Key("input_tokens_details");
        w.StartObject();
        w.Key("cached_tokens");
        w.Int64(0);
        w.EndObject();
        w.Key("output_tokens");
        w.Int64(usage->completion_tokens);
        w.Key("output_tokens_details");
        w.StartObject();
        w.Key("reasoning_tokens");
        w.Int64(0);
        w.EndObject();
        w.Key("total_tokens");
        w.Int64(usage->prompt_tokens + usage->completion_tokens);
        w.EndObject();
    } else {
        w.Null();
    }
    w.EndObject();
}

}  // namespace

std::string response_object(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                            const ChoiceOut* out, const Usage* usage, std::optional<std::string> status,
                            const ApiError* error) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    response_fields(w, req, meta, tok, out, usage, status ? *status : item_status(out), error);
    return buf.GetString();
}

ResponsesStream::ResponsesStream(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok)
    : req_(req), meta_(meta), tok_(tok) {}

ResponsesEvent ResponsesStream::event(const std::string& type, const std::string& fields_json) {
    std::string json = "{\"type\":\"" + type + "\",\"sequence_number\":" + std::to_string(seq_++);
    if (!fields_json.empty()) json += "," + fields_json;
    json += "}";
    return {type, json};
}

namespace {

// `"key":<value>` pairs written by `f` into an object, without its braces.
template <class F>
std::string fields(F&& f) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    w.StartObject();
    f(w);
    w.EndObject();
    std::string s = buf.GetString();
    return s.substr(1, s.size() - 2);
}

}  // namespace

std::vector<ResponsesEvent> ResponsesStream::begin() {
    std::vector<ResponsesEvent> out;
    for (const char* type : {"response.created", "response.in_progress"})
        out.push_back(event(type, fields([&](Writer& w) {
                                w.Key("response");
                                response_fields(w, req_, meta_, tok_, nullptr, nullptr, "in_progress", nullptr);
                            })));
    out.push_back(event("response.output_item.added", fields([&](Writer& w) {
                            w.Key("output_index");
                            w.Int(0);
                            w.Key("item");
                            message_item(w, req_, meta_, tok_, nullptr, false);
                        })));
    out.push_back(event("response.content_part.added", fields([&](Writer& w) {
                            part_ids(w, meta_);
                            w.Key("part");
                            text_part(w, req_, tok_, nullptr);
                        })));
    return out;
}

ResponsesEvent ResponsesStream::delta(const ChoiceOut& part) {
    return event("response.output_text.delta", fields([&](Writer& w) {
                     part_ids(w, meta_);
                     w.Key("delta");
                     str(w, part.text);
                     w.Key("logprobs");
                     text_logprobs(w, tok_, req_, part.entries);
                 }));
}

std::vector<ResponsesEvent> ResponsesStream::end(const ChoiceOut& whole, const Usage& usage,
                                                 const std::optional<ApiError>& failure) {
    std::vector<ResponsesEvent> out;
    if (failure) {
        out.push_back(event("error", fields([&](Writer& w) {
                                w.Key("code");
                                str(w, failure->code);
                                w.Key("message");
                                str(w, failure->message);
                                w.Key("param");
                                w.Null();
                            })));
        out.push_back(event("response.failed", fields([&](Writer& w) {
                                w.Key("response");
                                response_fields(w, req_, meta_, tok_, &whole, &usage, "failed", &*failure);
                            })));
        return out;
    }
    out.push_back(event("response.output_text.done", fields([&](Writer& w) {
                            part_ids(w, meta_);
                            w.Key("text");
                            str(w, whole.text);
                            w.Key("logprobs");
                            text_logprobs(w, tok_, req_, whole.entries);
                        })));
    out.push_back(event("response.content_part.done", fields([&](Writer& w) {
                            part_ids(w, meta_);
                            w.Key("part");
                            text_part(w, req_, tok_, &whole);
                        })));
    out.push_back(event("response.output_item.done", fields([&](Writer& w) {
                            w.Key("output_index");
                            w.Int(0);
                            w.Key("item");
                            message_item(w, req_, meta_, tok_, &whole, true);
                        })));
    const std::string status = item_status(&whole);
    out.push_back(event(status == "incomplete" ? "response.incomplete" : "response.completed", fields([&](Writer& w) {
                            w.Key("response");
                            response_fields(w, req_, meta_, tok_, &whole, &usage, status, nullptr);
                        })));
    return out;
}

}  // namespace loom::gateway
