// Sampling-field validation and the request -> GEN conversion; see sampling_params.hpp.
#include "gateway/sampling_params.hpp"

#include <cstdlib>
#include <limits>
#include <string>

#include "gateway/json_fields.hpp"
#include "gateway/quote.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

std::vector<std::pair<int32_t, float>> logit_bias(const Value& lb, const model::Tokenizer& tok) {
    if (!lb.IsObject()) bad_request("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    std::vector<std::pair<int32_t, float>> out;
    for (auto it = lb.MemberBegin(); it != lb.MemberEnd(); ++it) {
        const std::string_view key(it->name.GetString(), it->name.GetStringLength());
        // Decimal digits only (no sign, space or embedded NUL), at most 10 of them.
        const bool digits =
            !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string_view::npos;
        const long long id = digits ? std::stoll(std::string(key)) : -1;
        if (!digits || id >= tok.n_vocab())
            bad_request("logit_bias", "logit_bias key " + quoted(key) + " is not a token id in the vocabulary");
        if (!it->value.IsNumber() || it->value.GetDouble() < -100 || it->value.GetDouble() > 100)
            bad_request("logit_bias", "logit_bias values must be numbers between -100 and 100");
        out.emplace_back(static_cast<int32_t>(id), static_cast<float>(it->value.GetDouble()));
    }
    return out;
}

// The seed as GEN takes it: 64-bit seeds above INT64_MAX as they are, negative ones wrapped.
std::optional<uint64_t> seed(const Value& body) {
    if (const Value* sv = find_field(body, "seed"); sv && sv->IsUint64()) return sv->GetUint64();
    if (auto s = integer_field(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        return static_cast<uint64_t>(*s);
    return std::nullopt;
}

bool processed_logprobs(const Value& body) {
    const Value* mode = find_field(body, "logprobs_mode");
    if (!mode) return false;
    const std::string m = mode->IsString() ? mode->GetString() : "";
    if (m == "processed" || m == "processed_logprobs") return true;
    if (m != "raw" && m != "raw_logprobs")
        bad_request("logprobs_mode", "'logprobs_mode' must be \"raw\" or \"processed\"");
    return false;
}

}  // namespace

protocol::Gen parse_sampling_params(const Value& body, const model::Tokenizer& tok) {
    protocol::Gen g;
    g.temperature = static_cast<float>(number_field(body, "temperature", 1.0, 0.0, 2.0));
    g.top_p = static_cast<float>(number_field(body, "top_p", 1.0, 0.0, 1.0));
    if (g.top_p <= 0.0f) bad_request("top_p", "'top_p' must be greater than 0");
    const int64_t top_k = integer_field(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0);
    g.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);
    g.min_p = static_cast<float>(number_field(body, "min_p", 0.0, 0.0, 1.0));
    g.seed = seed(body);
    g.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", 0.0, -2.0, 2.0));
    g.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", 0.0, -2.0, 2.0));
    g.repetition_penalty = static_cast<float>(number_field(body, "repetition_penalty", 1.0, 1e-3, 100.0));
    if (const Value* lb = find_field(body, "logit_bias")) g.logit_bias = logit_bias(*lb, tok);
    if (const Value* al = find_field(body, "allowed_token_ids")) {
        if (!al->IsArray() || al->Empty())
            bad_request("allowed_token_ids", "'allowed_token_ids' must be a non-empty array of token ids");
        g.allowed = token_ids(*al, "allowed_token_ids", tok);
    }
    g.processed_logprobs = processed_logprobs(body);
    g.ignore_eos = boolean_field(body, "ignore_eos", false);  // vLLM's extension
    return g;
}

protocol::Gen gen_for_choice(const GenerationRequest& r, size_t prompt_index, int sample, int64_t n_ctx) {
    protocol::Gen gen = r.sampling;
    gen.prompt = r.prompts[prompt_index];
    gen.max_tokens = r.max_tokens.value_or(n_ctx - static_cast<int64_t>(gen.prompt.size()));
    if (r.logprobs) gen.logprobs = r.top_logprobs;
    if (r.echo && r.logprobs) gen.prompt_logprobs = r.top_logprobs;
    if (r.prompt_logprobs) gen.prompt_logprobs = std::max(gen.prompt_logprobs.value_or(0), *r.prompt_logprobs);
    if (gen.seed && sample > 0) gen.seed = *gen.seed + static_cast<uint64_t>(sample);
    return gen;
}

}  // namespace loom::gateway
