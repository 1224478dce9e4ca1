// Petrel: consistency models, chosen as a type: `sequential`, `eventual`, `bounded_delay<Tau>`.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace petrel {

/// A worker's clock: the number of iterations it has completed on a table.
using clock_type = std::uint64_t;

/// Bulk synchronous: a pull at clock t sees every push of every live worker at clocks
/// below t, and nothing newer. Servers apply the pushes of one clock in a fixed worker
/// order, so a run is bitwise reproducible. Behaves as `bounded_delay<0>` otherwise.
struct sequential {
    /// The most clocks a reader may be ahead of the slowest live worker.
    static constexpr clock_type delay = 0;
    /// Whether pulls wait for slower workers at all.
    static constexpr bool waits = true;
    /// Whether servers hold a clock's pushes back and apply them in worker order.
    static constexpr bool ordered = true;
    static constexpr std::string_view name = "sequential";
};

/// Nobody waits: a pull returns whatever the servers hold when it arrives.
struct eventual {
    static constexpr clock_type delay = 0;
    static constexpr bool waits = false;
    static constexpr bool ordered = false;
    static constexpr std::string_view name = "eventual";
};

/// Stale synchronous parallel with bound `Tau`: a pull issued at clock t returns values
/// that include every push made by every live worker at clocks below t − Tau, so the
/// fastest worker runs at most Tau clocks ahead of the slowest. Pushes are applied as
/// they arrive.
template <clock_type Tau>
struct bounded_delay {
    static constexpr clock_type delay = Tau;
    static constexpr bool waits = true;
    static constexpr bool ordered = false;
    static constexpr std::string_view name = "bounded_delay";
};

namespace detail {

template <typename T>
struct is_consistency_policy : std::false_type {};
template <>
struct is_consistency_policy<sequential> : std::true_type {};
template <>
struct is_consistency_policy<eventual> : std::true_type {};
template <clock_type Tau>
struct is_consistency_policy<bounded_delay<Tau>> : std::true_type {};

} // namespace detail

/// The consistency models a store accepts: exactly `sequential`, `eventual` and
/// `bounded_delay<Tau>`. The set is closed because servers and workers must agree on
/// what each model means.
template <typename P>
concept consistency_policy = detail::is_consistency_policy<std::remove_cv_t<P>>::value;

/// The message a store gives when its `Consistency` argument is not a policy.
inline constexpr std::string_view consistency_policy_help =
    "Consistency must be petrel::sequential, petrel::eventual or petrel::bounded_delay<Tau>";

namespace detail {

/// A consistency model as values, for the parts of a store that are compiled once for
/// every model.
struct policy_traits {
    clock_type delay = 0;
    bool waits = false;
    bool ordered = false;

    friend constexpr bool operator==(const policy_traits&, const policy_traits&) = default;
};

/// The values of model `P`.
template <consistency_policy P>
inline constexpr policy_traits policy_traits_of{P::delay, P::waits, P::ordered};

/// `required_clock` of a model given as values.
[[nodiscard]] constexpr clock_type required_clock(const policy_traits& p, clock_type t) noexcept {
    if (!p.waits) {
        return 0;
    }
    return t > p.delay ? t - p.delay : 0;
}

} // namespace detail

/// The number of clocks every live worker must have completed on the keys before a read
/// issued at clock `t` may be answered: t − delay for waiting models (0 when t ≤ delay),
/// 0 for `eventual`.
template <consistency_policy P>
[[nodiscard]] constexpr clock_type required_clock(clock_type t) noexcept {
    return detail::required_clock(detail::policy_traits_of<P>, t);
}

/// A readable name: "sequential", "eventual", "bounded_delay<4>".
template <consistency_policy P>
[[nodiscard]] std::string policy_name() {
    if constexpr (P::waits && !P::ordered) {
        return std::string(P::name) + "<" + std::to_string(P::delay) + ">";
    } else {
        return std::string(P::name);
    }
}

} // namespace petrel
