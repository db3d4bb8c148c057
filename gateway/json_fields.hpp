// Typed, range-checked reads of the fields of an OpenAI request body (RapidJSON), each
// failing with ApiError(400) that names the offending field, as the OpenAI API reports
// invalid parameters ("param" in its error object).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "gateway/api_types.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// Throws ApiError(400, msg, param, code): the client's request is invalid.
[[noreturn]] void bad_request(const std::string& param, const std::string& msg, const std::string& code = {});

/// The member `name` of object `obj`, or null when it is absent or JSON null (the
/// OpenAI API treats an explicit null as "not given").
const rapidjson::Value* find_field(const rapidjson::Value& obj, const char* name);

/// Number field in [lo, hi]; `fallback` when absent. Throws ApiError(400) when it is
/// not a number or out of range.
double number_field(const rapidjson::Value& obj, const char* name, double fallback, double lo, double hi);

/// Integer field in [lo, hi] (a float with no fractional part below 9e15 counts);
/// nullopt when absent. Throws ApiError(400) when it is not an integer or out of range.
std::optional<int64_t> integer_field(const rapidjson::Value& obj, const char* name, int64_t lo, int64_t hi);

/// Boolean field; `fallback` when absent. Throws ApiError(400) when it is not a boolean.
bool boolean_field(const rapidjson::Value& obj, const char* name, bool fallback);

/// `v` as a token id of `tok`'s vocabulary (0..n_vocab-1). Throws ApiError(400, param)
/// when it is not an integer or outside the vocabulary.
int32_t token_id(const rapidjson::Value& v, const std::string& param, const model::Tokenizer& tok);

/// The JSON array `v` as token ids of `tok`'s vocabulary (see token_id()).
std::vector<int32_t> token_ids(const rapidjson::Value& v, const std::string& param, const model::Tokenizer& tok);

}  // namespace loom::gateway
