// Content parts on real chat templates (shared/models/templates, 16 models): which ones
// read content as a list of parts (ChatRenderer::template_reads_content_parts, as vLLM's
// content-format detection), and that a message whose content is text parts renders on
// every one of them exactly as the same text given as a string does (parts joined by "\n")
// where the template expects a string.
#include <catch2/catch.hpp>

#include <rapidjson/document.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gateway/api_types.hpp"
#include "gateway/chat_prompt.hpp"

using loom::gateway::ChatRenderer;

namespace {

std::string read(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

ChatRenderer renderer(const std::string& tmpl) {
    loom::model::Vocab v;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.bos = 1;
    v.eos = 2;
    v.chat_template = tmpl;
    return ChatRenderer(v);
}

rapidjson::Document json(const std::string& s) {
    rapidjson::Document d;
    d.Parse(s.c_str());
    REQUIRE(!d.HasParseError());
    return d;
}

}  // namespace

TEST_CASE("which real templates iterate over content parts") {
    const std::filesystem::path dir = std::filesystem::path(LOOM_SHARED_DIR) / "models" / "templates";
    REQUIRE(std::filesystem::is_directory(dir));
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() != ".jinja") continue;
        ++n;
        const std::string name = e.path().stem().string();
        const bool parts = name == "Kimi-K2-Instruct" || name == "Mistral-Small-3.2-24B-Instruct-2506";
        INFO(name);
        CHECK(ChatRenderer::template_reads_content_parts(read(e.path())) == parts);

        const ChatRenderer r = renderer(read(e.path()));
        const std::string user_parts =
            R"({"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]})";
        const std::string user_text = R"({"role": "user", "content": "Hello\nthere"})";
        // Some templates (Gemma's) raise on a system message: those get the user turn alone.
        const bool system_ok = [&] {
            try {
                r.render(json(R"([{"role": "system", "content": "Be brief."}, )" + user_text + "]"), nullptr, true,
                         nullptr);
                return true;
            } catch (const loom::gateway::ApiError&) { return false; }
        }();
        const std::string sys_parts =
            system_ok ? R"({"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, )" : "";
        const std::string sys_text = system_ok ? R"({"role": "system", "content": "Be brief."}, )" : "";
        const auto as_parts = json("[" + sys_parts + user_parts + "]");
        const auto as_text = json("[" + sys_text + user_text + "]");
        std::string a, b;
        REQUIRE_NOTHROW(a = r.render(as_parts, nullptr, true, nullptr));
        REQUIRE_NOTHROW(b = r.render(as_text, nullptr, true, nullptr));
        CHECK(a.find("Hello") != std::string::npos);
        if (!parts) CHECK(a == b);
        else CHECK(a.find("there") != std::string::npos);  // rendered from the parts themselves
    }
    CHECK(n == 16);
}

TEST_CASE("the detection's three forms") {
    CHECK(ChatRenderer::template_reads_content_parts("{% for m in messages %}{% for p in m['content'] %}{% endfor %}"));
    CHECK(ChatRenderer::template_reads_content_parts("{% for part in message.content %}"));
    CHECK(ChatRenderer::template_reads_content_parts("{{ messages[0]['content'][0]['text'] }}"));
    CHECK(ChatRenderer::template_reads_content_parts("{% set c = msg.get('content') %}{% for x in c %}"));
    CHECK_FALSE(ChatRenderer::template_reads_content_parts("{{ message['content'] + '\\n' }}"));
    CHECK_FALSE(ChatRenderer::template_reads_content_parts(
        "{% set content = message.content if message.content is string else '' %}{{ content }}"));
    CHECK_FALSE(ChatRenderer::template_reads_content_parts("{% for message in messages %}{{ message.content }}"));
}

TEST_CASE("the fallback joins text parts with newlines") {
    const auto m = json(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": "c"}])");
    CHECK(ChatRenderer::fallback(m) == "a\nb\nc");
}
