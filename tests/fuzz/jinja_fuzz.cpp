// libFuzzer target for the Jinja lexer and parser (jinja/: tokenize(),
// Parser, analyze_scopes via parse_template), which read chat templates from GGUF files.
//
// Any source must be tokenized and parsed, or refused with TemplateError, without a
// crash, another exception, unbounded recursion or a sanitizer report. Errors name a
// line and column inside the source. Templates are not rendered here (a valid template
// may loop for as long as it likes within the renderer's own limits).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "jinja/ast.hpp"
#include "jinja/jinja.hpp"
#include "jinja/lexer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view src(reinterpret_cast<const char*>(data), size);
    using namespace loom::jinja;
    try {
        const auto toks = detail::tokenize(src);
        if (toks.empty() || toks.back().type != detail::Tok::Eof) __builtin_trap();
    } catch (const TemplateError& e) {
        if (std::string_view(e.what()).substr(0, 5) != "line ") __builtin_trap();
    }
    try {
        (void)detail::parse_template(src);
    } catch (const TemplateError& e) {
        if (std::string_view(e.what()).substr(0, 5) != "line ") __builtin_trap();
    }
    return 0;
}
