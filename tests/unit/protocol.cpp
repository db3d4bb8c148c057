// Golden tests: the exact bytes of every protocol line type (docs/protocol.md), parse
// round trips, forward compatibility and malformed input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "protocol/protocol.hpp"

using namespace loom::protocol;

namespace {

template <typename T>
T engine_roundtrip(const std::string& line) {
    auto parsed = parse_engine_line(line);
    REQUIRE(std::holds_alternative<EngineLine>(parsed));
    auto& el = std::get<EngineLine>(parsed);
    REQUIRE(std::holds_alternative<T>(el));
    CHECK(format(el) == line);  // formatting the parsed line gives the same bytes
    return std::get<T>(el);
}

ParseError gateway_error(const std::string& line) {
    auto parsed = parse_gateway_line(line);
    REQUIRE(std::holds_alternative<ParseError>(parsed));
    return std::get<ParseError>(parsed);
}

}  // namespace

TEST_CASE("HELLO golden bytes") {
    Hello h;
    h.engine = "loom-engine-cpu";
    h.backend = "cpu";
    h.model = "My Model 7B";
    h.n_vocab = 512;
    h.n_ctx = 2048;
    h.bos = 1;
    h.eos = 2;
    h.eog = {2, 7};
    h.caps = {"logprobs", "allowed", "cancel"};
    const std::string line =
        "HELLO loom/1 engine=loom-engine-cpu backend=cpu model=My%20Model%207B n_vocab=512 n_ctx=2048 bos=1 eos=2 "
        "eog=2,7 caps=logprobs,allowed,cancel max_logprobs=20";
    CHECK(format(EngineLine{h}) == line);
    Hello back = engine_roundtrip<Hello>(line);
    CHECK(back.model == "My Model 7B");
    CHECK(back.eog == std::vector<TokenId>{2, 7});
    CHECK(back.has_cap("allowed"));
    CHECK_FALSE(back.has_cap("prompt_logprobs"));
}

TEST_CASE("T, LP, PLP, DONE, ERR golden bytes") {
    CHECK(format(EngineLine{Token{"r1", 432}}) == "T r1 432");
    CHECK(format(EngineLine{Logprobs{"r1", -0.031780876f, {{432, -0.031780876f}, {383, -3.5473039f}}}}) ==
          "LP r1 -0.031780876 432:-0.031780876 383:-3.547304");
    CHECK(format(EngineLine{Logprobs{"r1", -0.5f, {}}}) == "LP r1 -0.5");
    CHECK(format(EngineLine{Logprobs{"a.b-c_9", -std::numeric_limits<float>::infinity(), {{7, -INFINITY}}}}) ==
          "LP a.b-c_9 -inf 7:-inf");
    CHECK(format(EngineLine{PromptLogprobs{"r4", 0, std::nullopt, {}}}) == "PLP r4 0 -");
    CHECK(format(EngineLine{PromptLogprobs{"r4", 1, -6.601167f, {{403, -0.2437433f}}}}) ==
          "PLP r4 1 -6.601167 403:-0.2437433");
    CHECK(format(EngineLine{Done{"r1", "length", 5, 8}}) == "DONE r1 length prompt_tokens=5 completion_tokens=8");
    CHECK(format(EngineLine{Done{"r2", "stop", 40, 3, 32}}) ==
          "DONE r2 stop prompt_tokens=40 completion_tokens=3 cached_tokens=32");
    CHECK(format(EngineLine{Error{"r3", "prompt token id out of range\nsecond line"}}) ==
          "ERR r3 prompt token id out of range second line");
    CHECK(format(EngineLine{Error{"-", "unknown command 'x'"}}) == "ERR - unknown command 'x'");

    engine_roundtrip<Token>("T r1 432");
    auto lp = engine_roundtrip<Logprobs>("LP r1 -0.031780876 432:-0.031780876 383:-3.547304");
    CHECK(lp.top.size() == 2);
    CHECK(lp.top[1].first == 383);
    CHECK(lp.top[1].second == -3.5473039f);
    auto plp = engine_roundtrip<PromptLogprobs>("PLP r4 0 -");
    CHECK_FALSE(plp.logprob.has_value());
    auto d = engine_roundtrip<Done>("DONE r1 stop prompt_tokens=5 completion_tokens=0");
    CHECK(d.finish == "stop");
    CHECK(d.cached_tokens == 0);
    auto dc = engine_roundtrip<Done>("DONE r2 stop prompt_tokens=40 completion_tokens=3 cached_tokens=32");
    CHECK(dc.cached_tokens == 32);
    auto e = engine_roundtrip<Error>("ERR r3 out of memory: 12 GiB");
    CHECK(e.message == "out of memory: 12 GiB");
}

TEST_CASE("GEN and CANCEL golden bytes") {
    Gen g;
    g.id = "r1";
    g.prompt = {1, 403, 407};
    g.max_tokens = 16;
    g.temperature = 0;
    g.logprobs = 5;
    CHECK(format(GatewayLine{g}) == "GEN r1 prompt=1,403,407 max_tokens=16 temperature=0 logprobs=5");
    g.top_k = 40;
    g.top_p = 0.9f;
    g.min_p = 0.05f;
    g.seed = 42;
    g.prompt_logprobs = 0;
    g.allowed = {5, 6};
    g.presence_penalty = 0.5f;
    g.frequency_penalty = -0.25f;
    g.repetition_penalty = 1.1f;
    g.logit_bias = {{7, -100.0f}, {9, 2.5f}};
    g.processed_logprobs = true;
    g.ignore_eos = true;
    const std::string line =
        "GEN r1 prompt=1,403,407 max_tokens=16 temperature=0 top_k=40 top_p=0.9 min_p=0.05 seed=42 logprobs=5 "
        "prompt_logprobs=0 allowed=5,6 presence_penalty=0.5 frequency_penalty=-0.25 repetition_penalty=1.1 "
        "logit_bias=7:-100,9:2.5 logprobs_mode=processed ignore_eos=1";
    CHECK(format(GatewayLine{g}) == line);
    auto parsed = parse_gateway_line(line + "\r\n");
    REQUIRE(std::holds_alternative<GatewayLine>(parsed));
    const Gen& b = std::get<Gen>(std::get<GatewayLine>(parsed));
    CHECK(format(GatewayLine{b}) == line);
    CHECK(b.logit_bias[1].second == 2.5f);
    CHECK(format(GatewayLine{Cancel{"r1"}}) == "CANCEL r1");
}

TEST_CASE("unknown keys are skipped; defaults apply") {
    auto parsed = parse_gateway_line("GEN x prompt=1 future_key=whatever another=1,2,3");
    REQUIRE(std::holds_alternative<GatewayLine>(parsed));
    const Gen& g = std::get<Gen>(std::get<GatewayLine>(parsed));
    CHECK(g.prompt == std::vector<TokenId>{1});
    CHECK(g.temperature == 1.0f);
    CHECK_FALSE(g.max_tokens.has_value());
    CHECK_FALSE(g.logprobs.has_value());
    auto hello = parse_engine_line("HELLO loom/1 n_vocab=10 n_ctx=5 newcap=zz");
    REQUIRE(std::holds_alternative<EngineLine>(hello));
    CHECK(std::get<Hello>(std::get<EngineLine>(hello)).n_vocab == 10);
}

TEST_CASE("malformed lines give errors that name the problem and the id") {
    const std::pair<std::string, std::string> line_message[] = {
        {"", "empty line"},
        {"FOO r1", "unknown command 'FOO'"},
        {"GEN r1", "GEN needs a non-empty prompt=<ids>"},
        {"GEN r1 prompt=", "GEN needs a non-empty prompt=<ids>"},
        {"GEN r1 prompt=1,x", "prompt: 'x' is not an integer in range"},
        {"GEN r1 prompt=1,-2", "prompt: token id -2 is negative"},
        {"GEN r1 prompt=1 logprobs=21", "logprobs must be in 0..20"},
        {"GEN r1 prompt=1 temperature=nan", "temperature: 'nan' is not finite"},
        {"GEN r1 prompt=1 top_p=0", "top_p must be in (0, 1]"},
        {"GEN r1 prompt=1 prompt=2", "duplicate key 'prompt'"},
        {"GEN r1 prompt=1 oops", "field 'oops' is not key=value"},
        {"GEN r1 prompt=1 max_tokens=99999999999999999999",
         "max_tokens: '99999999999999999999' is not an integer in range"},
        {"CANCEL r1 extra", "CANCEL takes only an id"},
    };
    for (const auto& [line, message] : line_message) {
        CAPTURE(line);
        CHECK(gateway_error(line).message == message);
    }
    CHECK(gateway_error("GEN r1").id == "r1");
    CHECK(gateway_error("GEN bad/id prompt=1").id == "-");
    CHECK(gateway_error("GEN " + std::string(65, 'a') + " prompt=1").message.find("invalid request id") == 0);
    auto bad_lp = parse_engine_line("LP r1 nan");
    REQUIRE(std::holds_alternative<ParseError>(bad_lp));
    CHECK(std::get<ParseError>(bad_lp).id == "r1");
}

TEST_CASE("writing refuses what cannot be read back") {
    CHECK_THROWS_AS(format(EngineLine{Logprobs{"r1", std::nanf(""), {}}}), std::invalid_argument);
    CHECK_THROWS_AS(format(EngineLine{Token{"has space", 1}}), std::invalid_argument);
    CHECK_THROWS_AS(format(GatewayLine{Gen{}}), std::invalid_argument);
}

TEST_CASE("every float32 survives format_float and parse") {
    std::mt19937 rng(1234);
    for (int i = 0; i < 200000; ++i) {
        uint32_t bits = static_cast<uint32_t>(rng());
        float f;
        std::memcpy(&f, &bits, 4);
        if (std::isnan(f) || (std::isinf(f) && f > 0)) continue;
        const std::string line = "LP r 0 1:" + format_float(f);
        auto parsed = parse_engine_line(line);
        REQUIRE(std::holds_alternative<EngineLine>(parsed));
        const float back = std::get<Logprobs>(std::get<EngineLine>(parsed)).top[0].second;
        uint32_t back_bits;
        std::memcpy(&back_bits, &back, 4);
        REQUIRE(back_bits == bits);
    }
}

TEST_CASE("PING and PONG: exact bytes, round trip, malformed forms") {
    CHECK(format(GatewayLine{Ping{"p17"}}) == "PING p17");
    CHECK(format(EngineLine{Pong{"p17"}}) == "PONG p17");
    auto ping = parse_gateway_line("PING  a.b-c_9\r\n");
    REQUIRE(std::holds_alternative<GatewayLine>(ping));
    CHECK(std::get<Ping>(std::get<GatewayLine>(ping)).token == "a.b-c_9");
    auto pong = parse_engine_line("PONG p1\n");
    REQUIRE(std::holds_alternative<EngineLine>(pong));
    CHECK(std::get<Pong>(std::get<EngineLine>(pong)).token == "p1");
    CHECK(gateway_error("PING").message == "PING has too few fields");
    CHECK(gateway_error("PING bad/token").message == "invalid PING token");
    CHECK(gateway_error("PING p1 extra").message == "PING takes only a token");
    auto bad_pong = parse_engine_line("PONG " + std::string(65, 'x'));
    REQUIRE(std::holds_alternative<ParseError>(bad_pong));
    CHECK(std::get<ParseError>(bad_pong).message == "invalid PONG token");
    CHECK_THROWS_AS(format(GatewayLine{Ping{""}}), std::invalid_argument);
    CHECK_THROWS_AS(format(EngineLine{Pong{"a b"}}), std::invalid_argument);
}

TEST_CASE("parse errors quote at most 64 bytes of the input") {
    const std::string verb(60000, 'V');
    const auto e = gateway_error(verb + " r1");
    CHECK(e.message == "unknown command '" + std::string(64, 'V') + "... (60000 bytes)'");
    const auto big = gateway_error("GEN r1 prompt=" + std::string(1 << 20, '7'));
    CHECK(big.message == "prompt: '" + std::string(64, '7') + "... (1048576 bytes)' is not an integer in range");
    CHECK(big.id == "r1");
}

TEST_CASE("a capability holding a comma survives the round trip (found by loom-fuzz-protocol)") {
    Hello h;
    h.engine = "e";
    h.caps = {",logprobs", "a,b"};
    const std::string line = format(EngineLine{h});
    CHECK(line.find(" caps=%2Clogprobs,a%2Cb ") != std::string::npos);
    auto back = parse_engine_line(line);
    REQUIRE(std::holds_alternative<EngineLine>(back));
    CHECK(std::get<Hello>(std::get<EngineLine>(back)).caps == h.caps);
}

TEST_CASE("an ERR message with leading blanks or line breaks reads back as written (found by loom-fuzz-protocol)") {
    const std::string line = format(EngineLine{Error{"r1", "\t\r\tbad\rthing "}});
    CHECK(line == "ERR r1 bad thing ");
    auto back = parse_engine_line(line);
    REQUIRE(std::holds_alternative<EngineLine>(back));
    CHECK(std::get<Error>(std::get<EngineLine>(back)).message == "bad thing ");
    CHECK(format(EngineLine{Error{"-", " \t "}}) == "ERR - error");
}

TEST_CASE("a DONE whose finish reason holds control bytes is refused (found by loom-fuzz-protocol)") {
    auto bad = parse_engine_line("DONE r1 len\rgth prompt_tokens=1 completion_tokens=0");
    REQUIRE(std::holds_alternative<ParseError>(bad));
    CHECK(std::get<ParseError>(bad).message == "invalid finish reason 'len\rgth'");
    CHECK_THROWS_AS(format(EngineLine{Done{"r1", "a\x06", 0, 0}}), std::invalid_argument);
}
