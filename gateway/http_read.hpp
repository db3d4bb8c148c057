// Reading one HTTP/1.1 request with Beast's parser, strict about the message framing, so
// that no byte of one request can be taken for the start of another (request smuggling)
// and a malformed request is refused at once instead of waiting for the read timeout.
//
// Beast's basic_parser (Boost 1.74) is fed here, as http::async_read would feed it, with
// three checks added between the reads:
// - Transfer-Encoding (RFC 9112 §6.1, §6.3): a request that has one must have exactly one,
//   `chunked` (case-insensitive), in HTTP/1.1. Beast treats `gzip`, `identity`, `chunked,
//   identity` or `"chunked"` as "no body" and would read the body as the next request.
// - Line endings (RFC 9112 §2.2): every line of the header and of the chunked framing ends in
//   CRLF. Beast waits for a CRLF that a bare-LF client never sends; here a bare LF in the
//   unparsed bytes is refused as soon as it arrives.
// - Obsolete line folding (RFC 9112 §5.2: a server may reject it with 400) and chunk-size
//   lines or trailer sections longer than the header limit, which Beast would buffer
//   without bound.
//
// Source: RFC 9112 (HTTP/1.1) §2.2, §5.2, §6.1, §6.3, §7.1; Boost.Beast 1.74's
// http/impl/read.hpp (read_some_op: parse what is buffered, read when it needs more).
#pragma once

#include <string>

#include "gateway/net.hpp"

namespace loom::gateway {

/// The parser the server reads requests with.
using RequestParser = http::request_parser<http::string_body>;

/// How reading a request part ended: `ec` is Beast's or the socket's error
/// (http::error::end_of_stream: the client closed between requests; body_limit,
/// header_limit; a parse error), or, with no error, `refusal` says why the message's framing
/// is refused (answer 400 and close: the rest of the connection cannot be trusted). Both
/// empty: the part was read.
struct ReadResult {
    boost::system::error_code ec;
    std::string refusal;
};

/// Reads until `parser` has the whole header (the bytes already in `buf` first, as Beast
/// does), then checks the framing the header declares (Transfer-Encoding; obsolete line
/// folding). The stream's own expiry bounds the wait.
asio::awaitable<ReadResult> read_request_header(beast::tcp_stream& stream, beast::flat_buffer& buf,
                                                RequestParser& parser);

/// Reads the body after read_request_header (nothing when the message has none). A bare LF
/// in a chunk-size line or the trailer section, or such a line over `max_line` bytes, is a
/// refusal.
asio::awaitable<ReadResult> read_request_body(beast::tcp_stream& stream, beast::flat_buffer& buf, RequestParser& parser,
                                              size_t max_line);

/// Why the framing of a request with header `h` is refused, or "" (see the file comment):
/// Transfer-Encoding other than one `chunked` field in HTTP/1.1.
std::string transfer_encoding_refusal(const http::request_header<>& h);

}  // namespace loom::gateway
