// The networking headers the gateway uses (Boost.Asio, Beast, Process), in one place.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/process.hpp>

namespace loom::gateway {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace bp = boost::process;
using tcp = boost::asio::ip::tcp;
}  // namespace loom::gateway
