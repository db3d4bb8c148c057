// Recursive-descent regex parser producing grammar expressions; see regex.hpp.
#include "grammar/regex.hpp"

#include <cctype>
#include <string>

namespace loom::grammar {
namespace {

constexpr uint32_t kMaxCount = 10000;
constexpr int kMaxNesting = 100;

CharSet digit_set() { return CharSet::range('0', '9'); }
CharSet word_set() { return CharSet({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
// ECMA-262 WhiteSpace (TAB VT FF SP NBSP ZWNBSP and category Zs) and LineTerminator.
CharSet space_set() {
    return CharSet({{0x09, 0x0D},
                    {0x20, 0x20},
                    {0xA0, 0xA0},
                    {0x1680, 0x1680},
                    {0x2000, 0x200A},
                    {0x2028, 0x2029},
                    {0x202F, 0x202F},
                    {0x205F, 0x205F},
                    {0x3000, 0x3000},
                    {0xFEFF, 0xFEFF}});
}
CharSet dot_set() { return CharSet::all() - CharSet({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}); }

class Parser {
public:
    Parser(std::string_view p, RegexMatch mode) : p_(p), mode_(mode) {}

    ExprPtr parse() {
        std::vector<ExprPtr> branches;
        do {
            bool head = false, tail = false;
            if (eat('^')) head = true;
            ExprPtr body = concat(/*top=*/true, tail);
            if (mode_ == RegexMatch::Search) {
                const ExprPtr any = star(chars(CharSet::all()));
                body = seq({head ? empty() : any, body, tail ? empty() : any});
            }
            branches.push_back(body);
        } while (eat('|'));
        if (pos_ < p_.size()) fail("unbalanced ')'");
        return alt(std::move(branches));
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw GrammarError("regex: " + what + " at offset " + std::to_string(pos_));
    }
    bool at_end() const { return pos_ >= p_.size(); }
    char peek() const { return at_end() ? '\0' : p_[pos_]; }
    bool eat(char c) {
        if (peek() != c || at_end()) return false;
        ++pos_;
        return true;
    }
    uint32_t next_cp() {
        uint32_t cp;
        if (!next_utf8(p_, pos_, cp)) fail("invalid UTF-8");
        return cp;
    }

    // A sequence of quantified atoms up to '|' or ')' (or the end).
    ExprPtr concat(bool top, bool& tail_anchor) {
        std::vector<ExprPtr> items;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$') {
                ++pos_;
                if (!top || !(at_end() || peek() == '|')) fail("anchor $ before the end is not supported");
                tail_anchor = true;
                break;
            }
            if (peek() == '^') fail("anchor ^ after the start is not supported");
            items.push_back(quantified());
        }
        return seq(std::move(items));
    }

    ExprPtr group_body() {
        if (++nesting_ > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
        std::vector<ExprPtr> branches;
        do {
            bool tail = false;
            branches.push_back(concat(false, tail));
        } while (eat('|'));
        if (!eat(')')) fail("missing ')'");
        --nesting_;
        return alt(std::move(branches));
    }

    bool read_count(uint32_t& v) {
        const size_t start = pos_;
        uint64_t n = 0;
        while (!at_end() && peek() >= '0' && peek() <= '9') {
            n = n * 10 + static_cast<uint64_t>(peek() - '0');
            if (n > kMaxCount) fail("repetition count above " + std::to_string(kMaxCount));
            ++pos_;
        }
        v = static_cast<uint32_t>(n);
        return pos_ > start;
    }

    // {n}, {n,} or {n,m}; anything else leaves '{' to be read as a literal (ECMA-262 Annex B).
    bool brace_quantifier(uint32_t& lo, uint32_t& hi) {
        if (peek() != '{') return false;
        const size_t save = pos_++;
        uint32_t m = 0, n = 0;
        if (!read_count(m)) {
            pos_ = save;
            return false;
        }
        n = m;
        if (eat(',') && !read_count(n)) n = kUnbounded;
        if (!eat('}')) {
            pos_ = save;
            return false;
        }
        lo = m;
        hi = n;
        return true;
    }

    ExprPtr quantified() {
        ExprPtr a = atom();
        uint32_t lo = 1, hi = 1;
        if (eat('*')) lo = 0, hi = kUnbounded;
        else if (eat('+')) lo = 1, hi = kUnbounded;
        else if (eat('?')) lo = 0, hi = 1;
        else if (!brace_quantifier(lo, hi)) return a;
        if (lo > hi) fail("repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "} has min > max");
        eat('?');  // lazy: same language
        if (peek() == '+') fail("possessive quantifiers are not supported");
        if (peek() == '*' || peek() == '?') fail("nothing to repeat");
        return repeat(a, lo, hi);
    }

    ExprPtr atom() {
        const char c = peek();
        switch (c) {
            case '(': {
                ++pos_;
                if (eat('?')) {
                    if (eat(':')) return group_body();
                    if (peek() == '=' || peek() == '!') fail("lookahead is not supported");
                    if (eat('P')) {
                        if (peek() == '=') fail("named backreferences are not supported");
                        if (!eat('<')) fail("bad group syntax");
                    } else if (eat('<')) {
                        if (peek() == '=' || peek() == '!') fail("lookbehind is not supported");
                    } else {
                        fail("inline flags and other (? groups are not supported");
                    }
                    while (!at_end() && peek() != '>') {
                        const char n = peek();
                        if (!(std::isalnum(static_cast<unsigned char>(n)) || n == '_')) fail("bad group name");
                        ++pos_;
                    }
                    if (!eat('>')) fail("bad group name");
                }
                return group_body();
            }
            case '[': ++pos_; return chars(char_class());
            case '.': ++pos_; return chars(dot_set());
            case '\\': {
                ++pos_;
                CharSet s;
                if (escape(s, false)) return chars(s);
                fail("bad escape");
            }
            case '*':
            case '+':
            case '?': fail("nothing to repeat");
            case ')': fail("unbalanced ')'");
            default: return chars(CharSet::single(next_cp()));
        }
    }

    uint32_t hex_digits(size_t n) {
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
            const char h = peek();
            int d;
            if (h >= '0' && h <= '9') d = h - '0';
            else if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
            else fail("bad hex escape");
            v = v * 16 + static_cast<uint32_t>(d);
            ++pos_;
        }
        return v;
    }

    // After a backslash: the set it stands for. `in_class`: \b is backspace there.
    bool escape(CharSet& out, bool in_class) {
        if (at_end()) fail("trailing backslash");
        const char c = p_[pos_++];
        switch (c) {
            case 'd': out = digit_set(); return true;
            case 'D': out = digit_set().complement(); return true;
            case 'w': out = word_set(); return true;
            case 'W': out = word_set().complement(); return true;
            case 's': out = space_set(); return true;
            case 'S': out = space_set().complement(); return true;
            case 't': out = CharSet::single('\t'); return true;
            case 'n': out = CharSet::single('\n'); return true;
            case 'r': out = CharSet::single('\r'); return true;
            case 'f': out = CharSet::single('\f'); return true;
            case 'v': out = CharSet::single('\v'); return true;
            case '0':
                if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
                out = CharSet::single(0);
                return true;
            case 'x': out = CharSet::single(hex_digits(2)); return true;
            case 'u': {
                uint32_t v;
                if (eat('{')) {
                    v = 0;
                    size_t n = 0;
                    while (!at_end() && peek() != '}') {
                        v = v * 16 + hex_digits(1);
                        if (++n > 6 || v > kMaxCodePoint) fail("bad \\u{...} escape");
                    }
                    if (n == 0 || !eat('}')) fail("bad \\u{...} escape");
                } else {
                    v = hex_digits(4);
                }
                if (v >= 0xD800 && v <= 0xDFFF) fail("surrogate code points cannot be matched");
                out = CharSet::single(v);
                return true;
            }
            case 'b':
                if (in_class) {
                    out = CharSet::single('\b');
                    return true;
                }
                fail("word boundaries (\\b) are not supported");
            case 'B': fail("word boundaries (\\B) are not supported");
            case 'p':
            case 'P': fail("Unicode property escapes (\\p) are not supported");
            case 'k': fail("named backreferences are not supported");
            case 'c': fail("control escapes (\\c) are not supported");
            default:
                if (c >= '1' && c <= '9') fail("backreferences are not supported");
                if (std::isalnum(static_cast<unsigned char>(c))) fail(std::string("unknown escape \\") + c);
                --pos_;
                out = CharSet::single(next_cp());  // escaped punctuation or any other character
                return true;
        }
    }

    CharSet char_class() {
        const bool negate = eat('^');
        CharSet set;
        bool first = true;
        while (true) {
            if (at_end()) fail("missing ']'");
            if (peek() == ']' && !first) {
                ++pos_;
                break;
            }
            first = false;
            CharSet lo_set;
            uint32_t lo = 0;
            bool single = class_atom(lo_set, lo);
            if (single && peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
                ++pos_;
                CharSet hi_set;
                uint32_t hi = 0;
                if (!class_atom(hi_set, hi)) fail("class range with a class escape");
                if (hi < lo) fail("class range out of order");
                set = set | CharSet::range(lo, hi);
            } else {
                set = set | lo_set;
            }
        }
        return negate ? set.complement() : set;
    }

    // One class member: returns true (and `cp`) for a single code point.
    bool class_atom(CharSet& s, uint32_t& cp) {
        if (peek() == '\\') {
            ++pos_;
            escape(s, true);
            if (s.size() == 1) {
                cp = s.ranges()[0].first;
                return true;
            }
            return false;
        }
        cp = next_cp();
        s = CharSet::single(cp);
        return true;
    }

    std::string_view p_;
    RegexMatch mode_;
    size_t pos_ = 0;
    int nesting_ = 0;
};

}  // namespace

ExprPtr parse_regex(std::string_view pattern, RegexMatch mode) { return Parser(pattern, mode).parse(); }

}  // namespace loom::grammar
