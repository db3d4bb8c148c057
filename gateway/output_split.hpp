// Splits one chat choice's released output (text and logprob entries, from
// TextAssembler) into its parts — content, reasoning, tool calls — so that each
// part's logprob entries spell exactly that part's text, streamed or not.
//
// Rules (docs/api.md, "Tool calls and reasoning"): the parser reads the parse text (a
// special token that is one of its markers spelled with its vocabulary text, other
// special tokens adding nothing); a token goes to the part its bytes fall in; a token
// whose bytes fall in two parts is split into one entry per part, each with the
// token's logprob and only its bytes in that part (so a token is given out once all
// of its bytes are decided); tokens (or bytes) of markers and
// call envelopes belong to no part; a special token (no bytes in chat) goes to the
// part where it stands, or none when that is a marker.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/output_options.hpp"
#include "gateway/reasoning_parser.hpp"
#include "gateway/span_parser.hpp"
#include "gateway/text_assembler.hpp"
#include "gateway/tool_parser.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace loom::gateway {

/// One tool call's share of a piece of output. The first delta of a call is its
/// header: index, id, name (with the name's entries) and no arguments; later deltas
/// carry argument text and its entries.
struct ToolCallDelta {
    int index = 0;
    bool header = false;
    std::string id, name;
    std::string arguments;
    std::vector<LogprobEntry> name_entries, arg_entries;
};

/// What a piece of output adds to each part.
struct SplitDelta {
    std::string content, reasoning;
    std::vector<LogprobEntry> content_entries, reasoning_entries;
    std::vector<ToolCallDelta> calls;  ///< in order; a call's header comes before its arguments
    bool empty() const {
        return content.empty() && reasoning.empty() && content_entries.empty() && reasoning_entries.empty() &&
               calls.empty();
    }
};

/// The parser for `o` (nullptr when the output is all content).
std::unique_ptr<SpanParser> make_output_parser(const OutputOptions& o);

/// A fresh tool-call id: 9 random letters and digits for Mistral (its templates
/// refuse others), else "call_" and 24 of them.
std::string new_call_id(ToolFamily f);

/// One choice's splitter. Not thread-safe.
class OutputSplitter {
public:
    /// `tok` gives special tokens' texts; `parser` reads the output (nullptr: all
    /// content); `new_id` makes each call's id.
    OutputSplitter(const model::Tokenizer& tok, std::unique_ptr<SpanParser> parser,
                   std::function<std::string()> new_id);

    /// Adds what the TextAssembler released (its entries spell its text) and returns
    /// what became decided.
    SplitDelta push(const Released& r);

    /// The output ended: decides the rest. `cut`: max_tokens ended it (finish_reason
    /// "length"), so a possible marker or call start still held back is no part's, and a
    /// call cut after its name is a call (SpanParser::feed).
    SplitDelta finish(bool cut = false);

    /// The parser wants the generation to end (parallel_tool_calls false, first call
    /// complete): the caller cancels the engine request.
    bool done() const { return parser_ && parser_->done(); }

    /// Tool calls found so far.
    int calls() const { return calls_; }

    /// finish_reason for the choice: "tool_calls" when it made calls and ended other
    /// than by length, else `engine_reason`.
    std::string finish_reason(const std::string& engine_reason) const;

private:
    struct Held {
        struct Piece {
            Part part;
            int call;
            std::string bytes;
        };
        LogprobEntry e;
        size_t begin, end;          // its parse text, absolute offsets
        bool spelled;               // a marker special token: parse text is its vocabulary text, it has no bytes
        std::vector<Piece> pieces;  // where its bytes went so far
        void add(Part part, int call, std::string_view bytes);
    };
    void apply(const std::vector<Span>& spans, SplitDelta& d);
    void give(Part part, int call, LogprobEntry e, SplitDelta& d);
    void flush_headers(int upto, SplitDelta& d);

    const model::Tokenizer& tok_;
    std::unique_ptr<SpanParser> parser_;
    std::function<std::string()> new_id_;
    std::vector<std::string> markers_;
    std::vector<Held> held_;              // entries not yet wholly decided
    std::vector<ToolCallDelta> headers_;  // call headers not yet sent
    std::string parse_;                   // parse text from offset base_
    size_t base_ = 0, next_ = 0, decided_ = 0;
    Part last_part_ = Part::Content;
    int last_call_ = -1;
    int calls_ = 0;
};

}  // namespace loom::gateway
