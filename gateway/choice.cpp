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
    : req_(req),
      index_(index),
      prompt_index_(prompt_index),
      text_asm_(tok, req.stop, req.endpoint == Endpoint::Completions),
      echo_(req.echo) {
    if (echo_ && prompt_index < req.prompt_texts.size() && req.prompt_texts[prompt_index])
        echo_text_ = align_prompt_text(tok, req.prompts[prompt_index], *req.prompt_texts[prompt_index]);
    if (req.endpoint == Endpoint::Completions) return;
    if (auto parser = make_output_parser(req.output))
        split_ = std::make_unique<OutputSplitter>(tok, std::move(parser),
                                                  [family = req.output.tools] { return new_call_id(family); });
}

Released Choice::echo_token(const protocol::PromptLogprobs* plp) {
    const size_t i = echo_next_++;
    return text_asm_.push_prompt(req_.prompts[prompt_index_][i], plp, i < echo_text_.size() ? &echo_text_[i] : nullptr);
}

std::optional<std::string> Choice::finish_reason() const {
    if (!finish_ || !split_) return finish_;
    return split_->finish_reason(*finish_);
}

bool Choice::take_output_end() {
    if (output_end_taken_ || done_ || !split_ || !split_->done()) return false;
    output_end_taken_ = true;
    return true;
}

SplitDelta Choice::split(Released rel) {
    SplitDelta d = split_->push(rel);
    if (!done_) return d;
    SplitDelta rest = split_->finish(finish_ == "length");
    d.content += rest.content;
    d.reasoning += rest.reasoning;
    for (auto& e : rest.content_entries) d.content_entries.push_back(std::move(e));
    for (auto& e : rest.reasoning_entries) d.reasoning_entries.push_back(std::move(e));
    for (auto& t : rest.calls) d.calls.push_back(std::move(t));
    return d;
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
        if (kept.top.size() > static_cast<size_t>(*req_.prompt_logprobs))
            kept.top.resize(static_cast<size_t>(*req_.prompt_logprobs));
        plps_[static_cast<size_t>(plp.index)] = std::move(kept);
    }
    if (!echo_ || plp.index != static_cast<int64_t>(echo_next_) || echo_next_ >= prompt.size()) return {};
    return echo_token(&plp);
}

Released Choice::on_done(const protocol::Done& d) {
    done_ = true;
    engine_tokens_ = d.completion_tokens;
    cached_tokens_ = d.cached_tokens;
    finish_ = (stopped() || d.finish != "length") ? "stop" : "length";
    Released rel = echo_rest();
    append(rel, text_asm_.finish());
    return rel;
}

int64_t Choice::completion_tokens() const { return stopped() ? text_asm_.generated() : engine_tokens_; }

void Choice::keep(Released rel) {
    if (!split_) {
        text_ += rel.text;
        for (auto& e : rel.entries) entries_.push_back(std::move(e));
        return;
    }
    SplitDelta d = split(std::move(rel));
    text_ += d.content;
    reasoning_ += d.reasoning;
    for (auto& e : d.content_entries) entries_.push_back(std::move(e));
    for (auto& e : d.reasoning_entries) reasoning_entries_.push_back(std::move(e));
    for (auto& t : d.calls) {
        if (t.header) {
            calls_.push_back(std::move(t));
            continue;
        }
        ToolCallDelta& whole = calls_.at(static_cast<size_t>(t.index));
        whole.arguments += t.arguments;
        for (auto& e : t.name_entries) whole.name_entries.push_back(std::move(e));
        for (auto& e : t.arg_entries) whole.arg_entries.push_back(std::move(e));
    }
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

std::vector<ChoiceOut> Choice::chunks(Released rel, std::optional<std::string> finish) {
    std::vector<ChoiceOut> out;
    auto add = [&](std::string text, std::vector<LogprobEntry> entries) -> ChoiceOut& {
        ChoiceOut& o = out.emplace_back();
        o.index = index_;
        o.text = std::move(text);
        o.entries = std::move(entries);
        o.text_offset = char_offset_;
        char_offset_ += utf8_chars(o.text);
        return o;
    };
    if (!split_) {
        if (!rel.empty() || finish) add(std::move(rel.text), std::move(rel.entries));
    } else {
        SplitDelta d = split(std::move(rel));
        if (!d.content.empty() || !d.content_entries.empty() || !d.reasoning.empty() || !d.reasoning_entries.empty()) {
            ChoiceOut& o = add(std::move(d.content), std::move(d.content_entries));
            o.reasoning = std::move(d.reasoning);
            o.reasoning_entries = std::move(d.reasoning_entries);
        }
        for (auto& t : d.calls) add({}, {}).tool_calls.push_back(std::move(t));
        if (finish) finish = finish_reason();  // the calls are all known now
        if (out.empty() && finish) add({}, {});
    }
    if (!out.empty()) out.back().finish_reason = std::move(finish);
    if (!out.empty()) {
        attach_extras(out.front(), !prompt_sent_);
        prompt_sent_ = true;
    }
    if (req_.continuous_usage)
        for (ChoiceOut& o : out)
            o.usage = Usage{static_cast<int64_t>(req_.prompts[prompt_index_].size()),
                            done_ ? completion_tokens() : text_asm_.generated(), cached_tokens_};
    return out;
}

ChoiceOut Choice::take_whole() {
    ChoiceOut out;
    attach_extras(out, true);
    out.index = index_;
    out.text = std::move(text_);
    out.entries = std::move(entries_);
    out.finish_reason = finish_reason();
    out.reasoning = std::move(reasoning_);
    out.reasoning_entries = std::move(reasoning_entries_);
    out.tool_calls = std::move(calls_);
    return out;
}

}  // namespace loom::gateway
