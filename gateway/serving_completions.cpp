// POST /v1/completions request building; see serving_completions.hpp.
#include "gateway/serving_completions.hpp"

#include "gateway/json_fields.hpp"
#include "gateway/known_params.hpp"
#include "gateway/prompt_tokens.hpp"
#include "gateway/tool_request.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

bool all_ints(const Value& arr) {
    for (const Value& e : arr.GetArray())
        if (!e.IsInt64()) return false;
    return true;
}

// An array prompt (non-empty): its element types decide which form it is.
std::vector<CompletionPrompt> array_prompts(const Value& p, const model::Tokenizer& tok) {
    std::vector<CompletionPrompt> out;
    const Value& first = p[0];
    if (first.IsString()) {
        for (const Value& s : p.GetArray()) {
            if (!s.IsString()) bad_request("prompt", "'prompt' array must hold only strings, or only token ids");
            out.emplace_back(std::string(s.GetString(), s.GetStringLength()));
        }
    } else if (first.IsInt64() && all_ints(p)) {
        out.emplace_back(token_ids(p, "prompt", tok));
    } else if (first.IsArray()) {
        for (const Value& a : p.GetArray()) {
            if (!a.IsArray() || a.Empty() || !all_ints(a))
                bad_request("prompt", "'prompt' arrays of token ids must be non-empty arrays of integers");
            out.emplace_back(token_ids(a, "prompt", tok));
        }
    } else {
        bad_request("prompt",
                    "'prompt' must be a string, an array of strings, an array of token ids, or an array of "
                    "arrays of token ids");
    }
    return out;
}

// Completions take an integer `logprobs` (the number of alternatives), not chat's boolean.
void parse_logprobs(const Value& body, GenerationRequest& r) {
    const Value* lp = find_field(body, "logprobs");
    if (!lp) return;
    if (lp->IsBool()) bad_request("logprobs", "'logprobs' must be an integer between 0 and 20 for completions");
    r.top_logprobs = static_cast<int>(*integer_field(body, "logprobs", 0, protocol::kMaxLogprobs));
    r.logprobs = true;
}

}  // namespace

std::vector<CompletionPrompt> completion_prompts(const Value& body, const model::Tokenizer& tok) {
    const Value* p = find_field(body, "prompt");
    if (!p) bad_request("prompt", "'prompt' is required");
    std::vector<CompletionPrompt> out;
    if (p->IsString()) out.emplace_back(std::string(p->GetString(), p->GetStringLength()));
    else if (p->IsArray() && !p->Empty()) out = array_prompts(*p, tok);
    else
        bad_request("prompt",
                    "'prompt' must be a string, an array of strings, an array of token ids, or an array "
                    "of arrays of token ids (not empty)");
    if (out.size() > kMaxCompletionPrompts)
        bad_request("prompt", "at most " + std::to_string(kMaxCompletionPrompts) + " prompts per request");
    return out;
}

std::vector<std::vector<int32_t>> tokenize_completion_prompts(const std::vector<CompletionPrompt>& prompts,
                                                              const model::Tokenizer& tok) {
    std::vector<std::vector<int32_t>> out;
    for (const CompletionPrompt& p : prompts) {
        if (const auto* text = std::get_if<std::string>(&p))
            out.push_back(tokenize_prompt(tok, *text, true, "prompt", "the prompt is empty after tokenization"));
        else out.push_back(std::get<std::vector<int32_t>>(p));
    }
    return out;
}

GenerationRequest build_completion_request(std::string_view body_text, const ModelContext& ctx) {
    const rapidjson::Document body = parse_json_object(body_text);
    check_known_params(body, ParamSet::Completions);
    GenerationRequest r = parse_common_fields(body, Endpoint::Completions, ctx);
    r.constraint = parse_output_request(body, false, ctx.chat_format, ctx.chat_template).constraint;
    parse_logprobs(body, r);
    r.echo = boolean_field(body, "echo", false);
    if (find_field(body, "suffix")) bad_request("suffix", "'suffix' is not supported");
    if (!r.max_tokens) r.max_tokens = 16;  // the completions API's default
    const std::vector<CompletionPrompt> prompts = completion_prompts(body, *ctx.tokenizer);
    r.prompts = tokenize_completion_prompts(prompts, *ctx.tokenizer);
    for (const CompletionPrompt& p : prompts) {
        const auto* text = std::get_if<std::string>(&p);
        r.prompt_texts.push_back(text ? std::optional<std::string>(*text) : std::nullopt);
    }
    check_context_length(r, ctx.n_ctx, "prompt");
    return r;
}

}  // namespace loom::gateway
