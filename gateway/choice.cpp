// One choice's bookkeeping; see choice.hpp.
#include "gateway/choice.hpp"

namespace loom::gateway {
namespace {

void append(Released& to, Released&& from) {
    to.text += from.text;
    for (auto& e : from.entries) to.entries.push_back(std::move(e));
}

}  // namespace

std::vector<std::string> align_prompt_text(const model::Tokenizer& tok, const std::vector<int32_t>& ids,
                                           const std::string& text) {
    std::vector<std::string> out;
    size_t pos = 0;
    for (int32_t id : ids) {
        const bool special = tok.vocab().is_special(id);
        const std::string own = special ? tok.vocab().tokens.at(static_cast<size_t>(id)) : tok.token_bytes(id);
        std::string adds;
        if (text.compare(pos, own.size(), own) == 0) adds = own;
        else if (!own.empty() && own[0] == ' ' && text.compare(pos, own.size() - 1, own, 1) == 0) adds = own.substr(1);
        else if (special) adds.clear();
        else adds = text.substr(pos);  // a normalisation the walk cannot follow: the rest goes here
        pos += adds.size();
        out.push_back(std::move(adds));
    }
    if (pos < text.size()) {
        if (out.empty()) out.emplace_back();
        out.back() += text.substr(pos);
    }
    return out;
}

Choice::Choice(const model::Tokenizer& tok, const GenerationRequest& req, int index, size_t prompt_index)
    : req_(req), index_(index), prompt_index_(prompt_index),
      text_asm_(tok, req.stop, req.endpoint == Endpoint::Completions), echo_(req.echo) {
    if (echo_ && prompt_index < req.prompt_texts.size() && req.prompt_texts[prompt_index])
        echo_text_ = align_prompt_text(tok, req.prompts[prompt_index], *req.prompt_texts[prompt_index]);
}

Released Choice::echo_token(const protocol::PromptLogprobs* plp) {
    const size_t i = echo_next_++;
    return text_asm_.push_prompt(req_.prompts[prompt_index_][i], plp, i < echo_text_.size() ? &echo_text_[i] : nullptr);
}

Released Choice::echo_rest() {
    Released all;
    if (!echo_) return all;
    const auto& prompt = req_.prompts[prompt_index_];
    while (echo_next_ < prompt.size()) append(all, echo_token(nullptr));
    echo_ = false;
    return all;
}

Released Choice::on_token(int32_t token, const protocol::Logprobs* lp) {
    if (stopped()) return {};
    if (req_.return_token_ids) token_ids_.push_back(token);
    Released rel = echo_rest();
    append(rel, text_asm_.push(token, lp));
    return rel;
}

Released Choice::on_prompt_logprobs(const protocol::PromptLogprobs& plp) {
    const auto& prompt = req_.prompts[prompt_index_];
    if (req_.prompt_logprobs && plp.index >= 0 && plp.index < static_cast<int64_t>(prompt.size())) {
        if (plps_.size() < prompt.size()) plps_.resize(prompt.size());
        protocol::PromptLogprobs kept = plp;
        if (kept.top.size() > static_cast<size_t>(*req_.prompt_logprobs)) kept.top.resize(static_cast<size_t>(*req_.prompt_logprobs));
        plps_[static_cast<size_t>(plp.index)] = std::move(kept);
    }
    if (!echo_ || plp.index != static_cast<int64_t>(echo_next_) || echo_next_ >= prompt.size()) return {};
    return echo_token(&plp);
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

// vLLM's extras: prompt_logprobs and prompt_token_ids once (the whole response, or the
// first chunk), token_ids with what was generated since the last chunk.
void Choice::attach_extras(ChoiceOut& out, bool first) {
    const auto& prompt = req_.prompts[prompt_index_];
    if (first) {
        out.prompt = &prompt;
        out.prompt_ids_out = req_.return_token_ids;
        if (req_.prompt_logprobs) {
            if (plps_.size() < prompt.size()) plps_.resize(prompt.size());
            out.prompt_logprobs = &plps_;
        }
    }
    if (req_.return_token_ids) {
        out.token_ids = std::move(token_ids_);
        token_ids_.clear();
    }
}

ChoiceOut Choice::chunk(Released rel, std::optional<std::string> finish) {
    ChoiceOut out;
    attach_extras(out, !prompt_sent_);
    prompt_sent_ = true;
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
    attach_extras(out, true);
    out.index = index_;
    out.text = std::move(text_);
    out.entries = std::move(entries_);
    out.finish_reason = finish_;
    return out;
}

}  // namespace loom::gateway
