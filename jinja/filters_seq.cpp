// Jinja2's builtin filters on sequences and mappings (sort, map, select, groupby, join, ...).
#include <algorithm>
#include <random>

#include "jinja/interp.hpp"
#include "jinja/pystr.hpp"

namespace loom::jinja {

Value lower_if_str(const Value& v) { return v.is_string() ? Value(py::lower(v.str())) : v; }

namespace {

// Jinja2's attribute path "a.b.0": getitem per part, digits as integers.
std::vector<Value> attr_parts(const Value& attr) {
    std::vector<Value> parts;
    if (attr.is_none() || attr.is_undefined()) return parts;
    if (!attr.is_string()) return {attr};
    for (auto& p : py::split(attr.str(), std::string("."), -1, false)) {
        bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
        parts.push_back(digits ? Value(static_cast<int64_t>(std::strtoll(p.c_str(), nullptr, 10))) : Value(p));
    }
    return parts;
}

Value get_path(Interp& in, Value item, const std::vector<Value>& parts, const Value* def) {
    for (const Value& p : parts) {
        item = in.get_item(item, p);
        if (def && !def->is_none() && item.is_undefined()) item = *def;
    }
    return item;
}

Value chunks(Interp& in, const Value& v, CallArgs& a, bool slices) {
    ArgBinder b(slices ? "slice" : "batch", a, {slices ? "slices" : "linecount", "fill_with"});
    if (!b.get(0) || !(b.get(0)->is_int() || b.get(0)->is_bool())) throw TemplateError("count must be an integer");
    int64_t n = b.get(0)->int_like();
    const Value* fill = b.get(1) && !b.get(1)->is_none() ? b.get(1) : nullptr;
    std::vector<Value> seq = in.iterate(v), out;
    if (n <= 0) throw TemplateError(slices ? "integer division or modulo by zero" : "count must be positive");
    auto len = static_cast<int64_t>(seq.size());
    if (slices || fill) in.check_size(static_cast<size_t>(std::min<int64_t>(n, INT64_MAX / 2)) * 16);
    if (!slices) {
        for (int64_t i = 0; i < len; i += n) {
            std::vector<Value> chunk(seq.begin() + i, seq.begin() + (n >= len - i ? len : i + n));
            while (fill && static_cast<int64_t>(chunk.size()) < n) chunk.push_back(*fill);
            out.push_back(Value::list(std::move(chunk)));
        }
    } else {
        int64_t per = len / n, extra = len % n, offset = 0;
        for (int64_t k = 0; k < n; ++k) {
            int64_t start = offset + k * per;
            if (k < extra) ++offset;
            int64_t end = offset + (k + 1) * per;
            std::vector<Value> chunk(seq.begin() + start, seq.begin() + end);
            if (fill && k >= extra) chunk.push_back(*fill);
            out.push_back(Value::list(std::move(chunk)));
        }
    }
    return Value::iterator(std::move(out));
}

Value f_batch(Interp& in, const Value& v, CallArgs& a) { return chunks(in, v, a, false); }

Value f_slice(Interp& in, const Value& v, CallArgs& a) { return chunks(in, v, a, true); }

Value f_dictsort(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("dictsort", a, {"case_sensitive", "by", "reverse"});
    bool cs = b.get(0) && b.get(0)->truthy();
    std::string by = b.get(1) ? soft_str(*b.get(1)) : "key";
    if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
    bool rev = b.get(2) && b.get(2)->truthy();
    if (v.is_undefined()) in.raise_undefined(v);
    if (!v.is_dict()) throw TemplateError("'" + v.type_name() + "' object has no attribute 'items'");
    std::vector<Value> items;
    for (const auto& [k, x] : v.obj().entries()) items.push_back(Value::list({k, x}, Value::Kind::Tuple));
    size_t pos = by == "key" ? 0 : 1;
    auto key = [&](const Value& item) { return cs ? item.items()[pos] : lower_if_str(item.items()[pos]); };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return rev ? in.less(key(y), key(x)) : in.less(key(x), key(y));
    });
    return Value::list(std::move(items));
}

Value f_first(Interp& in, const Value& v, CallArgs&) {
    if (v.kind() == Value::Kind::Iterator) {
        IterState& it = v.iter();
        if (it.pos < it.items.size()) return it.items[it.pos++];
    } else {
        std::vector<Value> items = in.iterate(v);
        if (!items.empty()) return items.front();
    }
    return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Interp& in, const Value& v, CallArgs&) {
    if (!v.is_string() && !v.is_array() && !v.is_dict() && !v.is_undefined())
        throw TemplateError("'" + v.type_name() + "' object is not reversible");
    std::vector<Value> items = in.iterate(v);
    if (!items.empty()) return items.back();
    return Value::undefined("No last item, sequence was empty.");
}

Value f_groupby(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("groupby", a, {"attribute", "default", "case_sensitive"});
    if (!b.get(0)) throw TemplateError("groupby() missing required argument 'attribute'");
    auto parts = attr_parts(*b.get(0));
    bool cs = b.get(2) && b.get(2)->truthy();
    std::vector<Value> items = in.iterate(v);
    std::vector<Value> keys;
    for (const Value& x : items) {
        Value k = get_path(in, x, parts, b.get(1));
        keys.push_back(cs ? k : lower_if_str(k));
    }
    std::vector<size_t> idx(items.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return in.less(keys[x], keys[y]); });
    std::vector<Value> out;
    for (size_t i = 0; i < idx.size();) {
        size_t j = i;
        std::vector<Value> group;
        while (j < idx.size() && py_equal(keys[idx[j]], keys[idx[i]])) group.push_back(items[idx[j++]]);
        Value grouper = cs ? keys[idx[i]] : get_path(in, group[0], parts, b.get(1));
        out.push_back(Value::list({grouper, Value::list(std::move(group))}, Value::Kind::Tuple));
        i = j;
    }
    return Value::list(std::move(out));
}

Value f_items(Interp&, const Value& v, CallArgs&) {
    if (v.is_undefined()) return Value::iterator({});
    if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, x] : v.obj().entries()) out.push_back(Value::list({k, x}, Value::Kind::Tuple));
    return Value::iterator(std::move(out));
}

Value f_join(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("join", a, {"d", "attribute"});
    std::string d = b.get(0) ? soft_str(*b.get(0)) : "";
    auto parts = b.get(1) ? attr_parts(*b.get(1)) : std::vector<Value>{};
    std::string out;
    bool first = true;
    for (const Value& x : in.iterate(v)) {
        if (!first) out += d;
        first = false;
        out += soft_str(parts.empty() ? x : get_path(in, x, parts, nullptr));
        in.check_size(out.size());
    }
    return Value(std::move(out));
}

Value f_list(Interp& in, const Value& v, CallArgs&) { return Value::list(in.iterate(v)); }

Value f_map(Interp& in, const Value& v, CallArgs& a) {
    std::vector<Value> out;
    if (!v.truthy()) return Value::iterator({});
    std::vector<Value> items = in.iterate(v);
    if (a.pos.empty()) {
        Value attr, def = Value::none();
        bool has_attr = false;
        for (auto& [k, x] : a.kw) {
            if (k == "attribute") attr = x, has_attr = true;
            else if (k == "default") def = x;
            else throw TemplateError("Unexpected keyword argument '" + k + "'");
        }
        if (!has_attr) throw TemplateError("map requires a filter argument");
        auto parts = attr_parts(attr);
        for (const Value& x : items) out.push_back(get_path(in, x, parts, &def));
    } else {
        std::string name = soft_str(a.pos[0]);
        for (const Value& x : items) {
            CallArgs sub;
            sub.pos.assign(a.pos.begin() + 1, a.pos.end());
            sub.kw = a.kw;
            out.push_back(in.call_filter(name, x, sub));
        }
    }
    return Value::iterator(std::move(out));
}

Value min_max(Interp& in, const Value& v, CallArgs& a, bool is_max) {
    ArgBinder b(is_max ? "max" : "min", a, {"case_sensitive", "attribute"});
    bool cs = b.get(0) && b.get(0)->truthy();
    auto parts = b.get(1) ? attr_parts(*b.get(1)) : std::vector<Value>{};
    std::vector<Value> items = in.iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto key = [&](const Value& x) {
        Value k = parts.empty() ? x : get_path(in, x, parts, nullptr);
        return cs ? k : lower_if_str(k);
    };
    size_t best = 0;
    Value bk = key(items[0]);
    for (size_t i = 1; i < items.size(); ++i) {
        Value k = key(items[i]);
        if (in.compare(is_max ? detail::CmpOp::Gt : detail::CmpOp::Lt, k, bk)) best = i, bk = k;
    }
    return items[best];
}

Value f_min(Interp& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }

Value f_max(Interp& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value select_impl(Interp& in, const Value& v, CallArgs& a, bool attr, bool keep_truthy) {
    if (!v.truthy()) return Value::iterator({});
    std::vector<Value> items = in.iterate(v);
    size_t off = 0;
    std::vector<Value> parts;
    if (attr) {
        if (a.pos.empty()) throw TemplateError("Missing parameter for attribute name");
        parts = attr_parts(a.pos[0]);
        off = 1;
    }
    std::string test;
    bool has_test = a.pos.size() > off;
    if (has_test) test = soft_str(a.pos[off]);
    std::vector<Value> out;
    for (const Value& x : items) {
        Value t = attr ? get_path(in, x, parts, nullptr) : x;
        bool r;
        if (has_test) {
            CallArgs sub;
            sub.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), a.pos.end());
            sub.kw = a.kw;
            r = in.call_test(test, t, sub);
        } else {
            r = t.truthy();
        }
        if (r == keep_truthy) out.push_back(x);
    }
    return Value::iterator(std::move(out));
}

Value f_select(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }

Value f_reject(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }

Value f_selectattr(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }

Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Value f_random(Interp& in, const Value& v, CallArgs&) {
    std::vector<Value> items = v.is_string() || v.is_sequence() ? in.iterate(v) : std::vector<Value>{};
    if (!v.is_string() && !v.is_sequence() && !v.is_undefined())
        throw TemplateError("object of type '" + v.type_name() + "' has no len()");
    if (items.empty()) return Value::undefined("No random item, sequence was empty.");
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return items[rng() % items.size()];
}

Value f_reverse(Interp& in, const Value& v, CallArgs&) {
    if (v.is_string()) return Value(py::slice(v.str(), std::nullopt, std::nullopt, -1));
    if (v.kind() == Value::Kind::Iterator || v.is_undefined() || v.is_array() || v.is_dict()) {
        std::vector<Value> items = in.iterate(v);
        std::reverse(items.begin(), items.end());
        if (v.kind() == Value::Kind::Iterator) return Value::list(std::move(items));
        return Value::iterator(std::move(items), v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
    }
    throw TemplateError("argument must be iterable");
}

Value f_sort(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("sort", a, {"reverse", "case_sensitive", "attribute"});
    bool rev = b.get(0) && b.get(0)->truthy(), cs = b.get(1) && b.get(1)->truthy();
    std::vector<std::vector<Value>> attrs;
    if (b.get(2) && !b.get(2)->is_none()) {
        if (b.get(2)->is_string())
            for (auto& p : py::split(b.get(2)->str(), std::string(","), -1, false))
                attrs.push_back(attr_parts(Value(p)));
        else attrs.push_back(attr_parts(*b.get(2)));
    }
    std::vector<Value> items = in.iterate(v), keys;
    for (const Value& x : items) {
        std::vector<Value> k;
        for (const auto& parts : attrs) {
            Value kv = get_path(in, x, parts, nullptr);
            k.push_back(cs ? kv : lower_if_str(kv));
        }
        keys.push_back(attrs.empty() ? (cs ? x : lower_if_str(x)) : Value::list(std::move(k)));
    }
    std::vector<size_t> idx(items.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t x, size_t y) { return rev ? in.less(keys[y], keys[x]) : in.less(keys[x], keys[y]); });
    std::vector<Value> out;
    for (size_t i : idx) out.push_back(items[i]);
    return Value::list(std::move(out));
}

Value f_sum(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("sum", a, {"attribute", "start"});
    auto parts = b.get(0) && !b.get(0)->is_none() ? attr_parts(*b.get(0)) : std::vector<Value>{};
    Value acc = b.get_or(1, Value(0));
    for (const Value& x : in.iterate(v))
        acc = in.binary(detail::BinOp::Add, acc, parts.empty() ? x : get_path(in, x, parts, nullptr));
    return acc;
}

Value f_unique(Interp& in, const Value& v, CallArgs& a) {
    ArgBinder b("unique", a, {"case_sensitive", "attribute"});
    bool cs = b.get(0) && b.get(0)->truthy();
    auto parts = b.get(1) && !b.get(1)->is_none() ? attr_parts(*b.get(1)) : std::vector<Value>{};
    Object seen;
    std::vector<Value> out;
    for (const Value& x : in.iterate(v)) {
        Value k = parts.empty() ? x : get_path(in, x, parts, nullptr);
        if (!cs) k = lower_if_str(k);
        if (!seen.find(k)) {
            seen.set(k, Value(true));
            out.push_back(x);
        }
    }
    return Value::iterator(std::move(out));
}

const detail::NamedFn<detail::FilterFn> kSequenceFilters[] = {
    {"batch", f_batch},
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"groupby", f_groupby},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"list", f_list},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"random", f_random},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"reverse", f_reverse},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"sum", f_sum},
    {"unique", f_unique},
};

}  // namespace

namespace detail {

FilterFn find_sequence_filter(std::string_view name) { return find_named(kSequenceFilters, name); }

}  // namespace detail

}  // namespace loom::jinja
