// Petrel: the tables a job declares (storage, initial values, update rule).
#pragma once

#include <petrel/core/declarations.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/server/detail/table_factory.hpp>
#include <petrel/server/initializer.hpp>
#include <petrel/server/updater.hpp>
#include <petrel/wire/header.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace petrel {

/// How the pushes of one clock are combined before the update rule sees them (tables
/// of `sequential` stores, whose pushes are held until their clock is complete).
enum class aggregation : std::uint8_t {
    sum = 0,  ///< the rows pushed for a key are added up
    mean = 1, ///< ... and divided by the number of pushes of that key
};

/// How one table is stored and updated.
struct table_spec {
    /// Values per key: 1 for scalars, the row length for embeddings or matrix rows.
    std::uint32_t width = 1;
    /// Dense storage for exactly these keys (others are refused); sparse when empty.
    std::optional<key_range<std::uint64_t>> dense{};
    /// The values of keys never pushed.
    initializer init{};
    /// How `sequential` pushes of one clock are combined before the update.
    petrel::aggregation aggregate = petrel::aggregation::sum;
    /// Copies of the table besides the primary's: at most the job's replicas (the ring's
    /// `replicas`), which it is when empty. 0 keeps a table of values that may be lost
    /// (scratch, statistics) on its primaries only.
    std::optional<std::uint32_t> replicas{};
};

/// The tables of a job by id, each with its key and value types, `table_spec` and update
/// rule. Every process of a job declares the same tables (give the registry to
/// `config::tables`); `petrel::run` checks it: each node sends `describe()` when it
/// joins, and the manager refuses a node whose tables differ from the job's
/// (`errc::declaration_mismatch`). A server creates a declared table when it is first
/// named. Tables that are not declared are sparse, summing and zero-initialised, with
/// the types of their first push.
///
/// @par Example
/// @code
/// petrel::table_registry tables;
/// tables.add<std::uint64_t, float>(0, {.width = 16, .init = petrel::initializer::normal(0, 0.01,
/// 1)},
///                                  petrel::adagrad{.eta = 0.05});
/// tables.add<std::uint32_t, float>(1, {.dense = petrel::key_range<std::uint64_t>{0, 1 << 20}},
///                                  petrel::adam{});
/// petrel::config cfg;
/// cfg.tables = std::make_shared<const petrel::table_registry>(std::move(tables));
/// @endcode
///
/// @par Thread Safety
/// Build it on one thread; a registry that is no longer changed may be read from any.
class table_registry {
public:
    /// A declared table.
    struct entry {
        std::uint32_t id = 0;
        table_spec spec;
        wire::scalar_type key_type = wire::scalar_type::u64;
        wire::scalar_type value_type = wire::scalar_type::f32;
        std::string updater;
        /// The update rule with its parameters (`detail::rule_text`), e.g.
        /// `sgd{eta=0.01,l1=0,l2=0}`.
        std::string rule;
        std::function<std::unique_ptr<detail::table_base>()> make;
    };

    /// Declares table `id` with keys of type `Key`, values of type `Value` and update rule
    /// `rule`: a type satisfying `updater<U, Value>` (`sum`, `sgd`, `adagrad`, `ftrl`,
    /// `adam`, or your own), or a function `f(std::span<Value> w, std::span<const Value> g)`.
    /// @throws std::invalid_argument for an id declared twice, width 0, or a dense range
    /// that is empty or beyond the keys `Key` can hold.
    template <wire::wire_key Key, wire::wire_value Value, typename U = petrel::sum>
    table_registry& add(std::uint32_t id, table_spec spec, U rule = {}) {
        if constexpr (std::is_invocable_v<const U&, std::span<Value>, std::span<const Value>>) {
            return add<Key, Value>(id, spec, update_fn<Value>(std::move(rule)));
        } else {
            static_assert(updater<U, Value>,
                          "petrel::table_registry::add: the update rule must satisfy "
                          "petrel::updater<U, Value> (state_size(width) and update(w, state, g)) "
                          "or be a function f(std::span<Value> w, std::span<const Value> g)");
            if (tables_.contains(id)) {
                throw std::invalid_argument("petrel::table_registry: table " + std::to_string(id) +
                                            " is declared twice");
            }
            if (spec.width == 0) {
                throw std::invalid_argument("petrel::table_registry: table " + std::to_string(id) +
                                            " has width 0");
            }
            if (spec.dense && (spec.dense->empty() || spec.dense->end > key_space_end<Key>)) {
                throw std::invalid_argument("petrel::table_registry: table " + std::to_string(id) +
                                            ": the dense key range must be non-empty and below " +
                                            std::to_string(key_space_end<Key>));
            }
            auto rule_box = detail::make_updater<Value>(std::move(rule));
            entry e;
            e.id = id;
            e.spec = spec;
            e.key_type = wire::scalar_type_of<Key>;
            e.value_type = wire::scalar_type_of<Value>;
            e.updater = std::string(rule_box->name());
            e.rule = rule_box->describe(spec.width);
            e.make = [spec, rule_box]() -> std::unique_ptr<detail::table_base> {
                return detail::make_table_of<Key, Value>(spec.width, rule_box, spec.init,
                                                         spec.dense);
            };
            tables_.emplace(id, std::move(e));
            return *this;
        }
    }

    /// The declared table `id`, or null.
    [[nodiscard]] const entry* find(std::uint32_t id) const noexcept {
        auto it = tables_.find(id);
        return it == tables_.end() ? nullptr : &it->second;
    }

    [[nodiscard]] std::size_t size() const noexcept { return tables_.size(); }

    /// Calls `f(entry)` for every declared table, by increasing id.
    template <typename F>
    void for_each(F&& f) const {
        for (const auto& [id, e] : tables_) {
            f(e);
        }
    }

    /// The declared tables field by field, for comparing them with another process's
    /// (`first_difference`): key type, value type, width, dense range, initializer,
    /// aggregation, replicas and update rule with its parameters. `functions` is left
    /// empty (see `function_registry::names`).
    [[nodiscard]] declarations describe() const {
        declarations d;
        for (const auto& [id, e] : tables_) {
            table_declaration t;
            t.id = id;
            const auto field = [&t](std::string name, std::string value) {
                t.fields.emplace_back(std::move(name), std::move(value));
            };
            field("key type", std::string(wire::type_name(e.key_type)));
            field("value type", std::string(wire::type_name(e.value_type)));
            field("width", std::to_string(e.spec.width));
            field("dense range", e.spec.dense ? "[" + std::to_string(e.spec.dense->begin) + ", " +
                                                    std::to_string(e.spec.dense->end) + ")"
                                              : std::string("none (sparse)"));
            field("initializer", e.spec.init.describe());
            field("aggregation",
                  e.spec.aggregate == aggregation::mean ? std::string("mean") : std::string("sum"));
            field("replicas",
                  e.spec.replicas ? std::to_string(*e.spec.replicas) : std::string("the job's"));
            field("update rule", e.rule);
            d.tables.push_back(std::move(t));
        }
        return d;
    }

private:
    std::map<std::uint32_t, entry> tables_;
};

} // namespace petrel
