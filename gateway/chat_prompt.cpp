// Chat prompt rendering; see chat_prompt.hpp.
#include "gateway/chat_prompt.hpp"

#include "gateway/api_types.hpp"
#include "gateway/chat_template.hpp"
#include "gateway/quote.hpp"

namespace loom::gateway {
namespace {

std::string text_of(const rapidjson::Value& content) {
    if (content.IsString()) return std::string(content.GetString(), content.GetStringLength());
    std::string out;
    if (content.IsArray())
        for (const auto& part : content.GetArray())
            if (part.IsObject() && part.HasMember("text") && part["text"].IsString())
                out.append(part["text"].GetString(), part["text"].GetStringLength());
    return out;
}

std::string token_text(const model::Vocab& v, int32_t id) {
    return id >= 0 && id < v.size() ? v.tokens[static_cast<size_t>(id)] : std::string();
}

}  // namespace

ChatRenderer::ChatRenderer(const model::Vocab& vocab)
    : template_(vocab.chat_template), bos_(token_text(vocab, vocab.bos)), eos_(token_text(vocab, vocab.eos)) {}

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

std::string ChatRenderer::render(const rapidjson::Value& messages, const rapidjson::Value* tools,
                                 bool add_generation_prompt, const rapidjson::Value* kwargs) const {
    if (template_.empty()) return fallback(messages);
    try {
        return jinja::render_chat_template(template_, messages, tools, add_generation_prompt, bos_, eos_, kwargs);
    } catch (const std::exception& e) {
        throw ApiError(400, "chat template error: " + cut(e.what(), 1000), "messages", "chat_template_error");
    }
}

}  // namespace loom::gateway
