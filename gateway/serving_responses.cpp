// POST /v1/responses request building; see serving_responses.hpp.
#include "gateway/serving_responses.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "gateway/json_fields.hpp"
#include "gateway/serving_chat.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

std::string str(const Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

void refuse_stateful(const Value& body) {
    if (find_field(body, "previous_response_id"))
        bad_request("previous_response_id",
                    "loom does not store responses, so 'previous_response_id' cannot be used; "
                    "send the earlier turns in 'input' instead",
                    "unsupported_parameter");
    if (find_field(body, "conversation"))
        bad_request("conversation", "loom does not store conversations; send the earlier turns in 'input'",
                    "unsupported_parameter");
    if (boolean_field(body, "store", false))
        bad_request("store", "loom does not store responses: 'store' must be false or left out",
                    "unsupported_parameter");
    if (boolean_field(body, "background", false))
        bad_request("background", "background responses are not supported ('background' must be false)",
                    "unsupported_parameter");
    if (const Value* tools = find_field(body, "tools"); tools && (!tools->IsArray() || !tools->Empty()))
        bad_request("tools", "tools are not supported by /v1/responses here", "unsupported_parameter");
    if (find_field(body, "reasoning"))
        bad_request("reasoning", "'reasoning' is not supported", "unsupported_parameter");
    if (const Value* text = find_field(body, "text")) {
        const Value* format = text->IsObject() ? find_field(*text, "format") : nullptr;
        const Value* type = format && format->IsObject() ? find_field(*format, "type") : nullptr;
        if (!text->IsObject() || (format && (!type || !type->IsString() || str(*type) != "text")))
            bad_request("text.format", "only text.format {\"type\": \"text\"} is supported", "unsupported_parameter");
    }
}

// One input content part as a chat text part (input_text, or output_text in an earlier
// assistant turn).
void add_part(const Value& part, const std::string& where, Value& parts, rapidjson::Document::AllocatorType& a) {
    const Value* type = part.IsObject() ? find_field(part, "type") : nullptr;
    const Value* text = part.IsObject() ? find_field(part, "text") : nullptr;
    const std::string t = type && type->IsString() ? str(*type) : "";
    if ((t != "input_text" && t != "output_text" && t != "text") || !text || !text->IsString())
        bad_request(where, "only text content parts ({\"type\": \"input_text\", \"text\": ...}) are supported");
    Value p(rapidjson::kObjectType);
    p.AddMember("type", "text", a);
    p.AddMember("text", Value(text->GetString(), text->GetStringLength(), a), a);
    parts.PushBack(p, a);
}

// `input` (and `instructions`) as chat messages.
Value messages_of(const Value& body, rapidjson::Document::AllocatorType& a) {
    Value msgs(rapidjson::kArrayType);
    if (const Value* ins = find_field(body, "instructions")) {
        if (!ins->IsString()) bad_request("instructions", "'instructions' must be a string");
        Value m(rapidjson::kObjectType);
        m.AddMember("role", "system", a);
        m.AddMember("content", Value(ins->GetString(), ins->GetStringLength(), a), a);
        msgs.PushBack(m, a);
    }
    const Value* input = find_field(body, "input");
    if (!input) bad_request("input", "'input' is required");
    if (input->IsString()) {
        Value m(rapidjson::kObjectType);
        m.AddMember("role", "user", a);
        m.AddMember("content", Value(input->GetString(), input->GetStringLength(), a), a);
        msgs.PushBack(m, a);
        return msgs;
    }
    if (!input->IsArray() || input->Empty()) bad_request("input", "'input' must be a string or a non-empty array");
    size_t i = 0;
    for (const Value& item : input->GetArray()) {
        const std::string where = "input[" + std::to_string(i++) + "]";
        if (!item.IsObject()) bad_request(where, where + " must be an object");
        const Value* type = find_field(item, "type");
        if (type && (!type->IsString() || str(*type) != "message"))
            bad_request(where + ".type", "only message input items are supported, got '" +
                                             (type->IsString() ? str(*type) : std::string("?")) + "'");
        const Value* role = find_field(item, "role");
        const Value* content = find_field(item, "content");
        if (!role || !role->IsString()) bad_request(where + ".role", where + ".role must be a string");
        if (!content || (!content->IsString() && !content->IsArray()))
            bad_request(where + ".content", where + ".content must be a string or an array of content parts");
        Value m(rapidjson::kObjectType);
        m.AddMember("role", Value(role->GetString(), role->GetStringLength(), a), a);
        if (content->IsString()) {
            m.AddMember("content", Value(content->GetString(), content->GetStringLength(), a), a);
        } else {
            Value parts(rapidjson::kArrayType);
            size_t k = 0;
            for (const Value& part : content->GetArray())
                add_part(part, where + ".content[" + std::to_string(k++) + "]", parts, a);
            m.AddMember("content", parts, a);
        }
        msgs.PushBack(m, a);
    }
    return msgs;
}

bool wants_logprobs(const Value& body) {
    const Value* inc = find_field(body, "include");
    if (!inc) return false;
    if (!inc->IsArray()) bad_request("include", "'include' must be an array of strings");
    bool lp = false;
    for (const Value& v : inc->GetArray()) {
        if (!v.IsString() || str(v) != kIncludeLogprobs)
            bad_request("include", "the only 'include' value supported is \"" + std::string(kIncludeLogprobs) + "\"",
                        "unsupported_parameter");
        lp = true;
    }
    return lp;
}

// A chat field's name as the Responses API calls it, for error messages.
std::string responses_param(const std::string& p) {
    if (p == "max_tokens" || p == "max_completion_tokens") return "max_output_tokens";
    if (p.rfind("messages", 0) == 0) return "input";
    return p;
}

}  // namespace

GenerationRequest build_responses_request(std::string_view body_text, const ModelContext& ctx) {
    const rapidjson::Document body = parse_json_object(body_text);
    refuse_stateful(body);
    rapidjson::Document chat(rapidjson::kObjectType);
    auto& a = chat.GetAllocator();
    // Sampling fields carry over unchanged (the Responses API's temperature and top_p, and
    // vLLM's extensions); `model` and `stream` too.
    for (const char* k : {"model", "stream", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                          "frequency_penalty", "repetition_penalty", "logit_bias", "allowed_token_ids", "logprobs_mode",
                          "ignore_eos", "return_tokens_as_token_ids"})
        if (const Value* v = find_field(body, k)) chat.AddMember(rapidjson::StringRef(k), Value(*v, a), a);
    if (const Value* v = find_field(body, "max_output_tokens")) {
        if (!v->IsInt64() || v->GetInt64() < 1)
            bad_request("max_output_tokens", "'max_output_tokens' must be an integer >= 1");
        chat.AddMember("max_tokens", Value(*v, a), a);
    }
    const bool lp = wants_logprobs(body);
    if (const Value* v = find_field(body, "top_logprobs")) {
        if (!lp)
            bad_request("top_logprobs", "'top_logprobs' needs include: [\"" + std::string(kIncludeLogprobs) + "\"]");
        chat.AddMember("top_logprobs", Value(*v, a), a);
    }
    if (lp) chat.AddMember("logprobs", true, a);
    chat.AddMember("messages", messages_of(body, a), a);

    GenerationRequest r;
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    chat.Accept(w);
    try {
        r = build_chat_request(std::string_view(buf.GetString(), buf.GetSize()), ctx);
    } catch (const ApiError& e) {
        ApiError renamed = e;
        renamed.param = responses_param(e.param);
        throw renamed;
    }
    r.endpoint = Endpoint::Responses;
    if (const Value* ins = find_field(body, "instructions")) r.instructions = str(*ins);
    if (const Value* md = find_field(body, "metadata")) {
        if (!md->IsObject()) bad_request("metadata", "'metadata' must be an object");
        rapidjson::StringBuffer mb;
        rapidjson::Writer<rapidjson::StringBuffer> mw(mb);
        md->Accept(mw);
        r.metadata_json = mb.GetString();
    }
    return r;
}

}  // namespace loom::gateway
