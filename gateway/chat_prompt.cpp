// Chat prompt rendering; see chat_prompt.hpp.
#include "gateway/chat_prompt.hpp"

#include <regex>

#include "gateway/api_types.hpp"
#include "gateway/chat_template.hpp"
#include "gateway/quote.hpp"

namespace loom::gateway {
namespace {

// A message's text: the string, or its text parts joined by "\n" (as vLLM flattens
// content parts for a template that expects a string).
std::string text_of(const rapidjson::Value& content) {
    if (content.IsString()) return std::string(content.GetString(), content.GetStringLength());
    std::string out;
    bool first = true;
    if (content.IsArray())
        for (const auto& part : content.GetArray())
            if (part.IsObject() && part.HasMember("text") && part["text"].IsString()) {
                if (!first) out += '\n';
                out.append(part["text"].GetString(), part["text"].GetStringLength());
                first = false;
            }
    return out;
}

// `messages` with every array `content` replaced by its text (text_of()).
rapidjson::Document flatten_content(const rapidjson::Value& messages) {
    rapidjson::Document d;
    d.CopyFrom(messages, d.GetAllocator());
    for (auto& m : d.GetArray()) {
        if (!m.IsObject()) continue;
        auto it = m.FindMember("content");
        if (it == m.MemberEnd() || !it->value.IsArray()) continue;
        const std::string text = text_of(it->value);
        it->value.SetString(text.data(), static_cast<rapidjson::SizeType>(text.size()), d.GetAllocator());
    }
    return d;
}

std::string token_text(const model::Vocab& v, int32_t id) {
    return id >= 0 && id < v.size() ? v.tokens[static_cast<size_t>(id)] : std::string();
}

}  // namespace

ChatRenderer::ChatRenderer(const model::Vocab& vocab)
    : template_(vocab.chat_template),
      bos_(token_text(vocab, vocab.bos)),
      eos_(token_text(vocab, vocab.eos)),
      parts_(template_reads_content_parts(template_)) {}

std::string ChatRenderer::fallback(const rapidjson::Value& messages) {
    std::string out;
    bool first = true;
    for (const auto& m : messages.GetArray()) {
        if (!m.IsObject() || !m.HasMember("content") || m["content"].IsNull()) continue;
        if (!first) out += '\n';
        out += text_of(m["content"]);
        first = false;
    }
    return out;
}

bool ChatRenderer::template_reads_content_parts(const std::string& tmpl) {
    // A content expression: X['content'], X["content"], X.content, X.get('content').
    const std::string content = R"((\[\s*['"]content['"]\s*\]|\.content\b|\.get\(\s*['"]content['"]))";
    // 1. A loop straight over a message's content.
    static const std::regex direct(R"(\bfor\s+\w+(\s*,\s*\w+)?\s+in\s+\w+\s*)" + content);
    // 2. A part of it indexed, e.g. message['content'][0]['text'].
    static const std::regex indexed(content + R"(\s*\[\s*\d+\s*\]\s*\[)");
    if (std::regex_search(tmpl, direct) || std::regex_search(tmpl, indexed)) return true;
    // 3. A variable set from a content expression, then looped over.
    static const std::regex assigned(R"(\bset\s+(\w+)\s*=\s*[^%}]*?)" + content);
    for (auto it = std::sregex_iterator(tmpl.begin(), tmpl.end(), assigned); it != std::sregex_iterator(); ++it) {
        const std::regex loop(R"(\bfor\s+\w+\s+in\s+)" + (*it)[1].str() + R"(\b)");
        if (std::regex_search(tmpl, loop)) return true;
    }
    return false;
}

std::string ChatRenderer::render(const rapidjson::Value& messages, const rapidjson::Value* tools,
                                 bool add_generation_prompt, const rapidjson::Value* kwargs) const {
    if (template_.empty()) return fallback(messages);
    try {
        if (!parts_) {
            const rapidjson::Document flat = flatten_content(messages);
            return jinja::render_chat_template(template_, flat, tools, add_generation_prompt, bos_, eos_, kwargs);
        }
        return jinja::render_chat_template(template_, messages, tools, add_generation_prompt, bos_, eos_, kwargs);
    } catch (const std::exception& e) {
        throw ApiError(400, "chat template error: " + cut(e.what(), 1000), "messages", "chat_template_error");
    }
}

}  // namespace loom::gateway
