// gateway::grammar_spec: each OutputConstraint as GEN's grammar= (docs/protocol.md,
// "Grammars"), and the 400s, naming the member and the reason, for what cannot be enforced.
#include <catch2/catch.hpp>

#include "gateway/api_types.hpp"
#include "gateway/grammar_spec.hpp"

using namespace loom;
using namespace loom::gateway;
using K = OutputConstraint::Kind;

namespace {

ApiError refusal(const OutputConstraint& c) {
    try {
        (void)grammar_spec(c);
    } catch (const ApiError& e) { return e; }
    FAIL("no ApiError for " << c.value);
    return ApiError(0, "");
}

}  // namespace

TEST_CASE("constraints become grammar= specs of the protocol's kinds", "[gateway][grammar]") {
    const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})";
    CHECK(grammar_spec({K::JsonSchema, schema, "response_format"}) == protocol::GrammarSpec{"json_schema", schema});
    CHECK(grammar_spec({K::Regex, "[0-9]+", "guided_regex"}) == protocol::GrammarSpec{"regex", "[0-9]+"});
    CHECK(grammar_spec({K::Choice, R"(["a","b"])", "guided_choice"}) ==
          protocol::GrammarSpec{"choice", R"(["a","b"])"});
    // The line the engine gets.
    protocol::Gen g;
    g.id = "c1";
    g.prompt = {1};
    g.grammar = grammar_spec({K::Choice, R"(["yes","no"])", "guided_choice"});
    CHECK(protocol::format(protocol::GatewayLine{g}) ==
          "GEN c1 prompt=1 temperature=1 grammar=choice:WyJ5ZXMiLCJubyJd");
}

TEST_CASE("what loom cannot enforce is a 400 naming the member and the reason", "[gateway][grammar]") {
    auto e = refusal({K::JsonSchema, R"({"type":"object","properties":{"a":{"not":{}}}})", "response_format"});
    CHECK(e.status == 400);
    CHECK(e.param == "response_format");
    CHECK(e.code == "unsupported_constraint");
    CHECK(e.message ==
          "'response_format' cannot be enforced: schema at '/properties/a', keyword 'not': keyword 'not' is "
          "not supported");
    e = refusal({K::Regex, "(a)\\1", "guided_regex"});
    CHECK(e.param == "guided_regex");
    CHECK(e.message.find("'guided_regex' cannot be enforced: ") == 0);
    CHECK(e.message.find("backreference") != std::string::npos);
    e = refusal({K::Choice, "[]", "guided_choice"});
    CHECK(e.message == "'guided_choice' cannot be enforced: choice: the list of choices is empty");
    e = refusal({K::Grammar, "root ::= \"a\"", "guided_grammar"});
    CHECK(e.param == "guided_grammar");
    CHECK(e.message.find("is not supported") != std::string::npos);
    e = refusal({K::ToolArguments, "[]", "tools"});
    CHECK(e.param == "tools");
    CHECK(e.code == "unsupported_constraint");
}
