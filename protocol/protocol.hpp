// The loom engine protocol: line types as plain structs, with format() and parse().
//
// Source: docs/protocol.md (the spec; keep the two in step). One message per line,
// fields separated by single spaces, `key=value` fields in any order; unknown keys are
// skipped so an older engine and a newer gateway still talk. Floats are written as the
// shortest decimal that reads back to the same float32, so a float32 survives the round
// trip. This library does no I/O and depends on nothing else in loom.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace loom::protocol {

/// Protocol version spoken by this library (HELLO's first field is `loom/<version>`).
inline constexpr int kVersion = 1;
/// Largest `logprobs=K` an engine must accept.
inline constexpr int kMaxLogprobs = 20;

using TokenId = int32_t;

/// Capability names an engine announces in HELLO's `caps=` (docs/protocol.md,
/// "Capabilities"); the gateway refuses a request that needs one the engine lacks.
namespace cap {
inline constexpr char kLogprobs[] = "logprobs";                     ///< `logprobs=K` and LP lines
inline constexpr char kAllowed[] = "allowed";                       ///< `allowed=`
inline constexpr char kCancel[] = "cancel";                         ///< CANCEL
inline constexpr char kPromptLogprobs[] = "prompt_logprobs";        ///< `prompt_logprobs=K` and PLP lines
inline constexpr char kPenalties[] = "penalties";                   ///< presence, frequency, repetition penalties
inline constexpr char kLogitBias[] = "logit_bias";                  ///< `logit_bias=`
inline constexpr char kProcessedLogprobs[] = "processed_logprobs";  ///< `logprobs_mode=processed`
inline constexpr char kSeed[] = "seed";                             ///< `seed=` gives reproducible sampling
inline constexpr char kGrammar[] = "grammar";                       ///< `grammar=` (grammar-constrained decoding)
inline constexpr char kPing[] = "ping";                             ///< PING, answered with PONG at once
}  // namespace cap

// ---------------------------------------------------------------------------
// engine -> gateway

/// First line an engine writes: who it is, the model facts the gateway needs, and
/// what it can do. `caps` lists capability names (the cap:: constants above; a name
/// this library does not know is kept, so a newer engine's capabilities survive).
struct Hello {
    int version = kVersion;
    std::string engine;   ///< executable name, e.g. "loom-engine-cpu"
    std::string backend;  ///< "cpu", "cuda", "hip"
    std::string model;    ///< model name (general.name or file name)
    int64_t n_vocab = 0;  ///< logits per position
    int64_t n_ctx = 0;    ///< longest sequence (prompt + completion) the engine serves
    TokenId bos = -1;     ///< -1: none
    TokenId eos = -1;
    std::vector<TokenId> eog;  ///< ids that end generation (finish_reason "stop")
    std::vector<std::string> caps;
    int max_logprobs = kMaxLogprobs;
    /// True when `caps` holds `c` (exact, case-sensitive match).
    bool has_cap(std::string_view c) const;
};

/// `T <id> <token>`: one generated token.
struct Token {
    std::string id;
    TokenId token = 0;
};

/// One (token, logprob) pair; logprob may be -inf, never NaN.
using TokenLogprob = std::pair<TokenId, float>;

/// `LP <id> <logprob> [tok:lp ...]`: the logprob of the token just sent in `T` and the
/// top-K alternatives, sorted by logprob descending (ties: lower id first).
struct Logprobs {
    std::string id;
    float logprob = 0;
    std::vector<TokenLogprob> top;
};

/// `PLP <id> <index> <logprob|-> [tok:lp ...]`: logprob of prompt token `index` given
/// the tokens before it; `-` (no value) for index 0. Sent after prefill when GEN asked
/// for prompt_logprobs, one line per prompt token, before any T line.
struct PromptLogprobs {
    std::string id;
    int64_t index = 0;
    std::optional<float> logprob;
    std::vector<TokenLogprob> top;
};

/// `DONE <id> <finish> prompt_tokens=N completion_tokens=M [cached_tokens=C]`.
/// finish: "stop" (an end-of-generation token; it is not sent as T), "length"
/// (max_tokens or the context is full) or "cancelled". cached_tokens: prompt tokens whose KV
/// came from the prefix cache, written only when > 0 (absent reads as 0).
struct Done {
    std::string id;
    std::string finish;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
};

/// `ERR <id> <message>`: the request failed; message is free text to the end of the
/// line. id is `-` when the offending line had no readable id.
struct Error {
    std::string id;
    std::string message;
};

/// `PONG <token>`: the answer to `PING <token>`, written by the engine's input reader at
/// once, whatever its scheduler is doing (capability "ping").
struct Pong {
    std::string token;  ///< the PING's token: 1..64 bytes of [A-Za-z0-9._-]
};

using EngineLine = std::variant<Hello, Token, Logprobs, PromptLogprobs, Done, Error, Pong>;

// ---------------------------------------------------------------------------
// gateway -> engine

/// A GEN line's `grammar=<kind>:<base64 of source>` (docs/protocol.md, "Grammars"): the
/// constraint as the gateway states it; the engine compiles it against its own vocabulary.
/// Known kinds: json_schema (source: a JSON Schema document), json_object (source empty),
/// regex (an ECMAScript pattern matched in full), choice (a JSON array of strings),
/// tagged_json (a prefix, items of literal text and JSON values, one of several alternatives
/// each, joined by a separator, a suffix: forced tool calls in a family's syntax). The
/// protocol library carries any kind of 1..32 bytes of [a-z0-9_]; the engine refuses
/// kinds it does not know with ERR. With `reasoning_close` set (the GEN line's
/// `grammar_reasoning=[<open>,]<close>`), the constraint applies after a reasoning block:
/// any text up to and including the first `reasoning_close`, then at most two whitespace
/// bytes; with `reasoning_open` too, that block (after at most two whitespace bytes and
/// `reasoning_open`) is optional (grammar/reasoning_block.hpp).
struct GrammarSpec {
    std::string kind;
    std::string source;                               ///< any bytes (base64 on the line, RFC 4648 section 4)
    std::string reasoning_open{}, reasoning_close{};  ///< any bytes; close "": no reasoning block
    bool operator==(const GrammarSpec&) const = default;
};

/// The grammar kinds of docs/protocol.md ("Grammars").
namespace grammar_kind {
inline constexpr char kJsonSchema[] = "json_schema";
inline constexpr char kJsonObject[] = "json_object";
inline constexpr char kRegex[] = "regex";
inline constexpr char kChoice[] = "choice";
inline constexpr char kTaggedJson[] = "tagged_json";
}  // namespace grammar_kind

/// `GEN <id> prompt=... [key=value ...]`: start generating for one request.
struct Gen {
    std::string id;
    std::vector<TokenId> prompt;         ///< required, non-empty
    std::optional<int64_t> max_tokens;   ///< absent: until the context is full
    float temperature = 1.0f;            ///< 0: greedy
    int32_t top_k = 0;                   ///< 0: off
    float top_p = 1.0f;                  ///< 1: off
    float min_p = 0.0f;                  ///< 0: off
    std::optional<uint64_t> seed;        ///< absent: nondeterministic
    std::optional<int> logprobs;         ///< absent: no LP lines; K in 0..20
    std::optional<int> prompt_logprobs;  ///< absent: no PLP lines; K in 0..20
    std::vector<TokenId> allowed;        ///< empty: every token
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    float repetition_penalty = 1.0f;
    std::vector<std::pair<TokenId, float>> logit_bias;
    bool processed_logprobs = false;     ///< logprobs_mode=processed
    bool ignore_eos = false;             ///< do not stop at end-of-generation ids
    std::optional<GrammarSpec> grammar;  ///< absent: unconstrained
};

/// `CANCEL <id>`: stop the request; the engine answers with `DONE <id> cancelled`.
struct Cancel {
    std::string id;
};

/// `PING <token>`: a liveness check; the engine answers `PONG <token>` at once.
struct Ping {
    std::string token;  ///< 1..64 bytes of [A-Za-z0-9._-]
};

using GatewayLine = std::variant<Gen, Cancel, Ping>;

// ---------------------------------------------------------------------------

/// A line that could not be parsed. `id` is the request id when one was readable.
struct ParseError {
    std::string id;
    std::string message;
};

/// Formats a line without its trailing newline. Throws std::invalid_argument for a
/// value that cannot be written (a NaN float, an invalid request id, a GEN with an
/// empty prompt or a grammar kind outside [a-z0-9_]{1,32}, a DONE finish reason that is
/// empty or holds whitespace).
std::string format(const EngineLine& line);
std::string format(const GatewayLine& line);

/// Parses one line (a trailing "\n" or "\r\n" is ignored). Never throws.
std::variant<EngineLine, ParseError> parse_engine_line(std::string_view line);
std::variant<GatewayLine, ParseError> parse_gateway_line(std::string_view line);

/// Base64 (RFC 4648 section 4: the standard alphabet, '=' padding) of `bytes`.
std::string base64_encode(std::string_view bytes);
/// The bytes of base64 text `text` (padding required, no whitespace), or nullopt when it
/// is not canonical base64.
std::optional<std::string> base64_decode(std::string_view text);

/// True when `id` is a valid request id: 1..64 bytes of [A-Za-z0-9._-].
bool valid_id(std::string_view id);

/// Shortest decimal that reads back to the same float32 (std::to_chars); "-inf" for
/// -infinity, "inf" for +infinity. Throws std::invalid_argument for NaN.
std::string format_float(float v);

}  // namespace loom::protocol
