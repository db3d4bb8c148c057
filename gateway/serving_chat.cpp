// POST /v1/chat/completions request building; see serving_chat.hpp.
#include "gateway/serving_chat.hpp"

#include "gateway/json_fields.hpp"
#include "gateway/known_params.hpp"
#include "gateway/quote.hpp"
#include "gateway/prompt_tokens.hpp"
#include "gateway/tool_request.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

// Only {"type": "text", "text": "..."} parts: loom serves text models.
void validate_content_parts(const Value& content, const std::string& where) {
    for (const Value& part : content.GetArray()) {
        const Value* type = part.IsObject() ? find_field(part, "type") : nullptr;
        const Value* text = part.IsObject() ? find_field(part, "text") : nullptr;
        if (!type || !type->IsString() || std::string(type->GetString()) != "text" || !text || !text->IsString())
            bad_request(where + ".content",
                        "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
    }
}

void validate_message(const Value& m, const std::string& where) {
    if (!m.IsObject()) bad_request(where, where + " must be an object");
    const Value* role = find_field(m, "role");
    if (!role || !role->IsString()) bad_request(where + ".role", where + ".role must be a string");
    const std::string r = role->GetString();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer")
        bad_request(where + ".role",
                    where + ".role must be one of system, developer, user, assistant, tool; got " + quoted(r));
    const Value* content = find_field(m, "content");
    if (content && !content->IsString() && !content->IsArray())
        bad_request(where + ".content", where + ".content must be a string or an array of content parts");
    if (content && content->IsArray()) validate_content_parts(*content, where);
    if (!content && !(r == "assistant" && find_field(m, "tool_calls")))
        bad_request(where + ".content", where + ".content is required");
}

// Chat takes a boolean `logprobs` plus `top_logprobs` (alternatives per position).
void parse_logprobs(const Value& body, GenerationRequest& r) {
    r.logprobs = boolean_field(body, "logprobs", false);
    if (auto tl = integer_field(body, "top_logprobs", 0, protocol::kMaxLogprobs)) {
        if (!r.logprobs) bad_request("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
        r.top_logprobs = static_cast<int>(*tl);
    }
}

}  // namespace

void validate_messages(const Value& msgs) {
    if (!msgs.IsArray() || msgs.Empty()) bad_request("messages", "'messages' must be a non-empty array");
    size_t i = 0;
    for (const Value& m : msgs.GetArray()) validate_message(m, "messages[" + std::to_string(i++) + "]");
}

std::string render_chat_prompt(const Value& body, const ModelContext& ctx, const Value* template_kwargs) {
    const Value* msgs = find_field(body, "messages");
    if (!msgs) bad_request("messages", "'messages' is required");
    validate_messages(*msgs);
    const rapidjson::Document messages = messages_for_template(*msgs);
    const Value* tools = find_field(body, "tools");
    if (tools && !tools->IsArray()) bad_request("tools", "'tools' must be an array");
    const bool add_gen = boolean_field(body, "add_generation_prompt", true);
    return ctx.render_chat(messages, tools, add_gen,
                           template_kwargs && !template_kwargs->IsNull() ? template_kwargs : nullptr);
}

GenerationRequest build_chat_request(std::string_view body_text, const ModelContext& ctx) {
    const rapidjson::Document body = parse_json_object(body_text);
    check_known_params(body, ParamSet::Chat);
    GenerationRequest r = parse_common_fields(body, Endpoint::ChatCompletions, ctx);
    parse_logprobs(body, r);
    if (r.max_tokens && *r.max_tokens == 0)
        bad_request("max_tokens", "'max_tokens' must be at least 1 for chat completions");
    OutputRequest out = parse_output_request(body, true, ctx.chat_format, ctx.chat_template);
    const std::string text = render_chat_prompt(body, ctx, &out.template_kwargs);
    r.output = out.output;
    r.output.inside_reasoning = prompt_opens_reasoning(text, reasoning_syntax(r.output.reasoning));
    r.constraint = std::move(out.constraint);
    // A reasoning model reasons freely; the grammar applies after its reasoning.
    if (r.constraint) reason_before_constraint(*r.constraint, r.output.reasoning, text);
    r.prompts.push_back(
        tokenize_prompt(*ctx.tokenizer, text, !ctx.template_adds_bos, "messages", "the rendered chat prompt is empty"));
    check_context_length(r, ctx.n_ctx, "messages");
    return r;
}

}  // namespace loom::gateway
