// Typed reads of request-body fields; see json_fields.hpp.
#include "gateway/json_fields.hpp"

#include <cmath>

namespace loom::gateway {

using rapidjson::Value;

void bad_request(const std::string& param, const std::string& msg, const std::string& code) {
    throw ApiError(400, msg, param, code);
}

const Value* find_field(const Value& obj, const char* name) {
    auto it = obj.FindMember(name);
    if (it == obj.MemberEnd() || it->value.IsNull()) return nullptr;
    return &it->value;
}

double number_field(const Value& obj, const char* name, double fallback, double lo, double hi) {
    const Value* v = find_field(obj, name);
    if (!v) return fallback;
    if (!v->IsNumber()) bad_request(name, std::string("'") + name + "' must be a number");
    const double d = v->GetDouble();
    if (!(d >= lo && d <= hi))
        bad_request(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                              std::to_string(hi) + ", got " + std::to_string(d));
    return d;
}

std::optional<int64_t> integer_field(const Value& obj, const char* name, int64_t lo, int64_t hi) {
    const Value* v = find_field(obj, name);
    if (!v) return std::nullopt;
    if (!v->IsInt64() &&
        !(v->IsDouble() && std::floor(v->GetDouble()) == v->GetDouble() && std::fabs(v->GetDouble()) < 9e15))
        bad_request(name, std::string("'") + name + "' must be an integer");
    const int64_t i = v->IsInt64() ? v->GetInt64() : static_cast<int64_t>(v->GetDouble());
    if (i < lo || i > hi)
        bad_request(name, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                              std::to_string(hi) + ", got " + std::to_string(i));
    return i;
}

bool boolean_field(const Value& obj, const char* name, bool fallback) {
    const Value* v = find_field(obj, name);
    if (!v) return fallback;
    if (!v->IsBool()) bad_request(name, std::string("'") + name + "' must be a boolean");
    return v->GetBool();
}

int32_t token_id(const Value& v, const std::string& param, const model::Tokenizer& tok) {
    if (!v.IsInt64()) bad_request(param, "'" + param + "' must hold integer token ids");
    const int64_t id = v.GetInt64();
    if (id < 0 || id >= tok.n_vocab())
        bad_request(param, "token id " + std::to_string(id) + " in '" + param + "' is outside the vocabulary (0.." +
                               std::to_string(tok.n_vocab() - 1) + ")");
    return static_cast<int32_t>(id);
}

std::vector<int32_t> token_ids(const Value& v, const std::string& param, const model::Tokenizer& tok) {
    std::vector<int32_t> out;
    for (const Value& e : v.GetArray()) out.push_back(token_id(e, param, tok));
    return out;
}

}  // namespace loom::gateway
