// libFuzzer target for the engine protocol's line parser (protocol/, docs/protocol.md):
// both directions, engine lines and gateway lines.
//
// Any input must be parsed without a crash, an exception or a sanitizer report into a
// line or a ParseError. A parsed line must format without throwing, and formatting is
// a fixed point: parse(format(line)) formats to the same bytes (what one side writes,
// the other reads back unchanged). Error messages quote at most a bounded piece of the
// input. Built with clang when -DLOOM_FUZZ=ON; run by scripts/test.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/protocol.hpp"

namespace {

using namespace loom::protocol;

template <typename Line, typename Parse>
void round_trip(std::string_view input, Parse parse) {
    auto first = parse(input);
    if (auto* err = std::get_if<ParseError>(&first)) {
        if (err->message.size() > 1024) __builtin_trap();  // an error must not echo the input whole
        if (err->id != "-" && !valid_id(err->id)) __builtin_trap();
        return;
    }
    const std::string a = format(std::get<Line>(first));
    auto second = parse(a);
    if (!std::holds_alternative<Line>(second)) __builtin_trap();  // what we write, we must read
    if (format(std::get<Line>(second)) != a) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    // One line at a time, as the readers split their input.
    if (input.find('\n') != std::string_view::npos && input.find('\n') + 1 < input.size()) return 0;
    round_trip<EngineLine>(input, [](std::string_view l) { return parse_engine_line(l); });
    round_trip<GatewayLine>(input, [](std::string_view l) { return parse_gateway_line(l); });
    return 0;
}
