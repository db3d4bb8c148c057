// Turns a chat (OpenAI `messages`) into prompt text: the model's chat template when
// its GGUF has one (tokenizer.chat_template, rendered by loom_jinja as Hugging Face
// transformers renders it), else loom's documented plain fallback.
#pragma once

#include <string>

#include <rapidjson/document.h>

#include "model/gguf/vocab.hpp"

namespace loom::gateway {

/// Renders OpenAI chat messages into the prompt text the model expects.
class ChatRenderer {
public:
    /// `vocab` supplies the template and the bos/eos token texts.
    explicit ChatRenderer(const model::Vocab& vocab);

    /// Renders the chat. Throws ApiError(400) carrying the template's message when
    /// the template raises or fails.
    std::string render(const rapidjson::Value& messages, const rapidjson::Value* tools, bool add_generation_prompt,
                       const rapidjson::Value* kwargs) const;

    /// True when the GGUF carries a chat template (then the rendered text holds any
    /// BOS itself); false: the fallback is used and the tokenizer adds BOS.
    bool has_template() const { return !template_.empty(); }

    /// The fallback: each message's text content (string, or its text parts
    /// concatenated), in order, joined by "\n"; roles are not marked and nothing is
    /// added for the generation prompt. Meant for base models such as stories260K.
    static std::string fallback(const rapidjson::Value& messages);

private:
    std::string template_, bos_, eos_;
};

}  // namespace loom::gateway
