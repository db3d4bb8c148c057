// The playground's files (gateway/static/*), embedded in loom-gateway at build time
// (gateway/embed_static.cmake generates their byte arrays), served at / and /static/.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace loom::gateway {

/// An embedded file: its name under gateway/static/, its bytes and its media type.
struct StaticAsset {
    std::string_view name, body, content_type;
};

/// Every embedded file as (name, bytes), in the order the build listed them.
const std::vector<std::pair<std::string_view, std::string_view>>& static_files();

/// The file served for URL path `path`: "/" is index.html, "/static/<name>" the file
/// <name>. Returns false for any other path (including names with a '/' or "..").
/// The media type follows the extension (RFC 9239 for .js; WHATWG MIME sniffing's
/// table for .html, .css, .png, .svg).
bool find_static_asset(std::string_view path, StaticAsset& out);

}  // namespace loom::gateway
