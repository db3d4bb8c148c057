// One choice's bookkeeping; see choice.hpp.
#include "gateway/choice.hpp"

namespace loom::gateway {
namespace {

void append(Released& to, Released&& from) {
    to.text += from.text;
    for (auto& e : from.entries) to.entries.push_back(std::move(e));
}

}  // namespace

Choice::Choice(const model::Tokenizer& tok, const GenerationRequest& req, int index, size_t prompt_index)
    : req_(req), index_(index), prompt_index_(prompt_index),
      text_asm_(tok, req.stop, req.endpoint != Endpoint::ChatCompletions), echo_(req.echo) {}

Released Choice::echo_rest() {
    Released all;
    if (!echo_) return all;
    const auto& prompt = req_.prompts[prompt_index_];
    for (; echo_next_ < prompt.size(); ++echo_next_) append(all, text_asm_.push_prompt(prompt[echo_next_], nullptr));
    echo_ = false;
    return all;
}

Released Choice::on_token(int32_t token, const protocol::Logprobs* lp) {
    if (stopped()) return {};
    Released rel = echo_rest();
    append(rel, text_asm_.push(token, lp));
    return rel;
}

Released Choice::on_prompt_logprobs(const protocol::PromptLogprobs& plp) {
    const auto& prompt = req_.prompts[prompt_index_];
    if (!echo_ || plp.index != static_cast<int64_t>(echo_next_) || echo_next_ >= prompt.size()) return {};
    return text_asm_.push_prompt(prompt[echo_next_++], &plp);
}

Released Choice::on_done(const protocol::Done& d) {
    done_ = true;
    engine_tokens_ = d.completion_tokens;
    finish_ = (stopped() || d.finish != "length") ? "stop" : "length";
    Released rel = echo_rest();
    append(rel, text_asm_.finish());
    return rel;
}

int64_t Choice::completion_tokens() const { return stopped() ? text_asm_.generated() : engine_tokens_; }

void Choice::keep(Released rel) {
    text_ += rel.text;
    for (auto& e : rel.entries) entries_.push_back(std::move(e));
}

ChoiceOut Choice::chunk(Released rel, std::optional<std::string> finish) {
    ChoiceOut out;
    out.index = index_;
    out.text = std::move(rel.text);
    out.entries = std::move(rel.entries);
    out.finish_reason = std::move(finish);
    out.text_offset = char_offset_;
    char_offset_ += utf8_chars(out.text);
    return out;
}

ChoiceOut Choice::take_whole() {
    ChoiceOut out;
    out.index = index_;
    out.text = std::move(text_);
    out.entries = std::move(entries_);
    out.finish_reason = finish_;
    return out;
}

}  // namespace loom::gateway
