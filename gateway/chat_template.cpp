// Chat template rendering with transformers' variables; see chat_template.hpp.
#include "gateway/chat_template.hpp"

#include <list>
#include <mutex>
#include <utility>

namespace loom::jinja {

namespace {

// Parsed templates by source text: a server renders the same few templates every request.
Template parse_cached(std::string_view source) {
    constexpr size_t kEntries = 16;
    static std::mutex mu;
    static std::list<std::pair<std::string, Template>> cache;  // most recently used first
    {
        std::lock_guard<std::mutex> lock(mu);
        for (auto it = cache.begin(); it != cache.end(); ++it)
            if (it->first == source) {
                cache.splice(cache.begin(), cache, it);
                return it->second;
            }
    }
    Template t = Template::parse(source);
    std::lock_guard<std::mutex> lock(mu);
    cache.emplace_front(std::string(source), t);
    if (cache.size() > kEntries) cache.pop_back();
    return t;
}

}  // namespace

Value chat_template_context(const rapidjson::Value& messages, const rapidjson::Value* tools, bool add_generation_prompt,
                            std::string_view bos_token, std::string_view eos_token,
                            const rapidjson::Value* chat_template_kwargs) {
    Value dict = Value::dict();
    Object* ctx = &dict.obj();
    if (chat_template_kwargs && chat_template_kwargs->IsObject())
        for (const auto& m : chat_template_kwargs->GetObject())
            ctx->set(std::string_view(m.name.GetString(), m.name.GetStringLength()), from_json(m.value));
    ctx->set("messages", from_json(messages));
    if (tools) ctx->set("tools", from_json(*tools));
    ctx->set("add_generation_prompt", Value(add_generation_prompt));
    ctx->set("bos_token", Value(bos_token));
    ctx->set("eos_token", Value(eos_token));
    return dict;
}

std::string render_chat_template(const Template& tmpl, const rapidjson::Value& messages, const rapidjson::Value* tools,
                                 bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token,
                                 const rapidjson::Value* chat_template_kwargs) {
    return tmpl.render(
        chat_template_context(messages, tools, add_generation_prompt, bos_token, eos_token, chat_template_kwargs));
}

std::string render_chat_template(std::string_view tmpl, const rapidjson::Value& messages, const rapidjson::Value* tools,
                                 bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token,
                                 const rapidjson::Value* chat_template_kwargs) {
    return render_chat_template(parse_cached(tmpl), messages, tools, add_generation_prompt, bos_token, eos_token,
                                chat_template_kwargs);
}

}  // namespace loom::jinja
