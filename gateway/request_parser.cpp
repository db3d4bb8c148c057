// Validation of the request fields both endpoints share; see request_parser.hpp.
#include "gateway/request_parser.hpp"

#include <rapidjson/error/en.h>

#include "gateway/json_fields.hpp"
#include "gateway/json_input.hpp"
#include "gateway/known_params.hpp"
#include "gateway/quote.hpp"
#include "gateway/sampling_params.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

std::vector<std::string> stops(const Value& body) {
    const Value* s = find_field(body, "stop");
    std::vector<std::string> out;
    if (!s) return out;
    if (s->IsString()) {
        out.emplace_back(s->GetString(), s->GetStringLength());
    } else if (s->IsArray()) {
        if (s->Size() > 4) bad_request("stop", "'stop' takes at most 4 sequences");
        for (const Value& e : s->GetArray()) {
            if (!e.IsString()) bad_request("stop", "'stop' must be a string or an array of strings");
            out.emplace_back(e.GetString(), e.GetStringLength());
        }
    } else {
        bad_request("stop", "'stop' must be a string or an array of strings");
    }
    for (const auto& x : out)
        if (x.empty()) bad_request("stop", "stop sequences must not be empty");
    return out;
}

void parse_stream(const Value& body, GenerationRequest& r) {
    r.stream = boolean_field(body, "stream", false);
    if (const Value* so = find_field(body, "stream_options")) {
        if (!r.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (!so->IsObject()) bad_request("stream_options", "'stream_options' must be an object");
        // OpenAI's keys and vLLM's continuous_usage_stats (usage on every chunk, with
        // include_usage); loom pads no events, whatever include_obfuscation says.
        check_nested_keys(*so, "stream_options", {"include_usage", "continuous_usage_stats", "include_obfuscation"});
        r.include_usage = boolean_field(*so, "include_usage", false);
        r.continuous_usage = boolean_field(*so, "continuous_usage_stats", false) && r.include_usage;
        boolean_field(*so, "include_obfuscation", false);
    }
}

}  // namespace

rapidjson::Document parse_json_object(std::string_view body) {
    rapidjson::Document doc;
    parse_json_body(doc, body);
    if (!doc.IsObject()) bad_request("", "the request body must be a JSON object");
    return doc;
}

GenerationRequest parse_common_fields(const Value& body, Endpoint endpoint, const ModelContext& ctx) {
    GenerationRequest r;
    r.endpoint = endpoint;
    // `model` may be left out: this server serves one model (as vLLM allows).
    const Value* model = find_field(body, "model");
    if (model && !model->IsString()) bad_request("model", "'model' must be a string");
    r.model = model ? model->GetString() : ctx.model_id;
    if (r.model != ctx.model_id)
        throw ApiError(404,
                       "The model " + quoted(r.model) + " does not exist; this server serves '" + ctx.model_id + "'",
                       "model", "model_not_found");
    r.n = static_cast<int>(integer_field(body, "n", 1, 128).value_or(1));
    if (auto b = integer_field(body, "best_of", 1, 128); b && *b != r.n)
        bad_request("best_of", "'best_of' must equal 'n' if given");
    r.sampling = parse_sampling_params(body, *ctx.tokenizer);
    parse_stream(body, r);
    r.stop = stops(body);
    r.tokens_as_ids = boolean_field(body, "return_tokens_as_token_ids", false);
    // vLLM's extensions: the prompt's logprobs (K alternatives, 0..20; vLLM's -1, the
    // whole vocabulary, is refused) and the token ids of prompt and completion.
    if (auto k = integer_field(body, "prompt_logprobs", 0, protocol::kMaxLogprobs))
        r.prompt_logprobs = static_cast<int>(*k);
    r.return_token_ids = boolean_field(body, "return_token_ids", false);
    std::optional<int64_t> mt = integer_field(body, "max_completion_tokens", 0, ctx.n_ctx);
    if (!mt) mt = integer_field(body, "max_tokens", 0, ctx.n_ctx);
    r.max_tokens = mt;
    return r;
}

}  // namespace loom::gateway
