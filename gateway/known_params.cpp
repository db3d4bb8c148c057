// The request members loom knows, per endpoint, and the check; see known_params.hpp.
// To add a member: one line in the table (and docs/api.md's list).
#include "gateway/known_params.hpp"

#include <algorithm>

#include "gateway/api_types.hpp"
#include "gateway/quote.hpp"

namespace loom::gateway {
namespace {

constexpr unsigned C = 1u << static_cast<unsigned>(ParamSet::Completions);
constexpr unsigned H = 1u << static_cast<unsigned>(ParamSet::Chat);
constexpr unsigned R = 1u << static_cast<unsigned>(ParamSet::Responses);
// Most unknown names one error message lists (the rest are counted).
constexpr size_t kMaxNamesListed = 10;

constexpr auto Hon = ParamUse::Honoured, NoOp = ParamUse::NoOp, Def = ParamUse::DefaultOnly, Ref = ParamUse::Refused;

}  // namespace

const std::vector<KnownParam>& known_params() {
    static const std::vector<KnownParam> table = {
        // OpenAI, honoured.
        {"model", C | H | R, Hon, ""},
        {"prompt", C, Hon, ""},
        {"messages", H, Hon, ""},
        {"input", R, Hon, ""},
        {"instructions", R, Hon, ""},
        {"max_tokens", C | H, Hon, ""},
        {"max_completion_tokens", H, Hon, ""},
        {"max_output_tokens", R, Hon, ""},
        {"temperature", C | H | R, Hon, ""},
        {"top_p", C | H | R, Hon, ""},
        {"n", C | H, Hon, ""},
        {"best_of", C, Hon, ""},
        {"stream", C | H | R, Hon, ""},
        {"stream_options", C | H | R, Hon, ""},
        {"logprobs", C | H, Hon, ""},
        {"top_logprobs", H | R, Hon, ""},
        {"echo", C, Hon, ""},
        {"stop", C | H, Hon, ""},
        {"presence_penalty", C | H | R, Hon, ""},
        {"frequency_penalty", C | H | R, Hon, ""},
        {"logit_bias", C | H | R, Hon, ""},
        {"seed", C | H | R, Hon, ""},
        {"tools", H | R, Hon, ""},
        {"tool_choice", H | R, Hon, ""},
        {"parallel_tool_calls", H | R, Hon, ""},
        {"response_format", C | H, Hon, ""},  // json_object / json_schema: the engine's grammar (grammar_spec.hpp)
        {"text", R, Hon, ""},
        {"reasoning_effort", H, Hon, ""},  // where the chat template reads it
        {"reasoning", R, Hon, ""},
        {"include", R, Hon, ""},
        {"previous_response_id", R, Hon, ""},
        {"store", R, Hon, ""},
        // OpenAI, changing nothing for loom.
        {"user", C | H | R, NoOp, "string"},
        {"metadata", C | H | R, NoOp, "string map"},
        {"service_tier", C | H | R, NoOp, "string"},
        {"safety_identifier", C | H | R, NoOp, "string"},
        {"prompt_cache_key", C | H | R, NoOp, "string"},
        {"store", C | H, Def, "false"},  // chat/completions are stateless: nothing is stored
        {"modalities", H, Def, "[\"text\"]"},
        {"truncation", R, Def, "\"disabled\""},
        {"background", R, Def, "false"},  // loom does not run responses in the background
        // OpenAI, known but not honoured.
        {"suffix", C, Ref, "suffix (fill-in-the-middle) is not supported"},
        {"functions", H, Ref, "it is deprecated; use 'tools'"},
        {"function_call", H, Ref, "it is deprecated; use 'tool_choice'"},
        {"audio", H, Ref, "loom generates text only"},
        {"prediction", H, Ref, "predicted outputs are not supported"},
        {"web_search_options", H, Ref, "loom has no web search"},
        {"verbosity", H | R, Ref, "loom cannot steer a model's verbosity"},
        {"conversation", R, Ref, "loom keeps no conversations"},
        {"prompt", R, Ref, "stored prompt templates are not supported"},
        {"max_tool_calls", R, Ref, "a limit on built-in tool calls is not supported"},
        // vLLM's extensions, honoured.
        {"top_k", C | H | R, Hon, ""},
        {"min_p", C | H | R, Hon, ""},
        {"repetition_penalty", C | H | R, Hon, ""},
        {"allowed_token_ids", C | H | R, Hon, ""},
        {"logprobs_mode", C | H | R, Hon, ""},
        {"ignore_eos", C | H | R, Hon, ""},
        {"return_tokens_as_token_ids", C | H | R, Hon, ""},
        {"prompt_logprobs", C | H, Hon, ""},
        {"return_token_ids", C | H, Hon, ""},
        {"chat_template_kwargs", H, Hon, ""},  // keys the template never reads are ignored
        {"add_generation_prompt", H, Hon, ""},
        {"guided_json", C | H, Hon, ""},  // the guided_* and structured_outputs: the engine's grammar
        {"guided_regex", C | H, Hon, ""},
        {"guided_choice", C | H, Hon, ""},
        {"guided_grammar", C | H, Hon, ""},  // parsed, then refused by grammar_spec.hpp (no grammar texts yet)
        {"structured_outputs", C | H, Hon, ""},
        // vLLM's extensions, changing nothing for loom.
        // vLLM's extensions, only at their defaults.
        {"skip_special_tokens", C | H, Def, "true"},
        {"spaces_between_special_tokens", C | H, Def, "true"},
        {"include_stop_str_in_output", C | H, Def, "false"},
        {"add_special_tokens", C, Def, "true"},
        {"add_special_tokens", H, Def, "false"},
        {"echo", H, Def, "false"},
        {"continue_final_message", H, Def, "false"},
        {"detokenize", C | H, Def, "true"},
        {"min_tokens", C | H, Def, "0"},
        {"stop_token_ids", C | H, Def, "[]"},
        {"bad_words", C | H, Def, "[]"},
        {"priority", C | H, Def, "0"},
        {"use_beam_search", C | H, Def, "false"},
        {"length_penalty", C | H, Def, "1"},
        // vLLM's extensions, not honoured.
        {"cache_salt", C | H, Ref, "the engine's prefix cache is shared by every request and takes no salt"},
        {"truncate_prompt_tokens", C | H, Ref, "loom never truncates a prompt"},
        {"request_id", C | H, Ref, "loom makes its own request ids"},
        {"chat_template", H, Ref, "a chat template per request is not supported"},
        {"documents", H, Ref, "documents for the chat template are not supported"},
        {"mm_processor_kwargs", H, Ref, "loom serves text models only"},
        {"prompt_embeds", C, Ref, "prompt embeddings are not supported"},
        {"logits_processors", C | H, Ref, "custom logits processors are not supported"},
        {"kv_transfer_params", C | H, Ref, "KV cache transfer is not supported"},
        {"vllm_xargs", C | H, Ref, "vLLM's extra arguments are not supported"},
    };
    return table;
}

namespace {

const KnownParam* find_param(std::string_view name, unsigned bit) {
    for (const KnownParam& k : known_params())
        if (k.name == name && (k.sets & bit)) return &k;
    return nullptr;
}

// OpenAI's 400 for unknown member names (none: returns). The names are the client's: each is
// cut (quote.hpp) and at most kMaxNamesListed are listed, so that a 1 MiB name or 100,000
// names still give a short message.
void refuse_unknown(const std::vector<std::string>& unknown) {
    if (unknown.size() == 1)
        throw ApiError(400, "Unrecognized request argument supplied: " + cut(unknown[0]), cut(unknown[0]));
    if (!unknown.empty()) {
        std::string list;
        for (size_t i = 0; i < unknown.size() && i < kMaxNamesListed; ++i)
            list += (list.empty() ? "" : ", ") + cut(unknown[i], kQuoteMax / 2);
        if (unknown.size() > kMaxNamesListed)
            list += " and " + std::to_string(unknown.size() - kMaxNamesListed) + " more";
        throw ApiError(400, "Unrecognized request arguments supplied: " + list);
    }
}

}  // namespace

void check_nested_keys(const rapidjson::Value& obj, std::string_view where,
                       std::initializer_list<std::string_view> known) {
    if (!obj.IsObject()) return;
    std::vector<std::string> unknown;
    for (auto m = obj.MemberBegin(); m != obj.MemberEnd(); ++m) {
        const std::string_view k(m->name.GetString(), m->name.GetStringLength());
        if (std::find(known.begin(), known.end(), k) == known.end())
            unknown.push_back(std::string(where) + "." + std::string(k));
    }
    refuse_unknown(unknown);
}

void check_known_params(const rapidjson::Value& body, ParamSet set) {
    const unsigned bit = 1u << static_cast<unsigned>(set);
    std::vector<std::string> unknown;
    for (auto m = body.MemberBegin(); m != body.MemberEnd(); ++m)
        if (!find_param(std::string_view(m->name.GetString(), m->name.GetStringLength()), bit))
            unknown.emplace_back(m->name.GetString(), m->name.GetStringLength());
    refuse_unknown(unknown);
    for (auto m = body.MemberBegin(); m != body.MemberEnd(); ++m) {
        const std::string n(m->name.GetString(), m->name.GetStringLength());
        const KnownParam& p = *find_param(n, bit);
        const rapidjson::Value& v = m->value;
        if (v.IsNull()) continue;
        switch (p.use) {
            case ParamUse::Honoured: break;
            case ParamUse::NoOp: {
                bool ok = v.IsString();
                if (p.detail == "string map") {
                    ok = v.IsObject();
                    for (auto it = ok ? v.MemberBegin() : v.MemberEnd(); ok && it != v.MemberEnd(); ++it)
                        ok = it->value.IsString();
                }
                if (!ok)
                    throw ApiError(
                        400, "'" + n + "' must be " + (p.detail == "string" ? "a string" : "an object of strings"), n);
                break;
            }
            case ParamUse::DefaultOnly: {
                rapidjson::Document def;
                def.Parse(p.detail.data(), p.detail.size());
                if (!(v == def))
                    throw ApiError(400,
                                   "'" + n + "' is only supported at its default (" + std::string(p.detail) +
                                       "): loom cannot honour another value",
                                   n, "unsupported_parameter");
                break;
            }
            case ParamUse::Refused:
                throw ApiError(400, "'" + n + "' is not supported: " + std::string(p.detail), n,
                               "unsupported_parameter");
        }
    }
}

}  // namespace loom::gateway
