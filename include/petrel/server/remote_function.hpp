// Petrel: user-defined functions that run on the servers over a key range of a table.
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/server/detail/table.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/remote_call.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace petrel {

/// The rows one server stores within a key range of a table: what a remote function sees.
///
/// `for_each` visits the stored keys of the range in increasing key order; rows of keys
/// never pushed are not visited (they read as zeros). The rows may be modified (a proximal
/// step, a projection): changes are made in the server's table. A server that has no such
/// table yet shows no rows. Made by the server for one call, over the table it holds; it
/// is valid during that call only.
///
/// @par Example
/// @code
/// // The squared L2 norm of the rows a server stores in the range.
/// auto sum_of_squares = [](auto& rows, const petrel::no_args&) -> double {
///     double s = 0;
///     rows.for_each([&](auto /*key*/, auto row) {
///         for (auto v : row) {
///             s += double(v) * double(v);
///         }
///     });
///     return s;
/// };
/// @endcode
///
/// @par Thread Safety
/// Not shared: one call of one function uses it, while the server holds its table.
template <typename Key, typename Value>
class table_rows {
    static_assert(wire::wire_key<Key>, "petrel::table_rows: Key must be std::uint32_t or "
                                       "std::uint64_t");
    static_assert(wire::wire_value<Value>, "petrel::table_rows: Value must be float or double");

public:
    using key_type = Key;
    using value_type = Value;

    /// The rows of `table` (none when null) within `range`, each of `width` values (the
    /// table's width when there is a table), of the keys `keep` accepts (every key when
    /// `keep` is empty: a server passes the keys it holds as a primary, so that the results
    /// of all servers together cover the table once). Lists the keys in range:
    /// O(size() + m log m). @throws std::bad_alloc
    table_rows(detail::table<Key, Value>* table, key_range<Key> range, std::size_t width,
               const std::function<bool(std::uint64_t)>& keep = {})
        : range_(range), width_(width) {
        if (table != nullptr) {
            width_ = table->width();
            table->for_each_in(range, [this, &keep](Key k, std::span<Value> row) {
                if (!keep || keep(k)) {
                    rows_.emplace_back(k, row.data());
                }
            });
        }
    }

    /// The key range the function was called on (as far as keys of type `Key` reach).
    [[nodiscard]] key_range<Key> range() const noexcept { return range_; }
    /// Values per row.
    [[nodiscard]] std::size_t width() const noexcept { return width_; }
    /// The number of keys the server stores within the range.
    [[nodiscard]] std::size_t size() const noexcept { return rows_.size(); }
    [[nodiscard]] bool empty() const noexcept { return rows_.empty(); }

    /// Calls `f(key, row)` with `row` a `std::span<Value>` of `width()` values, for each
    /// stored key in the range, in increasing key order.
    template <typename F>
    void for_each(F&& f) {
        for (const auto& [k, row] : rows_) {
            f(k, std::span<Value>(row, width_));
        }
    }

    /// As above, with `row` a `std::span<const Value>`.
    template <typename F>
    void for_each(F&& f) const {
        for (const auto& [k, row] : rows_) {
            f(k, std::span<const Value>(row, width_));
        }
    }

private:
    key_range<Key> range_;
    std::size_t width_;
    std::vector<std::pair<Key, Value*>> rows_;
};

namespace detail {

/// The key and value types a table may have, which every function is instantiated for.
template <typename F>
constexpr void for_each_table_type(F&& f) {
    f.template operator()<std::uint32_t, float>();
    f.template operator()<std::uint32_t, double>();
    f.template operator()<std::uint64_t, float>();
    f.template operator()<std::uint64_t, double>();
}

/// Runs one function on the rows of one key and value type: decodes the arguments, calls
/// the function, encodes its result into `result`. Null when the function does not take
/// tables of these types.
template <typename Key, typename Value>
using function_invoker =
    std::function<std::error_code(table_rows<Key, Value>& rows, std::span<const std::byte> args,
                                  std::vector<std::byte>& result, std::string& message)>;

/// A registered function, for every key and value type it takes.
struct function_entry {
    std::tuple<function_invoker<std::uint32_t, float>, function_invoker<std::uint32_t, double>,
               function_invoker<std::uint64_t, float>, function_invoker<std::uint64_t, double>>
        invokers;

    template <typename Key, typename Value>
    [[nodiscard]] const function_invoker<Key, Value>& get() const noexcept {
        return std::get<function_invoker<Key, Value>>(invokers);
    }

    /// Whether it takes tables with keys of type `Key` (of some value type).
    template <typename Key>
    [[nodiscard]] bool takes_key() const noexcept {
        return static_cast<bool>(get<Key, float>()) || static_cast<bool>(get<Key, double>());
    }
};

[[nodiscard]] constexpr std::string_view type_name(wire::scalar_type t) noexcept {
    return wire::type_name(t);
}

/// The keys of `r` that `Key` can hold (the largest value of `Key` is never a key).
template <typename Key>
[[nodiscard]] key_range<Key> narrow_range(key_range<std::uint64_t> r) noexcept {
    const auto limit = static_cast<std::uint64_t>(key_space_end<Key>);
    return {static_cast<Key>(std::min(r.begin, limit)), static_cast<Key>(std::min(r.end, limit))};
}

} // namespace detail

/// The remote functions a process can run, by name: user-defined functions that workers
/// call on the servers owning a key range of a table.
///
/// Each server that owns part of the range runs the function on the rows it holds as
/// the primary within the range (`table_rows`) and returns its result; the worker gets
/// one result per server, and together they cover every row of the range once, whatever
/// the table's replicas. A server that also holds rows of the range as a replica then
/// runs the function once more on those, and drops that result, so that a function that
/// changes rows changes every copy alike (a function with other side effects sees both
/// calls). Arguments and results travel as Cereal's binary archive writes them, so
/// they are arithmetic types, standard containers of them (`std::vector`, `std::string`,
/// `std::array`, `std::pair`, `std::tuple`) or structs with a `serialize` template, and
/// default-constructible. A function takes a generic `table_rows<K, V>&` and is kept
/// for each key type K (`std::uint32_t`, `std::uint64_t`) and value type V (`float`,
/// `double`) it can be called with; a generic lambda needs an explicit return type (or a
/// constraint), so that its body is not compiled for types it does not take. Calls on a
/// table of other types fail with `errc::key_type_mismatch` or
/// `errc::value_type_mismatch`.
///
/// Every process of the job (SPMD) registers the same functions under the same names,
/// before the job starts; a server is given its registry through
/// `server_options::functions`. A function that throws fails the call with
/// `errc::handler_failed` and its `what()` as the message; the rows it had modified stay
/// modified.
///
/// @par Example
/// @code
/// struct shrink_args {
///     double lambda = 0;
///     template <class Archive> void serialize(Archive& ar) { ar(lambda); }
/// };
/// auto functions = std::make_shared<petrel::function_registry>();
/// functions->add<petrel::no_args, double>(
///     "sum_of_squares", [](const auto& rows, const petrel::no_args&) -> double {
///         double s = 0;
///         rows.for_each([&](auto, auto row) {
///             for (auto v : row) {
///                 s += double(v) * double(v);
///             }
///         });
///         return s;
///     });
/// // A proximal step (soft threshold): modifies the rows, returns how many it zeroed.
/// functions->add<shrink_args, std::uint64_t>(
///     "shrink", [](auto& rows, const shrink_args& a) -> std::uint64_t {
///         std::uint64_t zeroed = 0;
///         rows.for_each([&](auto, auto row) {
///             for (auto& v : row) {
///                 const double x = std::abs(double(v)) - a.lambda;
///                 v = x > 0 ? std::copysign(x, double(v)) : 0;
///                 zeroed += x > 0 ? 0 : 1;
///             }
///         });
///         return zeroed;
///     });
/// petrel::server_node server(transport, {.functions = functions});
/// @endcode
///
/// @par Thread Safety
/// Register everything (`add`) before the registry is used; after that it is not
/// modified, and its const member functions may be called from any thread, concurrently.
/// A function may be called concurrently on different tables, so it must be safe to call
/// on several threads at once (it is called as a const object).
class function_registry {
public:
    /// Registers `f` under `name`; `f` is called as `Result(table_rows<K, V>&, const Args&)`
    /// on a const `F`, for each key type K and value type V it can be called with.
    /// @throws std::invalid_argument if `name` is empty, longer than `max_function_name`
    /// or registered already
    template <typename Args, typename Result, typename F>
    void add(std::string name, F f) {
        static_assert(detail::binary_serializable<Args>,
                      "petrel::function_registry::add: Args must be default-constructible and "
                      "serializable by Cereal (a serialize template, or a standard type)");
        static_assert(detail::binary_serializable<Result>,
                      "petrel::function_registry::add: Result must be default-constructible and "
                      "serializable by Cereal (a serialize template, or a standard type)");
        static_assert(takes_some_table<Args, Result, F>(),
                      "petrel::function_registry::add: f must be callable (as const) as "
                      "Result(petrel::table_rows<K, V>&, const Args&) for a key type K "
                      "(std::uint32_t, std::uint64_t) and a value type V (float, double)");
        check_name(name);
        check_new(name);
        auto entry = std::make_shared<detail::function_entry>();
        auto fn = std::make_shared<const F>(std::move(f));
        detail::for_each_table_type([&]<typename Key, typename Value>() {
            if constexpr (std::is_invocable_r_v<Result, const F&, table_rows<Key, Value>&,
                                                const Args&>) {
                std::get<detail::function_invoker<Key, Value>>(entry->invokers) =
                    make_invoker<Args, Result, Key, Value>(fn);
            }
        });
        functions_.emplace(std::move(name), std::move(entry));
    }

    /// Registers `F{}` under `F::name`, taking `F::args_type` and returning
    /// `F::result_type`. @throws std::invalid_argument as the other `add`
    template <remote_function F>
    void add() {
        add<typename F::args_type, typename F::result_type>(std::string(std::string_view(F::name)),
                                                            F{});
    }

    [[nodiscard]] bool contains(std::string_view name) const {
        return functions_.find(name) != functions_.end();
    }

    /// The number of registered functions.
    [[nodiscard]] std::size_t size() const noexcept { return functions_.size(); }

    /// The names of the registered functions, sorted (what a node declares when it joins:
    /// see `petrel::declarations`).
    [[nodiscard]] std::vector<std::string> names() const {
        std::vector<std::string> out;
        out.reserve(functions_.size());
        for (const auto& [name, entry] : functions_) {
            out.push_back(name);
        }
        return out;
    }

    /// Runs the call in `body` (see `detail::encode_call`) on the rows of `table` (none
    /// when null) within `range`, and writes the encoded result to `result`. `key_type`,
    /// `value_type` and `width` are the request's; a table must have them. The range is
    /// clamped to the keys the key type can hold. Only the rows of keys `keep` accepts are
    /// shown to the function (all when `keep` is empty). The caller holds the table
    /// exclusively.
    ///
    /// On failure returns the error and says why in `message` (when there is more to say
    /// than the error's own message): `errc::invalid_argument` for a body or arguments that
    /// do not decode, `errc::unknown_function`, `errc::key_type_mismatch`,
    /// `errc::value_type_mismatch` or `errc::width_mismatch` for a table or function of
    /// other types, `errc::handler_failed` when the function throws (with its `what()`),
    /// `errc::out_of_memory` when the server ran out of memory around the call.
    std::error_code invoke(std::span<const std::byte> body, detail::table_base* table,
                           wire::scalar_type key_type, wire::scalar_type value_type,
                           std::uint32_t width, key_range<std::uint64_t> range,
                           std::vector<std::byte>& result, std::string& message,
                           const std::function<bool(std::uint64_t)>& keep = {}) const {
        result.clear();
        message.clear();
        detail::decoded_call call;
        if (auto ec = detail::decode_call(body, call, message)) {
            return ec;
        }
        const auto it = functions_.find(call.name);
        if (it == functions_.end()) {
            message = "no remote function named '" + std::string(call.name) + "'";
            return errc::unknown_function;
        }
        const call_context c{*it->second, call,  table,  key_type, value_type,
                             width,       range, result, message,  keep};
        try {
            switch (key_type) {
            case wire::scalar_type::u32:
                return with_key<std::uint32_t>(c);
            case wire::scalar_type::u64:
                return with_key<std::uint64_t>(c);
            default:
                break;
            }
        } catch (const std::bad_alloc&) {
            result.clear();
            message = "the server ran out of memory calling remote function '" +
                      std::string(call.name) + "'";
            return errc::out_of_memory;
        }
        message = "remote functions take keys of type std::uint32_t or std::uint64_t, not " +
                  std::string(detail::type_name(key_type));
        return errc::key_type_mismatch;
    }

private:
    struct call_context {
        const detail::function_entry& entry;
        const detail::decoded_call& call;
        detail::table_base* table;
        wire::scalar_type key_type;
        wire::scalar_type value_type;
        std::uint32_t width;
        key_range<std::uint64_t> range;
        std::vector<std::byte>& result;
        std::string& message;
        const std::function<bool(std::uint64_t)>& keep;
    };

    template <typename Args, typename Result, typename F>
    static constexpr bool takes_some_table() {
        bool any = false;
        detail::for_each_table_type([&]<typename Key, typename Value>() {
            any = any ||
                  std::is_invocable_r_v<Result, const F&, table_rows<Key, Value>&, const Args&>;
        });
        return any;
    }

    static void check_name(const std::string& name) {
        if (name.empty() || name.size() > max_function_name) {
            throw std::invalid_argument("petrel::function_registry: the name of a remote "
                                        "function must have 1 to " +
                                        std::to_string(max_function_name) + " bytes");
        }
    }

    void check_new(const std::string& name) const {
        if (contains(name)) {
            throw std::invalid_argument("petrel::function_registry: a remote function named '" +
                                        name + "' is registered already");
        }
    }

    template <typename Args, typename Result, typename Key, typename Value, typename F>
    static detail::function_invoker<Key, Value> make_invoker(std::shared_ptr<const F> fn) {
        return [fn = std::move(fn)](table_rows<Key, Value>& rows, std::span<const std::byte> bytes,
                                    std::vector<std::byte>& result,
                                    std::string& message) -> std::error_code {
            Args args{};
            if (auto ec = detail::decode_binary(bytes, args, message)) {
                message = "the arguments of a remote function do not decode: " + message;
                return ec;
            }
            std::optional<Result> r;
            try {
                r.emplace(std::invoke(*fn, rows, std::as_const(args)));
            } catch (const std::exception& e) {
                message = e.what();
                return errc::handler_failed;
            } catch (...) {
                message = "a remote function threw an exception that is not a std::exception";
                return errc::handler_failed;
            }
            try {
                result = detail::encode_result(*r);
            } catch (const std::bad_alloc&) {
                throw;
            } catch (const std::exception& e) {
                message =
                    std::string("the result of a remote function does not encode: ") + e.what();
                return errc::handler_failed;
            }
            return {};
        };
    }

    template <typename Key>
    std::error_code with_key(const call_context& c) const {
        switch (c.value_type) {
        case wire::scalar_type::f32:
            return run<Key, float>(c);
        case wire::scalar_type::f64:
            return run<Key, double>(c);
        default:
            break;
        }
        c.message = "remote functions take values of type float or double, not " +
                    std::string(detail::type_name(c.value_type));
        return errc::value_type_mismatch;
    }

    template <typename Key, typename Value>
    std::error_code run(const call_context& c) const {
        detail::table<Key, Value>* typed = nullptr;
        if (c.table != nullptr) {
            wire::message_header h;
            h.key_type = c.key_type;
            h.value_type = c.value_type;
            h.width = c.width;
            if (auto ec = c.table->check(h)) {
                return ec;
            }
            typed = dynamic_cast<detail::table<Key, Value>*>(c.table);
            if (typed == nullptr) {
                c.message = "the table is not a table of " +
                            std::string(detail::type_name(c.key_type)) + " keys and " +
                            std::string(detail::type_name(c.value_type)) + " values";
                return errc::value_type_mismatch;
            }
        }
        const auto& invoker = c.entry.get<Key, Value>();
        if (!invoker) {
            c.message = "remote function '" + std::string(c.call.name) +
                        "' does not take tables of " + std::string(detail::type_name(c.key_type)) +
                        " keys and " + std::string(detail::type_name(c.value_type)) + " values";
            return c.entry.takes_key<Key>() ? errc::value_type_mismatch : errc::key_type_mismatch;
        }
        table_rows<Key, Value> rows(typed, detail::narrow_range<Key>(c.range), c.width, c.keep);
        return invoker(rows, c.call.args, c.result, c.message);
    }

    std::map<std::string, std::shared_ptr<const detail::function_entry>, std::less<>> functions_;
};

} // namespace petrel
