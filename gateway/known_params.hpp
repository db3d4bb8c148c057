// Nothing silently ignored: every top-level member of a request body must be one loom
// knows for that endpoint. Unknown members get OpenAI's 400 ("Unrecognized request
// argument supplied: NAME"); members that change nothing for loom (user, metadata,
// ...) are accepted by name; members loom knows but cannot honour get a 400 saying
// why. The one list of names is gateway/known_params.cpp (docs/api.md, "Request
// parameters", documents it).
//
// Source: the OpenAI API reference (chat completions, completions and responses
// request bodies; the error for unrecognized arguments) and vLLM's extra sampling
// and chat parameters.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

namespace loom::gateway {

/// The request bodies whose members are checked.
enum class ParamSet { Completions, Chat, Responses };

/// How loom treats a known member.
enum class ParamUse {
    Honoured,     ///< parsed and acted on by the endpoint
    NoOp,         ///< changes nothing for loom; accepted (its type is checked)
    DefaultOnly,  ///< only its default value is accepted (any other cannot be honoured)
    Refused,      ///< known, cannot be honoured: 400 with the reason
};

/// One known member.
struct KnownParam {
    std::string_view name;
    unsigned sets;  ///< bit (1 << ParamSet) per endpoint that knows it
    ParamUse use;
    std::string_view detail;  ///< NoOp: the JSON type required ("string", "object", "string map",
                              ///< "text modalities"); DefaultOnly: the default as JSON;
                              ///< Refused: why
};

/// The table (for docs/api.md and tests).
const std::vector<KnownParam>& known_params();

/// Throws ApiError(400) when `body` (a JSON object) has a member unknown for `set`
/// (the unknown names in one message, as OpenAI lists them: the first 10, each cut to
/// 100 bytes as quote.hpp cuts, then how many more), a NoOp member of the
/// wrong type, a DefaultOnly member with another value, or a Refused member (a null
/// value counts as absent). Returns normally otherwise.
void check_known_params(const rapidjson::Value& body, ParamSet set);

/// Throws ApiError(400), as check_known_params() does for the top level ("Unrecognized
/// request argument supplied: WHERE.KEY", param WHERE.KEY), when object `obj` (the member
/// `where` of a body, e.g. "stream_options") has a member whose name is not in `known`.
/// Does nothing when `obj` is not an object (its own check says what it must be).
void check_nested_keys(const rapidjson::Value& obj, std::string_view where,
                       std::initializer_list<std::string_view> known);

}  // namespace loom::gateway
