// Incremental JSON scanning (RFC 8259); see json_scan.hpp.
#include "gateway/json_scan.hpp"

namespace loom::gateway {
namespace {

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Number sub-states (RFC 8259 section 6), then number_next's two outcomes that are none.
enum : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits, kNumEnd, kNumBad };
// The states where the number may end.
bool number_may_end(uint8_t s) { return s == kZero || s == kInt || s == kFrac || s == kExpDigits; }

// What byte c does to a number in sub-state s: the sub-state it moves to, kNumEnd (c is
// not part of the number, which ends before it) or kNumBad (no JSON number goes on so).
uint8_t number_next(uint8_t s, unsigned char c) {
    const bool digit = is_digit(c), exp = c == 'e' || c == 'E';
    switch (s) {
        case kMinus: return !digit ? kNumBad : c == '0' ? kZero : kInt;
        case kZero: return c == '.' ? kDot : exp ? kExp : kNumEnd;
        case kInt: return digit ? kInt : c == '.' ? kDot : exp ? kExp : kNumEnd;
        case kDot: return digit ? kFrac : kNumBad;
        case kFrac: return digit ? kFrac : exp ? kExp : kNumEnd;
        case kExp: return c == '+' || c == '-' ? kExpSign : digit ? kExpDigits : kNumBad;
        case kExpSign: return digit ? kExpDigits : kNumBad;
        default: return digit ? kExpDigits : kNumEnd;  // kExpDigits
    }
}

}  // namespace

void JsonScanner::value_start(unsigned char c) {
    if (stack_.empty()) {
        begin_ = pos_;
        kind_ = static_cast<char>(c);
    } else if (stack_.size() == 1 && stack_[0] == '{') {
        members_.back().value_begin = pos_;
        members_.back().kind = static_cast<char>(c);
    }
    switch (c) {
        case '{':
        case '[':
            if (stack_.size() >= kMaxDepth) return fail();
            stack_.push_back(static_cast<char>(c));
            return next_member(true);
        case '"':
            key_string_ = false;
            state_ = S::Str;
            return;
        case 't': lit_ = "true"; break;
        case 'f': lit_ = "false"; break;
        case 'n': lit_ = "null"; break;
        default:
            if (c == '-' || is_digit(c)) {
                num_ = c == '-' ? kMinus : c == '0' ? kZero : kInt;
                state_ = S::Num;
                return;
            }
            return fail();
    }
    lit_at_ = 1;
    state_ = S::Lit;
}

void JsonScanner::next_member(bool first) {
    if (stack_.back() == '{') {
        state_ = S::ObjKey;
        first_in_obj_ = first;
    } else {
        state_ = S::Value;
        first_in_arr_ = first;
    }
}

void JsonScanner::value_end(size_t end) {
    if (stack_.empty()) {
        state_ = S::Done;
        return;
    }
    if (stack_.size() == 1 && stack_[0] == '{') members_.back().value_end = end;
    state_ = S::AfterValue;
}

void JsonScanner::step(unsigned char c) {
    switch (state_) {
        case S::Value:
            if (is_ws(c)) return;
            if (c == ']' && first_in_arr_) {
                stack_.pop_back();
                return value_end(pos_ + 1);
            }
            first_in_arr_ = false;
            return value_start(c);
        case S::AfterValue:
            if (is_ws(c)) return;
            if (c == ',') return next_member(false);
            if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
                stack_.pop_back();
                return value_end(pos_ + 1);
            }
            return fail();
        case S::ObjKey:
            if (is_ws(c)) return;
            if (c == '"') {
                if (stack_.size() == 1) members_.emplace_back();
                key_string_ = true;
                state_ = S::Str;
                return;
            }
            if (c == '}' && first_in_obj_) {
                stack_.pop_back();
                return value_end(pos_ + 1);
            }
            return fail();
        case S::Colon:
            if (is_ws(c)) return;
            if (c != ':') return fail();
            state_ = S::Value;
            first_in_arr_ = false;
            return;
        case S::Str:
            if (c == '"') {
                if (key_string_) state_ = S::Colon;
                else value_end(pos_ + 1);
                return;
            }
            if (c < 0x20) return fail();
            if (c == '\\') state_ = S::StrEsc;
            if (key_string_ && stack_.size() == 1) members_.back().key += static_cast<char>(c);
            return;
        case S::StrEsc:
            if (c == 'u') {
                hex_left_ = 4;
                state_ = S::StrHex;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                state_ = S::Str;
            } else {
                return fail();
            }
            if (key_string_ && stack_.size() == 1) members_.back().key += static_cast<char>(c);
            return;
        case S::StrHex:
            if (!is_hex(c)) return fail();
            if (key_string_ && stack_.size() == 1) members_.back().key += static_cast<char>(c);
            if (--hex_left_ == 0) state_ = S::Str;
            return;
        case S::Lit:
            if (c != static_cast<unsigned char>(lit_[lit_at_])) return fail();
            if (++lit_at_ == lit_.size()) value_end(pos_ + 1);
            return;
        case S::Num: {
            const uint8_t next = number_next(num_, c);
            if (next == kNumBad) return fail();
            if (next != kNumEnd) {
                num_ = next;
                return;
            }
            // The byte ends the number; it is read again as what follows it.
            if (!number_may_end(num_)) return fail();
            value_end(pos_);
            if (state_ == S::AfterValue) step(c);
            return;
        }
        case S::Done:
        case S::Error: return;
    }
}

size_t JsonScanner::feed(std::string_view s) {
    size_t used = 0;
    while (used < s.size() && state_ != S::Done && state_ != S::Error) {
        const bool top_number = state_ == S::Num && stack_.empty();
        step(static_cast<unsigned char>(s[used]));
        if (top_number && state_ == S::Done) break;  // that byte is not the number's
        ++used;
        ++pos_;
    }
    return used;
}

void JsonScanner::finish() {
    if (state_ == S::Num && stack_.empty() && number_may_end(num_)) state_ = S::Done;
    else if (state_ != S::Done) state_ = S::Error;
}

}  // namespace loom::gateway
