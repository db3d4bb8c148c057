// Strict parsing of JSON request bodies: what RapidJSON accepts but RFC 8259 or a
// careful server should not (lone surrogates, duplicate keys, invalid UTF-8, nesting
// deep enough to exhaust a recursive reader).
//
// Source: RFC 8259 (sections 4 "names within an object SHOULD be unique", 7 strings and
// \u escapes, 8.1 UTF-8), RFC 3629 (UTF-8 excludes the surrogates U+D800..U+DFFF).
#pragma once

#include <string_view>

#include <rapidjson/document.h>

namespace loom::gateway {

/// Deepest nesting of arrays and objects a request body may have.
inline constexpr int kMaxJsonDepth = 128;

/// Parses `body` into `doc` (iteratively: no recursion on deep input). Throws
/// ApiError(400) when the body is not valid JSON (the message gives the byte offset),
/// is not UTF-8, holds a \u escape of a lone UTF-16 surrogate (high or low), repeats
/// a key within one object, or nests deeper than kMaxJsonDepth.
void parse_json_body(rapidjson::Document& doc, std::string_view body);

}  // namespace loom::gateway
