// Two RapidJSON writer helpers shared by the OpenAI response writers (response_json.cpp for
// chat/completions, responses_json.cpp for the Responses API).
#pragma once

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <string>
#include <string_view>

#include "gateway/text_assembler.hpp"
#include "protocol/protocol.hpp"

namespace loom::gateway::json_write {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

/// Writes s as a JSON string; bytes that are not valid UTF-8 are replaced by U+FFFD
/// (sanitize_utf8), so the output is always valid JSON.
inline void str(Writer& w, std::string_view s) {
    const std::string clean = valid_utf8(s) ? std::string(s) : sanitize_utf8(s);
    w.String(clean.data(), static_cast<rapidjson::SizeType>(clean.size()));
}

/// A logprob as the shortest decimal that reads back to the same float32
/// (protocol::format_float). -inf (a token the sampling filters removed) is -9999.0, as in the
/// OpenAI API; NaN, which a conforming engine never sends (the protocol refuses it), is written
/// the same way rather than as invalid JSON.
inline void logprob(Writer& w, float v) {
    const std::string s = std::isfinite(v) ? protocol::format_float(v) : std::string("-9999.0");
    w.RawValue(s.data(), s.size(), rapidjson::kNumberType);
}

}  // namespace loom::gateway::json_write
