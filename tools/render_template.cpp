// loom-render-template: renders a chat template file for a JSON conversation (CI tool).
//
// Usage: loom-render-template TEMPLATE.jinja INPUT.json
// INPUT.json: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool,
//              "bos_token": "...", "eos_token": "...", "kwargs": {...}?}
// Prints the rendered text (no added newline) to stdout and exits 0. On a template
// error prints "raise_exception: MSG" (the template called raise_exception) or
// "TemplateError: MSG" to stderr and exits 2; usage or input errors exit 1.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include "gateway/chat_template.hpp"

namespace {

bool read_file(const char* path, std::string& out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: loom-render-template TEMPLATE.jinja INPUT.json\n";
        return 1;
    }
    std::string tmpl, input;
    if (!read_file(argv[1], tmpl) || !read_file(argv[2], input)) {
        std::cerr << "cannot read " << (tmpl.empty() ? argv[1] : argv[2]) << "\n";
        return 1;
    }
    rapidjson::Document doc;
    doc.Parse<rapidjson::kParseFullPrecisionFlag | rapidjson::kParseNanAndInfFlag | rapidjson::kParseIterativeFlag>(
        input.data(), input.size());
    if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("messages")) {
        std::cerr << "bad input JSON: "
                  << (doc.HasParseError() ? rapidjson::GetParseError_En(doc.GetParseError())
                                          : "need an object with messages")
                  << "\n";
        return 1;
    }
    auto str = [&](const char* key) {
        auto it = doc.FindMember(key);
        return it != doc.MemberEnd() && it->value.IsString()
                   ? std::string(it->value.GetString(), it->value.GetStringLength())
                   : std::string();
    };
    auto it_tools = doc.FindMember("tools");
    const rapidjson::Value* tools =
        it_tools != doc.MemberEnd() && !it_tools->value.IsNull() ? &it_tools->value : nullptr;
    auto it_kw = doc.FindMember("kwargs");
    const rapidjson::Value* kwargs = it_kw != doc.MemberEnd() && it_kw->value.IsObject() ? &it_kw->value : nullptr;
    auto it_agp = doc.FindMember("add_generation_prompt");
    bool agp = it_agp != doc.MemberEnd() && it_agp->value.IsBool() && it_agp->value.GetBool();
    try {
        std::string out = loom::jinja::render_chat_template(tmpl, doc["messages"], tools, agp, str("bos_token"),
                                                            str("eos_token"), kwargs);
        std::fwrite(out.data(), 1, out.size(), stdout);
        return 0;
    } catch (const loom::jinja::TemplateError& e) {
        std::cerr << (e.from_raise_exception() ? "raise_exception: " : "TemplateError: ") << e.what() << "\n";
        return 2;
    }
}
