// Strict reading of one request's header and body; see http_read.hpp.
#include "gateway/http_read.hpp"

#include <string_view>

#include "gateway/quote.hpp"

namespace loom::gateway {
namespace {

constexpr size_t kReadSize = 64 * 1024;  // bytes asked of the socket per read, as Beast's read

// The offset of the first LF in `s` at or after `from` that no CR precedes, or npos.
size_t bare_lf(std::string_view s, size_t from) {
    for (size_t i = s.find('\n', from); i != std::string_view::npos; i = s.find('\n', i + 1))
        if (i == 0 || s[i - 1] != '\r') return i;
    return std::string_view::npos;
}

// True when the header bytes `h` (the start line, the fields, the empty line) hold an
// obsolete line folding: a line that begins with a space or a tab.
bool has_obs_fold(std::string_view h) {
    for (size_t i = h.find("\r\n"); i != std::string_view::npos; i = h.find("\r\n", i + 2))
        if (i + 2 < h.size() && (h[i + 2] == ' ' || h[i + 2] == '\t')) return true;
    return false;
}

std::string_view as_view(const beast::flat_buffer& buf) {
    const auto d = buf.data();
    return {static_cast<const char*>(d.data()), d.size()};
}

// Feeds `parser` from `buf`, reading the stream when it needs more, until it has the header
// (header_only) or the whole message. Beast's read loop, plus the checks of the file comment
// on the bytes it has not parsed yet. `max_pending`: most unparsed bytes allowed once the
// header is done (a chunk-size line or the trailers); 0: no limit of ours.
asio::awaitable<ReadResult> feed(beast::tcp_stream& stream, beast::flat_buffer& buf, RequestParser& parser,
                                 bool header_only, size_t max_pending) {
    ReadResult r;
    auto& ec = r.ec;
    parser.eager(!header_only);
    size_t checked = 0;  // unparsed bytes at the front of buf already checked for a bare LF
    auto done = [&] { return header_only ? parser.is_header_done() : parser.is_done(); };
    while (!done()) {
        if (buf.size() > 0) {
            const bool had_header = parser.is_header_done();
            const size_t used = parser.put(buf.data(), ec);
            if (!had_header && parser.is_header_done() && has_obs_fold(as_view(buf).substr(0, used)))
                r.refusal = "obsolete line folding (a header line that begins with a space or a tab)";
            buf.consume(used);
            if (used > 0) checked = 0;
            if (!r.refusal.empty()) co_return r;
            if (ec && ec != http::error::need_more) co_return r;
            const bool need_more = ec == http::error::need_more;
            ec = {};
            if (!need_more) continue;
            // Beast could not go on: what is left is an unfinished line (the header, a
            // chunk-size line, the trailers), where every LF must follow a CR.
            const std::string_view rest = as_view(buf);
            if (bare_lf(rest, checked > 0 ? checked - 1 : 0) != std::string_view::npos) {
                r.refusal = std::string("a line of the ") + (parser.is_header_done() ? "chunked framing" : "header") +
                            " ends in a bare LF; HTTP/1.1 lines end in CRLF";
                co_return r;
            }
            checked = rest.size();
            if (max_pending > 0 && parser.is_header_done() && rest.size() > max_pending) {
                r.refusal =
                    "a chunk-size line or the trailer section exceeds " + std::to_string(max_pending) + " bytes";
                co_return r;
            }
        }
        const size_t n =
            co_await stream.async_read_some(buf.prepare(kReadSize), asio::redirect_error(asio::use_awaitable, ec));
        buf.commit(n);
        if (ec == asio::error::eof) {
            ec = {};
            if (!parser.got_some()) {
                ec = http::error::end_of_stream;
                co_return r;
            }
            parser.put_eof(ec);  // partial_message unless the message was complete
            co_return r;
        }
        if (ec) co_return r;
    }
    co_return r;
}

}  // namespace

std::string transfer_encoding_refusal(const http::request_header<>& h) {
    const auto range = h.equal_range(http::field::transfer_encoding);
    if (range.first == range.second) return "";
    if (h.version() < 11) return "an HTTP/1.0 request cannot use Transfer-Encoding";
    if (std::next(range.first) != range.second) return "more than one Transfer-Encoding field";
    const auto v = range.first->value();
    std::string_view value(v.data(), v.size());
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (beast::iequals(beast::string_view(value.data(), value.size()), "chunked")) return "";
    return "Transfer-Encoding " + quoted(value, 100) + " is not supported: loom reads 'chunked' alone";
}

asio::awaitable<ReadResult> read_request_header(beast::tcp_stream& stream, beast::flat_buffer& buf,
                                                RequestParser& parser) {
    ReadResult r = co_await feed(stream, buf, parser, true, 0);
    if (!r.ec && r.refusal.empty()) r.refusal = transfer_encoding_refusal(parser.get().base());
    co_return r;
}

asio::awaitable<ReadResult> read_request_body(beast::tcp_stream& stream, beast::flat_buffer& buf, RequestParser& parser,
                                              size_t max_line) {
    co_return co_await feed(stream, buf, parser, false, max_line);
}

}  // namespace loom::gateway
