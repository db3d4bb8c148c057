// Strict JSON body parsing; see json_input.hpp.
#include "gateway/json_input.hpp"

#include <rapidjson/error/en.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gateway/api_types.hpp"
#include "gateway/quote.hpp"

namespace loom::gateway {
namespace {

using rapidjson::Value;

[[noreturn]] void bad(const std::string& msg) { throw ApiError(400, msg); }

// A \u escape of a lone surrogate comes out of RapidJSON as the 3-byte CESU form
// ED A0..BF xx (paired surrogates become one 4-byte character).
bool has_lone_surrogate(const Value& s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.GetString());
    const size_t n = s.GetStringLength();
    for (size_t k = 0; k + 1 < n; ++k)
        if (p[k] == 0xED && p[k + 1] >= 0xA0 && p[k + 1] <= 0xBF) return true;
    return false;
}

void check_string(const Value& s, const char* what) {
    if (has_lone_surrogate(s))
        bad(std::string("the request body holds a lone UTF-16 surrogate (\\uD800..\\uDFFF without its pair) in ") +
            what + " " + quoted(std::string_view(s.GetString(), s.GetStringLength()), 64));
}

void check_keys(const Value& obj) {
    const auto n = obj.MemberCount();
    if (n < 2) return;
    std::vector<std::string_view> keys;
    keys.reserve(n);
    for (auto it = obj.MemberBegin(); it != obj.MemberEnd(); ++it)
        keys.emplace_back(it->name.GetString(), it->name.GetStringLength());
    std::sort(keys.begin(), keys.end());
    for (size_t k = 1; k < keys.size(); ++k)
        if (keys[k] == keys[k - 1]) bad("the request body repeats the key " + quoted(keys[k]) + " in one object");
}

}  // namespace

void parse_json_body(rapidjson::Document& doc, std::string_view body) {
    constexpr unsigned kFlags = rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag;
    doc.Parse<kFlags>(body.data(), body.size());
    if (doc.HasParseError())
        bad(std::string("the request body is not valid JSON: ") + rapidjson::GetParseError_En(doc.GetParseError()) +
            " (at byte " + std::to_string(doc.GetErrorOffset()) + ")");
    // Walk the tree without recursion: depth, keys, strings.
    std::vector<std::pair<const Value*, int>> todo{{&doc, 1}};
    while (!todo.empty()) {
        auto [v, depth] = todo.back();
        todo.pop_back();
        if (v->IsString()) {
            check_string(*v, "a value");
        } else if (v->IsArray() || v->IsObject()) {
            if (depth > kMaxJsonDepth)
                bad("the request body nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels");
            if (v->IsArray()) {
                for (const Value& e : v->GetArray()) todo.emplace_back(&e, depth + 1);
            } else {
                check_keys(*v);
                for (auto it = v->MemberBegin(); it != v->MemberEnd(); ++it) {
                    check_string(it->name, "a key");
                    todo.emplace_back(&it->value, depth + 1);
                }
            }
        }
    }
}

}  // namespace loom::gateway
