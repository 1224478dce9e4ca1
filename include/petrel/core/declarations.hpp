// Petrel: what a process declares (tables, remote functions), compared when nodes join.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace petrel {

/// One declared table, field by field as text, so that two processes' declarations can
/// be compared and a difference named. `table_registry::describe()` writes the fields
/// "key type", "value type", "width", "dense range", "initializer", "aggregation",
/// "replicas" and "update rule" (the rule with its parameters, e.g.
/// `adagrad{eta=0.05,epsilon=1e-08,initial_accumulator=0}`), in that order.
struct table_declaration {
    std::uint32_t id = 0;
    /// (field, value) pairs in a fixed order.
    std::vector<std::pair<std::string, std::string>> fields;

    friend bool operator==(const table_declaration&, const table_declaration&) = default;
};

/// What a process declares that every process of a job must declare alike: its tables
/// (`config::tables`) and the names of its remote functions (`config::functions`). A node
/// sends them when it joins (`member_options::declared`), and the manager refuses one
/// whose declarations differ from the job's with `errc::declaration_mismatch`, naming the
/// first difference (`first_difference`).
///
/// @par Example
/// @code
/// petrel::declarations d = tables.describe();    // a petrel::table_registry
/// d.functions = functions.names();               // a petrel::function_registry
/// std::string why = petrel::first_difference(d, theirs); // empty when they agree
/// @endcode
struct declarations {
    /// Limits a decoder enforces (control messages carry declarations).
    static constexpr std::uint32_t max_tables = 1u << 16;
    static constexpr std::uint32_t max_fields = 64;
    static constexpr std::uint32_t max_functions = 1u << 16;

    /// By increasing id.
    std::vector<table_declaration> tables;
    /// Sorted.
    std::vector<std::string> functions;

    friend bool operator==(const declarations&, const declarations&) = default;
};

/// The first difference between the declarations of a joining node (`here`) and the
/// job's (`job`), in words, or empty when they agree. Tables are compared by increasing
/// id, each field in order, then the remote functions by name, e.g. "table 0: update rule
/// is sgd{eta=0.01,l1=0,l2=0} on this node but adagrad{eta=0.1,...} on the job's other
/// nodes" or "table 3 is declared on this node but not on the job's other nodes".
[[nodiscard]] inline std::string first_difference(const declarations& here,
                                                  const declarations& job) {
    static constexpr std::string_view on_here = " on this node";
    static constexpr std::string_view on_job = " on the job's other nodes";
    const auto table_name = [](std::uint32_t id) { return "table " + std::to_string(id); };
    std::size_t i = 0;
    std::size_t j = 0;
    while (i < here.tables.size() || j < job.tables.size()) {
        if (j == job.tables.size() ||
            (i < here.tables.size() && here.tables[i].id < job.tables[j].id)) {
            return table_name(here.tables[i].id) + " is declared" + std::string(on_here) +
                   " but not" + std::string(on_job);
        }
        if (i == here.tables.size() || job.tables[j].id < here.tables[i].id) {
            return table_name(job.tables[j].id) + " is declared" + std::string(on_job) +
                   " but not" + std::string(on_here);
        }
        const auto& a = here.tables[i].fields;
        const auto& b = job.tables[j].fields;
        const auto value_in = [](const auto& fields,
                                 const std::string& name) -> const std::string* {
            for (const auto& [n, v] : fields) {
                if (n == name) {
                    return &v;
                }
            }
            return nullptr;
        };
        for (const auto& [name, value] : a) {
            const std::string* other = value_in(b, name);
            if (!other) {
                return table_name(here.tables[i].id) + ": " + name + " is " + value +
                       std::string(on_here) + " but not given" + std::string(on_job);
            }
            if (*other != value) {
                return table_name(here.tables[i].id) + ": " + name + " is " + value +
                       std::string(on_here) + " but " + *other + std::string(on_job);
            }
        }
        for (const auto& [name, value] : b) {
            if (!value_in(a, name)) {
                return table_name(here.tables[i].id) + ": " + name + " is " + value +
                       std::string(on_job) + " but not given" + std::string(on_here);
            }
        }
        ++i;
        ++j;
    }
    i = 0;
    j = 0;
    while (i < here.functions.size() || j < job.functions.size()) {
        if (j == job.functions.size() ||
            (i < here.functions.size() && here.functions[i] < job.functions[j])) {
            return "remote function '" + here.functions[i] + "' is registered" +
                   std::string(on_here) + " but not" + std::string(on_job);
        }
        if (i == here.functions.size() || job.functions[j] < here.functions[i]) {
            return "remote function '" + job.functions[j] + "' is registered" +
                   std::string(on_job) + " but not" + std::string(on_here);
        }
        ++i;
        ++j;
    }
    return {};
}

namespace detail {

/// `v` as the shortest text that reads back as `v` (so that any difference shows).
[[nodiscard]] inline std::string number_text(double v) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

} // namespace detail

} // namespace petrel
