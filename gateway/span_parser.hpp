// The interface of loom's output parsers (tool calls, reasoning): incremental state
// machines that cut a chat completion's text into parts — content, reasoning, the
// name and the arguments of each tool call, and markers that belong to no part —
// deciding each byte only once no later text can change the decision.
//
// A parser reads "parse text": the generated text with the special tokens that are
// its markers spelled out (docs/api.md, "Tool calls and reasoning"). Fed the same
// text in any number of pieces, a parser decides the same spans (the streamed and
// the non-streamed responses agree by construction).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace loom::gateway {

/// Where a byte of the output goes.
enum class Part : unsigned char {
    Content,    ///< message.content
    Reasoning,  ///< message.reasoning_content
    Marker,     ///< markers, call envelopes and the whitespace touching them: no part
    CallStart,  ///< (zero length) a tool call begins; Span::name is its function
    Name,       ///< the function name as written, of call Span::call
    Arguments,  ///< the arguments text of call Span::call
};

/// A decided run of parse text.
struct Span {
    Part part = Part::Content;
    size_t len = 0;    ///< parse-text bytes covered (0 for CallStart)
    int call = -1;     ///< CallStart, Name, Arguments: the call's index, 0 first
    std::string name;  ///< CallStart: the function name
};

/// True for the JSON whitespace bytes (RFC 8259): space, tab, LF, CR.
inline bool is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// Base of all output parsers. Subclasses implement step(); the base keeps the
/// undecided text (buf_) and appends decided spans.
class SpanParser {
public:
    virtual ~SpanParser() = default;

    /// Appends `text` to the parse text and adds to `out` the spans that are now
    /// decided, in text order, covering the parse text without gaps or overlaps.
    /// `final`: the output has ended; everything is decided. `cut` (with `final`): it
    /// ended because max_tokens cut it, so text still held back because it may begin a
    /// marker or a tool call (and the whitespace that would touch one) is decided as
    /// Marker, never as content or reasoning; a call whose function name is complete but
    /// whose arguments have not begun is started first (the family's cut_call()), so that
    /// it is reported with empty arguments. Never throws for any input bytes.
    void feed(std::string_view text, bool final, std::vector<Span>& out, bool cut = false);

    /// Texts of the markers this parser reads; a special token whose vocabulary text
    /// is one of them is spelled in the parse text (others add no parse text).
    virtual std::vector<std::string> markers() const = 0;

    /// True once the parser wants the generation to end (parallel_tool_calls: false
    /// and the first call is complete); later text is decided as Marker.
    virtual bool done() const { return done_; }

protected:
    /// Decides what it can at the front of buf_ in the current state (emit()ing it);
    /// returns false when nothing more can be decided until more text (or, with
    /// final_, when buf_ is empty).
    virtual bool step() = 0;

    /// The output was cut (see feed()) with buf_ holding what step() could not decide
    /// without more text: starts the call whose name buf_ holds complete, if any. The
    /// default starts none. The text left in buf_ afterwards becomes Marker.
    virtual void cut_call() {}

    /// Decides the first `n` bytes of buf_ as `part` (call: for Name/Arguments).
    void emit(Part part, size_t n, int call = -1);
    /// Adds a CallStart span for a new call named `name`; returns its index.
    int start_call(std::string name);
    /// Starts a call whose name is written at buf_[name_at..name_end), inside marker text:
    /// decides buf_[0..name_at) as Marker, the name as Name and buf_[name_end..body_at) as
    /// Marker, so that buf_ then starts at the call's body. Returns the call's index.
    int start_named_call(size_t name_at, size_t name_end, size_t body_at);

    /// How the front of buf_ (from `at`) compares with `lit`.
    enum class Match { No, Partial, Full };
    Match match(std::string_view lit, size_t at = 0) const;
    /// Whitespace bytes at buf_[at...].
    size_t ws_at(size_t at = 0) const;

    /// In a part that ends at one of `ends` (e.g. content before a tool-call start
    /// marker): emits as `part` everything that cannot be the start of one (keeping
    /// back a suffix that could be a marker's beginning, and the whitespace before
    /// it). Returns the index in `ends` of the marker found, with buf_ then starting
    /// at the whitespace before it; `ws` gets that whitespace's length. Returns -1
    /// when no marker is there yet (or, with final_, everything was emitted).
    int scan_until(const std::vector<std::string>& ends, Part part, size_t& ws, int call = -1);

    std::string buf_;     ///< undecided parse text
    bool final_ = false;  ///< the output has ended
    bool done_ = false;
    int calls_ = 0;  ///< calls started so far
    std::vector<Span>* out_ = nullptr;
};

}  // namespace loom::gateway
