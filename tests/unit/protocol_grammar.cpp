// Golden tests of GEN's grammar= key (docs/protocol.md, "Grammars"): exact bytes, base64 per
// RFC 4648, round trips and the errors for malformed values.
#include <catch2/catch.hpp>

#include "protocol/protocol.hpp"

using namespace loom::protocol;

namespace {

Gen parse_gen(const std::string& line) {
    auto parsed = parse_gateway_line(line);
    REQUIRE(std::holds_alternative<GatewayLine>(parsed));
    return std::get<Gen>(std::get<GatewayLine>(parsed));
}

std::string gen_error(const std::string& line) {
    auto parsed = parse_gateway_line(line);
    REQUIRE(std::holds_alternative<ParseError>(parsed));
    CHECK(std::get<ParseError>(parsed).id == "r1");
    return std::get<ParseError>(parsed).message;
}

}  // namespace

TEST_CASE("base64 follows RFC 4648 section 10's test vectors", "[protocol]") {
    const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                           {"f", "Zg=="},
                                                           {"fo", "Zm8="},
                                                           {"foo", "Zm9v"},
                                                           {"foob", "Zm9vYg=="},
                                                           {"fooba", "Zm9vYmE="},
                                                           {"foobar", "Zm9vYmFy"}};
    for (const auto& [plain, coded] : vectors) {
        CHECK(base64_encode(plain) == coded);
        CHECK(base64_decode(coded) == std::optional<std::string>(plain));
    }
    CHECK(base64_encode(std::string("\xff\x00\xfe", 3)) == "/wD+");
    // Not canonical: bad length, characters outside the alphabet, misplaced or odd padding,
    // nonzero bits under the padding.
    for (const char* bad : {"Zg", "Zg=", "Z===", "Zm9v=Zm9", "Zh==", "Zm9=", "Zm 9", "Zm-v", "Z=g="})
        CHECK_FALSE(base64_decode(bad).has_value());
}

TEST_CASE("GEN grammar= golden bytes for each kind", "[protocol]") {
    Gen g;
    g.id = "r1";
    g.prompt = {1, 403};
    g.max_tokens = 32;
    g.grammar = GrammarSpec{grammar_kind::kJsonSchema,
                            R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})"};
    const std::string schema_line =
        "GEN r1 prompt=1,403 max_tokens=32 temperature=1 grammar=json_schema:"
        "eyJ0eXBlIjoib2JqZWN0IiwicHJvcGVydGllcyI6eyJuYW1lIjp7InR5cGUiOiJzdHJpbmcifX0sInJlcXVpcmVkIjpbIm5hbWUiXX0=";
    CHECK(format(GatewayLine{g}) == schema_line);
    CHECK(parse_gen(schema_line).grammar == g.grammar);

    g.grammar = GrammarSpec{grammar_kind::kJsonObject, ""};
    CHECK(format(GatewayLine{g}) == "GEN r1 prompt=1,403 max_tokens=32 temperature=1 grammar=json_object:");
    CHECK(parse_gen("GEN r1 prompt=1 grammar=json_object:").grammar == g.grammar);

    g.grammar = GrammarSpec{grammar_kind::kChoice, R"(["yes","no"])"};
    CHECK(format(GatewayLine{g}) == "GEN r1 prompt=1,403 max_tokens=32 temperature=1 grammar=choice:WyJ5ZXMiLCJubyJd");

    g.grammar = GrammarSpec{grammar_kind::kRegex, "[0-9]{3}-[a-z]+"};
    CHECK(format(GatewayLine{g}) ==
          "GEN r1 prompt=1,403 max_tokens=32 temperature=1 grammar=regex:WzAtOV17M30tW2Etel0r");

    // Any byte survives: spaces, newlines, '%' and UTF-8 in the source.
    g.grammar = GrammarSpec{grammar_kind::kRegex, "caf\xc3\xa9 \n%"};
    const std::string line = format(GatewayLine{g});
    CHECK(line.substr(line.find("grammar=")) == "grammar=regex:Y2Fmw6kgCiU=");
    CHECK(parse_gen(line).grammar == g.grammar);

    // Without the key there is no grammar; an unknown kind is carried for the engine to judge.
    CHECK_FALSE(parse_gen("GEN r1 prompt=1").grammar.has_value());
    CHECK(parse_gen("GEN r1 prompt=1 grammar=lark:YQ==").grammar == GrammarSpec{"lark", "a"});
}

TEST_CASE("malformed grammar= values are refused by name", "[protocol]") {
    CHECK(gen_error("GEN r1 prompt=1 grammar=json_object") == "grammar must be <kind>:<base64 of the source>");
    CHECK(gen_error("GEN r1 prompt=1 grammar=:YQ==") == "grammar kind '' is not 1..32 bytes of [a-z0-9_]");
    CHECK(gen_error("GEN r1 prompt=1 grammar=JSON:YQ==") == "grammar kind 'JSON' is not 1..32 bytes of [a-z0-9_]");
    CHECK(gen_error("GEN r1 prompt=1 grammar=regex:YQ") == "grammar source is not base64");
    CHECK(gen_error("GEN r1 prompt=1 grammar=regex:a%20b") == "grammar source is not base64");
    CHECK(gen_error("GEN r1 prompt=1 grammar=regex:YQ== grammar=regex:YQ==") == "duplicate key 'grammar'");
    Gen g;
    g.id = "r1";
    g.prompt = {1};
    g.grammar = GrammarSpec{"bad kind", ""};
    CHECK_THROWS_AS(format(GatewayLine{g}), std::invalid_argument);
}

TEST_CASE("GEN grammar_reasoning= golden bytes, round trips and refusals", "[protocol]") {
    Gen g;
    g.id = "r1";
    g.prompt = {1, 403};
    g.max_tokens = 512;
    g.grammar = GrammarSpec{grammar_kind::kJsonObject, "", "", "</think>"};
    const std::string inside =
        "GEN r1 prompt=1,403 max_tokens=512 temperature=1 grammar=json_object: grammar_reasoning=PC90aGluaz4=";
    CHECK(format(GatewayLine{g}) == inside);
    CHECK(parse_gen(inside).grammar == g.grammar);
    g.grammar->reasoning_open = "<think>";
    const std::string optional =
        "GEN r1 prompt=1,403 max_tokens=512 temperature=1 grammar=json_object: "
        "grammar_reasoning=PHRoaW5rPg==,PC90aGluaz4=";
    CHECK(format(GatewayLine{g}) == optional);
    CHECK(parse_gen(optional).grammar == g.grammar);
    // The key may come before grammar=.
    CHECK(parse_gen("GEN r1 grammar_reasoning=PC90aGluaz4= prompt=1 grammar=json_object:").grammar ==
          GrammarSpec{grammar_kind::kJsonObject, "", "", "</think>"});

    CHECK(gen_error("GEN r1 prompt=1 grammar_reasoning=PC90aGluaz4=") == "grammar_reasoning needs grammar=");
    const std::string shape = "grammar_reasoning must be [<base64 of the open marker>,]<base64 of the close marker>";
    for (const char* bad : {"", "PC90aGluaz4", ",PC90aGluaz4=", "PHRoaW5rPg==,", "a,b,c"})
        CHECK(gen_error(std::string("GEN r1 prompt=1 grammar=json_object: grammar_reasoning=") + bad) == shape);
    g.grammar = GrammarSpec{grammar_kind::kJsonObject, "", "<think>", ""};
    CHECK_THROWS_AS(format(GatewayLine{g}), std::invalid_argument);  // an open marker alone
}
