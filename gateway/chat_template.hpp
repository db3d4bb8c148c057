// Renders a model's chat template the way Hugging Face transformers does (Jinja2 3.1).
#pragma once

#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "jinja/jinja.hpp"

namespace loom::jinja {

/// The variables a chat template sees (the reference configuration of
/// shared/models/templates/README.md): `messages`, `tools` (left undefined when `tools`
/// is nullptr, so `tools is defined` is false), `add_generation_prompt`, `bos_token`,
/// `eos_token`, plus every member of `chat_template_kwargs` (an object, or nullptr) as a
/// top-level variable (e.g. `enable_thinking`). kwargs never replace those five names.
/// Throws TemplateError for JSON nested deeper than 512 levels.
Value chat_template_context(const rapidjson::Value& messages, const rapidjson::Value* tools, bool add_generation_prompt,
                            std::string_view bos_token, std::string_view eos_token,
                            const rapidjson::Value* chat_template_kwargs);

/// Parses and renders chat template `tmpl` with chat_template_context(...); the parsed
/// form of the last 16 distinct template texts is cached (thread-safe). The
/// environment is the reference's (see shared/models/templates/README.md):
/// trim_blocks, lstrip_blocks, loopcontrols, tojson without ASCII escaping,
/// raise_exception(msg) and strftime_now(fmt) (LOOM_FAKE_TIME=<unix seconds> pins the
/// clock, a test hook). Returns the prompt text.
/// Throws TemplateError: syntax errors ("line L, column C: ..."), runtime errors
/// ("line L: ..."), the template's raise_exception(msg) (what() == msg exactly,
/// from_raise_exception() true) and exceeded Limits.
std::string render_chat_template(std::string_view tmpl, const rapidjson::Value& messages, const rapidjson::Value* tools,
                                 bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token,
                                 const rapidjson::Value* chat_template_kwargs);

/// Same with an already parsed template (parse once, render per request).
std::string render_chat_template(const Template& tmpl, const rapidjson::Value& messages, const rapidjson::Value* tools,
                                 bool add_generation_prompt, std::string_view bos_token, std::string_view eos_token,
                                 const rapidjson::Value* chat_template_kwargs);

}  // namespace loom::jinja
