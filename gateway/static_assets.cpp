// Lookup of the embedded playground files; see static_assets.hpp.
#include "gateway/static_assets.hpp"

namespace loom::gateway {
namespace {

std::string_view media_type(std::string_view name) {
    auto ends = [&](std::string_view ext) {
        return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
    };
    if (ends(".html")) return "text/html; charset=utf-8";
    if (ends(".css")) return "text/css; charset=utf-8";
    if (ends(".js")) return "text/javascript; charset=utf-8";
    if (ends(".svg")) return "image/svg+xml";
    if (ends(".png")) return "image/png";
    return "application/octet-stream";
}

}  // namespace

bool find_static_asset(std::string_view path, StaticAsset& out) {
    std::string_view name;
    if (path == "/") name = "index.html";
    else if (path.starts_with("/static/")) name = path.substr(8);
    else return false;
    if (name.empty() || name.find('/') != std::string_view::npos || name.find("..") != std::string_view::npos)
        return false;
    for (const auto& [n, body] : static_files())
        if (n == name) {
            out = StaticAsset{n, body, media_type(n)};
            return true;
        }
    return false;
}

}  // namespace loom::gateway
