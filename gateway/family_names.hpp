// A family enum's names for --tool-call-parser / --reasoning-parser: one table, three lookups.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace loom::gateway {

/// One row of a family-name table: an enum value (ToolFamily, ReasoningFamily) and the name
/// the command line and the logs use for it.
template <class Family>
struct FamilyName {
    Family family;
    std::string_view name;
};

/// The name of `f` in `table`, or "none" when the table has no row for it.
template <class Family, std::size_t N>
std::string_view family_name(const FamilyName<Family> (&table)[N], Family f) {
    for (const FamilyName<Family>& n : table)
        if (n.family == f) return n.name;
    return "none";
}

/// The family named `name` in `table` (exact match, case-sensitive), or nullopt.
template <class Family, std::size_t N>
std::optional<Family> family_from_name(const FamilyName<Family> (&table)[N], std::string_view name) {
    for (const FamilyName<Family>& n : table)
        if (n.name == name) return n.family;
    return std::nullopt;
}

/// Every name of `table` in its order, joined by ", " (for --help and error messages);
/// the row of `skip`, when given, left out.
template <class Family, std::size_t N>
std::string family_names(const FamilyName<Family> (&table)[N], std::optional<Family> skip = std::nullopt) {
    std::string out;
    for (const FamilyName<Family>& n : table) {
        if (skip && n.family == *skip) continue;
        if (!out.empty()) out += ", ";
        out += n.name;
    }
    return out;
}

}  // namespace loom::gateway
