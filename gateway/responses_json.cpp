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

// A text event's logprobs: the entries when the request asked for them, else [].
void text_logprobs(Writer& w, const model::Tokenizer& tok, const GenerationRequest& req,
                   const std::vector<LogprobEntry>& entries) {
    if (req.logprobs) logprobs_array(w, tok, req, entries);
    else {
        w.StartArray();
        w.EndArray();
    }
}

using Kind = ResponsesItem::Kind;

// The one content part of a message (output_text) or of reasoning (reasoning_text).
void content_part(Writer& w, const GenerationRequest& req, const model::Tokenizer& tok, const ResponsesItem& it,
                  bool with_text) {
    w.StartObject();
    w.Key("type");
    w.String(it.kind == Kind::Message ? "output_text" : "reasoning_text");
    w.Key("text");
    str(w, with_text ? it.text : "");
    if (it.kind == Kind::Message) {
        w.Key("annotations");
        w.StartArray();
        w.EndArray();
        w.Key("logprobs");
        if (with_text) text_logprobs(w, tok, req, it.entries);
        else {
            w.StartArray();
            w.EndArray();
        }
    }
    w.EndObject();
}

// An output item; `status`: in_progress, completed or incomplete. An open message or
// reasoning item has no content yet (its part comes with content_part.added).
void item_json(Writer& w, const GenerationRequest& req, const model::Tokenizer& tok, const ResponsesItem& it,
               const std::string& status) {
    w.StartObject();
    w.Key("id");
    str(w, it.id);
    w.Key("type");
    w.String(it.kind == Kind::Message ? "message" : it.kind == Kind::Reasoning ? "reasoning" : "function_call");
    w.Key("status");
    str(w, status);
    if (it.kind == Kind::FunctionCall) {
        w.Key("arguments");
        str(w, it.done ? it.text : "");
        w.Key("call_id");
        str(w, it.call_id);
        w.Key("name");
        str(w, it.name);
    } else {
        if (it.kind == Kind::Message) {
            w.Key("role");
            w.String("assistant");
        } else {
            w.Key("summary");
            w.StartArray();
            w.EndArray();
        }
        w.Key("content");
        w.StartArray();
        if (it.done) content_part(w, req, tok, it, true);
        w.EndArray();
    }
    w.EndObject();
}

void raw(Writer& w, const std::string& json, rapidjson::Type t) { w.RawValue(json.data(), json.size(), t); }

// Usage; reasoning tokens are not counted apart (output_tokens holds them).
void usage_json(Writer& w, const Usage& usage) {
    w.StartObject();
    w.Key("input_tokens");
    w.Int64(usage.prompt_tokens);
    w.Key("input_tokens_details");
    w.StartObject();
    w.Key("cached_tokens");
    w.Int64(usage.cached_tokens);
    w.EndObject();
    w.Key("output_tokens");
    w.Int64(usage.completion_tokens);
    w.Key("output_tokens_details");
    w.StartObject();
    w.Key("reasoning_tokens");
    w.Int64(0);
    w.EndObject();
    w.Key("total_tokens");
    w.Int64(usage.prompt_tokens + usage.completion_tokens);
    w.EndObject();
}

void response_fields(Writer& w, const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                     const std::vector<ResponsesItem>& items, const Usage* usage, const std::string& status,
                     const ApiError* error) {
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
    raw(w, req.metadata_json, rapidjson::kObjectType);
    w.Key("model");
    str(w, meta.model);
    w.Key("output");
    w.StartArray();
    for (const ResponsesItem& it : items) item_json(w, req, tok, it, it.status);
    w.EndArray();
    w.Key("parallel_tool_calls");
    w.Bool(req.output.parallel);
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
    raw(w, req.responses_echo.text_format, rapidjson::kObjectType);
    w.EndObject();
    w.Key("tool_choice");
    raw(w, req.responses_echo.tool_choice,
        req.responses_echo.tool_choice.starts_with("{") ? rapidjson::kObjectType : rapidjson::kStringType);
    w.Key("tools");
    raw(w, req.responses_echo.tools, rapidjson::kArrayType);
    w.Key("top_logprobs");
    w.Int(req.logprobs ? req.top_logprobs : 0);
    w.Key("top_p");
    w.Double(req.sampling.top_p);
    w.Key("truncation");
    w.String("disabled");
    w.Key("usage");
    if (usage) usage_json(w, *usage);
    else { w.Null(); }
    w.EndObject();
}

// The fields of an item event naming its item: item_id, output_index and, for an event
// of its one content part, content_index.
void item_ids(Writer& w, const ResponsesItem& it, int at, bool part) {
    w.Key("item_id");
    str(w, it.id);
    w.Key("output_index");
    w.Int(at);
    if (part) {
        w.Key("content_index");
        w.Int(0);
    }
}

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

std::string response_object(const GenerationRequest& req, const ResponseMeta& meta, const model::Tokenizer& tok,
                            const std::vector<ResponsesItem>& items, const Usage* usage, const std::string& status,
                            const ApiError* error) {
    rapidjson::StringBuffer buf;
    Writer w(buf);
    response_fields(w, req, meta, tok, items, usage, status, error);
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

std::vector<ResponsesEvent> ResponsesStream::begin() {
    std::vector<ResponsesEvent> out;
    for (const char* type : {"response.created", "response.in_progress"})
        out.push_back(event(type, fields([&](Writer& w) {
                                w.Key("response");
                                response_fields(w, req_, meta_, tok_, {}, nullptr, "in_progress", nullptr);
                            })));
    return out;
}

ResponsesItem& ResponsesStream::start(Kind kind, std::vector<ResponsesEvent>& out) {
    if (!items_.empty() && !items_.back().done) close(items_.back(), out);
    const std::string tail = meta_.id.substr(meta_.id.find('_') + 1);
    const char* prefix = kind == Kind::Message ? "msg_" : kind == Kind::Reasoning ? "rs_" : "fc_";
    ResponsesItem& it = items_.emplace_back();
    it.kind = kind;
    // The first item keeps the plain id (its prefix and the response id's tail); later items add their index.
    it.id = prefix + tail + (items_.size() == 1 ? std::string() : "_" + std::to_string(items_.size() - 1));
    const int at = index_of(it);
    out.push_back(event("response.output_item.added", fields([&](Writer& w) {
                            w.Key("output_index");
                            w.Int(at);
                            w.Key("item");
                            item_json(w, req_, tok_, it, it.status);
                        })));
    if (kind != Kind::FunctionCall)
        out.push_back(event("response.content_part.added", fields([&](Writer& w) {
                                item_ids(w, it, at, true);
                                w.Key("part");
                                content_part(w, req_, tok_, it, false);
                            })));
    return it;
}

void ResponsesStream::close(ResponsesItem& it, std::vector<ResponsesEvent>& out) {
    const int at = index_of(it);
    auto ids = [&](Writer& w, bool part) { item_ids(w, it, at, part); };
    if (it.kind == Kind::FunctionCall) {
        out.push_back(event("response.function_call_arguments.done", fields([&](Writer& w) {
                                ids(w, false);
                                w.Key("name");
                                str(w, it.name);
                                w.Key("arguments");
                                str(w, it.text);
                            })));
    } else {
        const bool msg = it.kind == Kind::Message;
        out.push_back(event(msg ? "response.output_text.done" : "response.reasoning_text.done", fields([&](Writer& w) {
                                ids(w, true);
                                w.Key("text");
                                str(w, it.text);
                                if (msg) {
                                    w.Key("logprobs");
                                    text_logprobs(w, tok_, req_, it.entries);
                                }
                            })));
        out.push_back(event("response.content_part.done", fields([&](Writer& w) {
                                ids(w, true);
                                w.Key("part");
                                content_part(w, req_, tok_, it, true);
                            })));
    }
    it.done = true;
    it.status = status_ == "incomplete" ? "incomplete" : "completed";
    out.push_back(event("response.output_item.done", fields([&](Writer& w) {
                            w.Key("output_index");
                            w.Int(at);
                            w.Key("item");
                            item_json(w, req_, tok_, it, it.status);
                        })));
}

std::vector<ResponsesEvent> ResponsesStream::add(const ChoiceOut& part) {
    std::vector<ResponsesEvent> out;
    // Text of a message or reasoning item: opens it (output_item.added, content_part.added)
    // when it is not the open item, then its delta.
    auto text = [&](Kind kind, const std::string& delta, const std::vector<LogprobEntry>& entries) {
        if (delta.empty() && entries.empty()) return;
        const bool same = !items_.empty() && !items_.back().done && items_.back().kind == kind;
        ResponsesItem& it = same ? items_.back() : start(kind, out);
        const int at = index_of(it);
        auto ids = [&](Writer& w) { item_ids(w, it, at, true); };
        it.text += delta;
        for (const LogprobEntry& e : entries) it.entries.push_back(e);
        const bool msg = kind == Kind::Message;
        out.push_back(
            event(msg ? "response.output_text.delta" : "response.reasoning_text.delta", fields([&](Writer& w) {
                      ids(w);
                      w.Key("delta");
                      str(w, delta);
                      if (msg) {
                          w.Key("logprobs");
                          text_logprobs(w, tok_, req_, entries);
                      }
                  })));
    };
    text(Kind::Reasoning, part.reasoning, part.reasoning_entries);
    text(Kind::Message, part.text, part.entries);
    for (const ToolCallDelta& d : part.tool_calls) {
        if (d.header) {
            ResponsesItem& it = start(Kind::FunctionCall, out);
            it.call_id = d.id;
            it.name = d.name;
            if (call_items_.size() <= static_cast<size_t>(d.index))
                call_items_.resize(static_cast<size_t>(d.index) + 1);
            call_items_[static_cast<size_t>(d.index)] = index_of(it);
        }
        if (d.arguments.empty() || static_cast<size_t>(d.index) >= call_items_.size()) continue;
        ResponsesItem& it = items_[static_cast<size_t>(call_items_[static_cast<size_t>(d.index)])];
        it.text += d.arguments;
        out.push_back(event("response.function_call_arguments.delta", fields([&](Writer& w) {
                                item_ids(w, it, index_of(it), false);
                                w.Key("delta");
                                str(w, d.arguments);
                            })));
    }
    return out;
}

std::vector<ResponsesEvent> ResponsesStream::end(const std::optional<std::string>& finish_reason, const Usage& usage,
                                                 const std::optional<ApiError>& failure) {
    std::vector<ResponsesEvent> out;
    if (failure) {
        status_ = "failed";
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
                                response_fields(w, req_, meta_, tok_, items_, &usage, "failed", &*failure);
                            })));
        return out;
    }
    status_ = finish_reason && *finish_reason == "length" ? "incomplete" : "completed";
    // A response without output still has its (empty) message.
    if (items_.empty()) start(Kind::Message, out);
    for (ResponsesItem& it : items_)
        if (!it.done) close(it, out);
    const std::string name = status_ == "incomplete" ? "response.incomplete" : "response.completed";
    out.push_back(event(name, fields([&](Writer& w) {
                            w.Key("response");
                            response_fields(w, req_, meta_, tok_, items_, &usage, status_, nullptr);
                        })));
    return out;
}

std::string ResponsesStream::object(const Usage& usage) const {
    return response_object(req_, meta_, tok_, items_, &usage, status_);
}

}  // namespace loom::gateway
