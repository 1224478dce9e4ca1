// Petrel: half-open ranges of keys.
#pragma once

#include <petrel/core/key.hpp>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <utility>

namespace petrel {

/// A half-open range of keys `[begin, end)`.
///
/// Servers own key ranges, vector clocks are kept per range, and every message states
/// the range its keys fall in. An empty range has `begin >= end`; all empty ranges
/// compare equal to each other through `empty()` but not through `operator==`.
///
/// @par Example
/// @code
/// petrel::key_range<std::uint64_t> r{0, 100};
/// auto [lo, hi] = r.split(40);          // [0, 40) and [40, 100)
/// bool yes = r.contains(99);            // true
/// auto both = lo.intersect({30, 50});   // [30, 40)
/// @endcode
///
/// @par Thread Safety
/// A value type: distinct objects are independent; a shared object is safe to read.
template <key Key>
struct key_range {
    using key_type = Key;

    Key begin = 0;
    Key end = 0;

    /// The whole key space `[0, key_space_end<Key>)`.
    [[nodiscard]] static constexpr key_range all() noexcept { return {0, key_space_end<Key>}; }

    [[nodiscard]] constexpr bool empty() const noexcept { return begin >= end; }

    /// The number of keys in the range (0 when empty).
    [[nodiscard]] constexpr std::uint64_t size() const noexcept {
        return empty() ? 0 : static_cast<std::uint64_t>(end - begin);
    }

    [[nodiscard]] constexpr bool contains(Key k) const noexcept { return begin <= k && k < end; }

    /// True when every key of `other` is in this range; an empty `other` is contained.
    [[nodiscard]] constexpr bool contains(const key_range& other) const noexcept {
        return other.empty() || (begin <= other.begin && other.end <= end);
    }

    [[nodiscard]] constexpr bool overlaps(const key_range& other) const noexcept {
        return !intersect(other).empty();
    }

    /// The keys in both ranges; empty (`{0, 0}`) when they are disjoint.
    [[nodiscard]] constexpr key_range intersect(const key_range& other) const noexcept {
        const Key b = std::max(begin, other.begin);
        const Key e = std::min(end, other.end);
        return b < e ? key_range{b, e} : key_range{};
    }

    /// Splits at `at`, clamped into the range: `[begin, at)` and `[at, end)`.
    [[nodiscard]] constexpr std::pair<key_range, key_range> split(Key at) const noexcept {
        const Key m = std::clamp(at, begin, std::max(begin, end));
        return {key_range{begin, m}, key_range{m, std::max(m, end)}};
    }

    friend constexpr bool operator==(const key_range&, const key_range&) = default;
    friend constexpr auto operator<=>(const key_range&, const key_range&) = default;
};

} // namespace petrel
