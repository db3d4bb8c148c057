// What the tool-call parsers share: reading a call written as a JSON object
// ({"name": ..., "arguments": {...}}, in any key order) or a bare JSON arguments
// object, with one commit rule, and a generic parser for the families whose calls are
// such objects after a start marker (hermes, llama3, granite, command_r, and the
// grammar-constrained array).
//
// Commit rule: a call is recognized once its function name is complete and the first
// byte of its arguments object has been read. Until then its text (from the
// whitespace before the start marker) is held back; if it goes wrong first, that text
// is content. After the commit nothing is taken back: should the JSON break, the
// rest of the call (to its end marker, or the end of the output) is its arguments
// (inside the arguments value) or envelope (after it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gateway/json_scan.hpp"
#include "gateway/span_parser.hpp"
#include "gateway/tool_parser.hpp"

namespace loom::gateway::tools {

/// Most bytes of a call held back before its commit; a longer uncommitted call is
/// content.
constexpr size_t kMaxHeld = 64 * 1024;

/// Longest function name accepted (OpenAI allows 64 characters; the slack takes
/// names that are wrong but should still be seen as calls).
constexpr size_t kMaxName = 256;

/// True when `name` can be a function name as written: non-empty, at most kMaxName
/// bytes, no whitespace, control bytes, quotes, backslashes or '<'/'['.
bool plausible_name(std::string_view name);

/// Which members of a call object hold the function name and the arguments.
struct CallKeys {
    std::vector<std::string> names;  ///< e.g. {"name"}
    std::vector<std::string> args;   ///< e.g. {"arguments"}
};

/// A parser with the two call readers. Offsets below are into buf_.
class ToolParserBase : public SpanParser {
protected:
    explicit ToolParserBase(ToolParserOptions o) : opts_(o) {}

    enum class Read { More, Failed, Closed, Broken };

    /// Starts reading a call object: buf_[0..at) is held text before it (the start
    /// marker and its whitespace), the object (after optional whitespace) begins at
    /// buf_[at].
    void begin_object(size_t at, const CallKeys& keys);
    /// Reads on. More: needs text. Failed: not a call (nothing emitted; buf_ still
    /// starts at the held text). Closed: the object ended (or the output did), all
    /// of it emitted. Broken: the JSON broke after the commit; what was read is
    /// emitted and broken_part() says where the rest of the call goes.
    Read read_object();

    /// The output was cut while a call object was read but not committed: when its name
    /// is complete (and plausible), starts the call, deciding the held text before the name
    /// as Marker and the name as Name (the rest stays in buf_). Returns whether it did.
    bool cut_object();

    /// Starts streaming committed call `call`'s arguments object, whose '{' is
    /// buf_[0]. read_args() emits as it reads: More, Closed or Broken.
    void begin_args(int call);
    Read read_args();

    /// After Broken: Arguments or Marker (see the file comment), and the call.
    Part broken_part() const { return broken_part_; }
    int broken_call() const { return call_; }

    /// A call's text is complete: with parallel_tool_calls false the output ends.
    void call_finished() {
        if (!opts_.parallel) done_ = true;
    }

    ToolParserOptions opts_;

private:
    void commit();
    void emit_scanned(size_t n);  // emits buf_[0..n) around the arguments value

    JsonScanner scan_;
    const CallKeys* keys_ = nullptr;
    long long origin_ = 0;                                  // scanner offset of buf_[0] (negative while held)
    int call_ = -1;                                         // the call being read, once committed
    size_t args_begin_ = 0, args_end_ = std::string::npos;  // scanner offsets
    Part broken_part_ = Part::Arguments;
};

/// The syntax of a family whose calls are JSON objects after a start marker.
struct JsonSyntax {
    std::vector<std::string> starts;  ///< start markers; with at_start, optional prefixes
    std::vector<std::string> ends;    ///< per start: the marker closing its section ("" none)
    std::vector<std::string> fences;  ///< per start: text between it and the JSON ("" none), e.g. "```json"
    bool at_start = false;            ///< calls only at the start of the output (llama3)
    bool array = false;               ///< the calls are a JSON array
    std::string separator;            ///< between objects when not an array (llama3 ";")
    CallKeys keys;
    std::vector<std::string> extra_markers;  ///< other marker texts to spell (e.g. response wrappers)
};

/// The generic parser for a JsonSyntax.
class JsonSectionParser : public ToolParserBase {
public:
    JsonSectionParser(JsonSyntax syntax, ToolParserOptions o);
    std::vector<std::string> markers() const override;

protected:
    bool step() override;
    void cut_call() override;

    enum class St {
        Start,
        Content,
        Fence,
        ArrayOpen,
        Object,
        AfterObject,
        NextItem,
        AfterSection,
        AfterEnd,
        Tail,
        Passthrough
    };
    JsonSyntax syn_;
    St st_;
    int start_ = -1;          // which start marker opened the section
    size_t skip_ = 0;         // held bytes that become content when the section fails
    bool first_item_ = true;  // the object is the section's first
};

}  // namespace loom::gateway::tools
