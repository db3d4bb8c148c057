// Exact numeric-constraint automata, built by exploring reachable states; see numeric.hpp.
#include "grammar/numeric.hpp"

#include <algorithm>
#include <array>
#include <map>

namespace loom::grammar {
namespace {

constexpr int kLT = -1, kEQ = 0, kGT = 1;
constexpr size_t kMaxStates = 200'000;

// A bound on the magnitude M of the number written after an optional '-'.
struct MagBound {
    bool present = false;
    bool exclusive = false;
    std::string idig, fdig;  // as Decimal
};

// One sign branch: lower and upper bounds on the magnitude, and whether M must be > 0.
struct Branch {
    bool enabled = true;
    MagBound lower, upper;
    bool nonzero = false;
};

int cmp_int_final(int ilen, int prefix, const MagBound& b) {
    const int blen = static_cast<int>(b.idig.size());
    if (ilen < blen) return kLT;
    if (ilen > blen) return kGT;
    return prefix;
}

struct State {
    int8_t phase = 0;       // 0 no digit yet, 1 int part "0", 2 int digits, 3 after '.', 4 fraction digits
    int16_t ilen = 0;       // integer digits (capped); "0" counts 0
    int16_t flen = 0;       // fraction digits (capped)
    int8_t cl = 0, cu = 0;  // comparison with lower/upper: prefix cmp in the int phase, then final
    int8_t nz = 0;          // a nonzero digit was seen
    int32_t mod = 0;
    auto key() const { return std::array<int64_t, 7>{phase, ilen, flen, cl, cu, nz, mod}; }
};

class Builder {
public:
    Builder(const Branch& br, bool integer, uint32_t mod_a, int mod_k)
        : br_(br), integer_(integer), a_(mod_a), k_(mod_k) {
        icap_ = static_cast<int>(std::max(br.lower.idig.size(), br.upper.idig.size())) + 1;
        fcap_ = static_cast<int>(std::max(br.lower.fdig.size(), br.upper.fdig.size())) + 1;
        if (a_ > 0) fcap_ = std::max(fcap_, k_ + 1);
        if (!br.lower.present && !br.upper.present) icap_ = 0, fcap_ = a_ > 0 ? k_ + 1 : 0;
    }

    // Successor on byte c, or nothing.
    std::optional<State> next(const State& s, char c) const {
        State t = s;
        if (c == '.') {
            if (integer_ || (s.phase != 1 && s.phase != 2)) return std::nullopt;
            if (a_ > 0 && k_ == 0) return std::nullopt;  // an integer multiple has no fraction
            t.phase = 3;
            t.cl = static_cast<int8_t>(cmp_int_final(s.ilen, s.cl, br_.lower));
            t.cu = static_cast<int8_t>(cmp_int_final(s.ilen, s.cu, br_.upper));
            return t;
        }
        if (c < '0' || c > '9') return std::nullopt;
        const int d = c - '0';
        if (d) t.nz = 1;
        if (a_ > 0) t.mod = static_cast<int32_t>((static_cast<uint64_t>(s.mod) * 10 + static_cast<uint64_t>(d)) % a_);
        switch (s.phase) {
            case 0:
                t.phase = d == 0 ? 1 : 2;
                if (d) digit_int(t, 0, d);
                return t;
            case 1: return std::nullopt;  // no digits after a leading 0
            case 2: digit_int(t, s.ilen, d); return t;
            case 3:
            case 4: {
                if (a_ > 0 && s.flen >= k_) return std::nullopt;
                t.phase = 4;
                digit_frac(t.cl, s.flen, d, br_.lower);
                digit_frac(t.cu, s.flen, d, br_.upper);
                t.flen = static_cast<int16_t>(std::min(fcap_, s.flen + 1));
                return t;
            }
        }
        return std::nullopt;
    }

    bool accept(const State& s) const {
        if (s.phase == 0 || s.phase == 3) return false;
        if (br_.nonzero && !s.nz) return false;
        int cl = s.cl, cu = s.cu;
        if (s.phase <= 2) {
            cl = cmp_int_final(s.ilen, cl, br_.lower);
            cu = cmp_int_final(s.ilen, cu, br_.upper);
        }
        // Equal so far, but the bound has fraction digits still to come: it is larger.
        if (cl == kEQ && static_cast<size_t>(s.flen) < br_.lower.fdig.size()) cl = kLT;
        if (cu == kEQ && static_cast<size_t>(s.flen) < br_.upper.fdig.size()) cu = kLT;
        if (br_.lower.present && !(cl == kGT || (cl == kEQ && !br_.lower.exclusive))) return false;
        if (br_.upper.present && !(cu == kLT || (cu == kEQ && !br_.upper.exclusive))) return false;
        if (a_ > 0) {
            uint64_t v = static_cast<uint64_t>(s.mod);
            for (int j = s.flen; j < k_; ++j) v = v * 10 % a_;
            if (v != 0) return false;
        }
        return true;
    }

    int icap_ = 0, fcap_ = 0;

private:
    void digit_int(State& t, int pos, int d) const {
        // pos: index of this digit in the integer part.
        auto upd = [&](int8_t& c, const MagBound& b) {
            if (pos < static_cast<int>(b.idig.size()) && c == kEQ) {
                const int bd = b.idig[static_cast<size_t>(pos)] - '0';
                c = static_cast<int8_t>(d < bd ? kLT : d > bd ? kGT : kEQ);
            }
        };
        upd(t.cl, br_.lower);
        upd(t.cu, br_.upper);
        t.ilen = static_cast<int16_t>(std::min(icap_, pos + 1));
    }
    static void digit_frac(int8_t& c, int pos, int d, const MagBound& b) {
        if (c != kEQ) return;
        const int bd = pos < static_cast<int>(b.fdig.size()) ? b.fdig[static_cast<size_t>(pos)] - '0' : 0;
        c = static_cast<int8_t>(d < bd ? kLT : d > bd ? kGT : kEQ);
    }

    const Branch& br_;
    bool integer_;
    uint32_t a_;
    int k_;
};

// Explores the automaton of both sign branches from one start state (state 0).
std::shared_ptr<ByteDfa> explore(const Branch& pos, const Branch& neg, bool integer, uint32_t a, int k) {
    Builder bp(pos, integer, a, k), bn(neg, integer, a, k);
    auto d = std::make_shared<ByteDfa>();
    std::map<std::pair<int, std::array<int64_t, 7>>, int32_t> index;  // (branch, key) -> id; branch 2 = start
    std::vector<std::pair<int, State>> states;
    auto intern = [&](int branch, const State& s) -> int32_t {
        auto [it, fresh] = index.try_emplace({branch, s.key()}, static_cast<int32_t>(states.size()));
        if (fresh) {
            if (states.size() >= kMaxStates) throw GrammarError("the numeric constraint needs too large an automaton");
            states.emplace_back(branch, s);
        }
        return it->second;
    };
    intern(2, State{});
    for (size_t q = 0; q < states.size(); ++q) {
        const auto [branch, s] = states[q];
        std::array<int32_t, 256> row;
        row.fill(-1);
        auto try_step = [&](int br, const State& from, char c) {
            const Builder& b = br == 1 ? bn : bp;
            if (auto t = b.next(from, c)) row[static_cast<uint8_t>(c)] = intern(br, *t);
        };
        for (char c : std::string_view("0123456789.")) {
            if (branch == 2) {
                if (pos.enabled) try_step(0, s, c);
            } else {
                try_step(branch, s, c);
            }
        }
        if (branch == 2 && neg.enabled) row['-'] = intern(1, State{});
        d->next.insert(d->next.end(), row.begin(), row.end());
        bool acc = false;
        if (branch == 0) acc = bp.accept(s);
        if (branch == 1) acc = bn.accept(s);
        d->accept.push_back(acc ? 1 : 0);
    }
    d->n_states = static_cast<int32_t>(states.size());
    return d;
}

MagBound mag(const Decimal& v, bool exclusive) {
    MagBound b;
    b.present = true;
    b.exclusive = exclusive;
    b.idig = v.int_digits;
    b.fdig = v.frac_digits;
    return b;
}

ExprPtr plain_number(bool integer) {
    const ExprPtr digit = chars(CharSet::range('0', '9'));
    const ExprPtr int_part = alt({lit("0"), seq({chars(CharSet::range('1', '9')), star(digit)})});
    if (integer) return seq({opt(lit("-")), int_part});
    const ExprPtr frac = opt(seq({lit("."), plus(digit)}));
    // At most two exponent digits: a longer exponent leaves the range of a double, which
    // common JSON parsers refuse (RapidJSON) or turn into infinity.
    const ExprPtr exp = opt(seq({chars(CharSet({{'E', 'E'}, {'e', 'e'}})),
                                 opt(chars(CharSet({{'+', '+'}, {'-', '-'}}))), repeat(digit, 1, 2)}));
    return seq({opt(lit("-")), int_part, frac, exp});
}

}  // namespace

std::optional<Decimal> parse_decimal(std::string_view t) {
    size_t p = 0;
    Decimal d;
    if (p < t.size() && t[p] == '-') d.neg = true, ++p;
    std::string digits;
    const size_t int_start = p;
    while (p < t.size() && t[p] >= '0' && t[p] <= '9') digits += t[p++];
    if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
    long point = static_cast<long>(p - int_start);  // digits before the decimal point
    if (p < t.size() && t[p] == '.') {
        ++p;
        const size_t f = p;
        while (p < t.size() && t[p] >= '0' && t[p] <= '9') digits += t[p++];
        if (p == f) return std::nullopt;
    }
    if (p < t.size() && (t[p] == 'e' || t[p] == 'E')) {
        ++p;
        bool eneg = false;
        if (p < t.size() && (t[p] == '+' || t[p] == '-')) eneg = t[p++] == '-';
        long e = 0;
        const size_t f = p;
        while (p < t.size() && t[p] >= '0' && t[p] <= '9') {
            e = e * 10 + (t[p++] - '0');
            if (e > 400) return std::nullopt;
        }
        if (p == f) return std::nullopt;
        point += eneg ? -e : e;
    }
    if (p != t.size()) return std::nullopt;
    if (point > 400 || point < -400) return std::nullopt;
    // Place the decimal point `point` digits into `digits`.
    while (point < 0) digits.insert(digits.begin(), '0'), ++point;
    while (static_cast<long>(digits.size()) < point) digits += '0';
    d.int_digits = digits.substr(0, static_cast<size_t>(point));
    d.frac_digits = digits.substr(static_cast<size_t>(point));
    d.int_digits.erase(0, std::min(d.int_digits.find_first_not_of('0'), d.int_digits.size()));
    while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
    if (d.is_zero()) d.neg = false;
    return d;
}

ExprPtr number_expr(const NumberConstraint& c) {
    if (!c.min && !c.max && !c.multiple_of) return plain_number(c.integer);
    uint32_t a = 0;
    int k = 0;
    if (c.multiple_of) {
        const Decimal& m = *c.multiple_of;
        if (m.neg || m.is_zero()) throw GrammarError("multipleOf must be greater than 0");
        std::string digits = m.int_digits + m.frac_digits;
        digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
        if (digits.size() > 5) throw GrammarError("multipleOf with more than 5 significant digits is not supported");
        a = static_cast<uint32_t>(std::stoul(digits));
        k = static_cast<int>(m.frac_digits.size());
        // Trailing zeros of an integer multipleOf stay in `a` (100 -> a = 100, k = 0).
    }
    Branch pos, neg;
    neg.nonzero = true;
    if (c.min) {
        const Decimal& L = *c.min;
        if (L.neg) neg.lower = mag(L, c.min_exclusive);  // -M >= L  <=>  M <= |L|
        else {
            pos.lower = mag(L, c.min_exclusive);  // M >= L
            neg.enabled = false;                  // a negative number is below L >= 0
        }
        if (neg.lower.present) {  // for the negative branch `lower` caps M from above
            std::swap(neg.lower, neg.upper);
        }
    }
    if (c.max) {
        const Decimal& H = *c.max;
        if (H.neg) {
            pos.enabled = false;                   // M >= 0 > H
            MagBound b = mag(H, c.max_exclusive);  // -M <= H  <=>  M >= |H|
            neg.lower = b;
        } else {
            pos.upper = mag(H, c.max_exclusive);  // M <= H
            if (H.is_zero() && c.max_exclusive) pos.enabled = false;
        }
    }
    if (!pos.enabled && !neg.enabled) throw GrammarError("no number satisfies the bounds");
    auto d = explore(pos, neg, c.integer, a, k);
    // A bound pair like minimum 5, maximum 3 leaves no accepting state.
    if (std::find(d->accept.begin(), d->accept.end(), 1) == d->accept.end())
        throw GrammarError("no number satisfies the bounds");
    return dfa(std::move(d));
}

}  // namespace loom::grammar
