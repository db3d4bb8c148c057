// libFuzzer target for the OpenAI request parser: the request builders
// (serving_completions, serving_chat), the shared fields (request_parser), strict JSON
// (json_input) and chat_prompt with a chat template rendered by jinja/. The
// first byte picks /v1/completions or /v1/chat/completions, the rest is the body.
//
// Any body must be accepted or refused with ApiError (4xx) without a crash, another
// exception, a hang or a sanitizer report. An accepted request must be one the
// gateway can send: prompts of vocabulary ids within the context, n in 1..128, at
// most 4 stop strings, top_logprobs in 0..20. Error messages must not echo the body
// whole. The vocabulary is tests/unit/gateway_vocab.hpp's; the template a ChatML one.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "gateway/api_types.hpp"
#include "gateway/chat_prompt.hpp"
#include "gateway/request_parser.hpp"
#include "gateway/serving_chat.hpp"
#include "gateway/serving_completions.hpp"
#include "unit/gateway_vocab.hpp"

namespace {

struct World {
    std::unique_ptr<loom::model::Tokenizer> tok = loom::test::test_tokenizer();
    std::unique_ptr<loom::gateway::ChatRenderer> chat;
    loom::gateway::ModelContext ctx;
    World() {
        loom::model::Vocab v = tok->vocab();
        v.chat_template =
            "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}{% if m['content'] is string %}"
            "{{ m['content'] }}{% else %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}"
            "{{ '<|im_end|>\\n' }}{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
        chat = std::make_unique<loom::gateway::ChatRenderer>(v);
        ctx.model_id = "m";
        ctx.tokenizer = tok.get();
        ctx.n_ctx = 4096;
        ctx.template_adds_bos = true;
        ctx.chat_template = v.chat_template;
        const auto* c = chat.get();
        ctx.render_chat = [c](const rapidjson::Value& m, const rapidjson::Value* t, bool g, const rapidjson::Value* k) {
            return c->render(m, t, g, k);
        };
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static World w;
    if (size < 1) return 0;
    const auto ep = (data[0] & 1) ? loom::gateway::Endpoint::ChatCompletions : loom::gateway::Endpoint::Completions;
    const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        const auto r = ep == loom::gateway::Endpoint::ChatCompletions
                           ? loom::gateway::build_chat_request(body, w.ctx)
                           : loom::gateway::build_completion_request(body, w.ctx);
        if (r.prompts.empty() || r.n < 1 || r.n > 128 || r.stop.size() > 4 || r.top_logprobs < 0 || r.top_logprobs > 20)
            __builtin_trap();
        for (const auto& p : r.prompts) {
            if (p.empty() || static_cast<int64_t>(p.size()) > w.ctx.n_ctx) __builtin_trap();
            for (int32_t id : p)
                if (id < 0 || id >= w.tok->n_vocab()) __builtin_trap();
        }
    } catch (const loom::gateway::ApiError& e) {
        if (e.status < 400 || e.status > 499) __builtin_trap();
        if (e.message.size() > 2048 && e.message.size() > body.size() / 2) __builtin_trap();  // echoes the input
    }
    return 0;
}
