// Petrel: initial values of a table's rows.
#pragma once

#include <petrel/core/declarations.hpp>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <string_view>

namespace petrel {

/// The value a table gives a key it has never stored: zero, a constant, or a seeded random
/// number that depends only on the seed, the key and the position in the row, so that a key
/// starts with the same value on whichever server holds it (and after re-sharding).
///
/// @par Example
/// @code
/// petrel::initializer::normal(0.0, 0.05, /*seed*/ 7).value(/*key*/ 12, /*column*/ 0);
/// @endcode
///
/// @par Thread Safety
/// `value` is a pure function; an initializer may be shared freely.
struct initializer {
    enum class kind : std::uint8_t { zeros = 0, constant = 1, uniform = 2, normal = 3 };

    kind how = kind::zeros;
    /// constant: the value; uniform: the lower bound; normal: the mean.
    double a = 0.0;
    /// uniform: the upper bound; normal: the standard deviation.
    double b = 0.0;
    std::uint64_t seed = 0;

    [[nodiscard]] static constexpr initializer zeros() noexcept { return {}; }
    [[nodiscard]] static constexpr initializer constant(double v) noexcept {
        return {kind::constant, v, 0.0, 0};
    }
    /// Uniform in `[low, high)`.
    [[nodiscard]] static constexpr initializer uniform(double low, double high,
                                                       std::uint64_t seed) noexcept {
        return {kind::uniform, low, high, seed};
    }
    /// Normal with `mean` and `stddev`.
    [[nodiscard]] static constexpr initializer normal(double mean, double stddev,
                                                      std::uint64_t seed) noexcept {
        return {kind::normal, mean, stddev, seed};
    }

    [[nodiscard]] std::string_view name() const noexcept {
        switch (how) {
        case kind::zeros:
            return "zeros";
        case kind::constant:
            return "constant";
        case kind::uniform:
            return "uniform";
        case kind::normal:
            return "normal";
        }
        return "unknown";
    }

    /// The initializer with its parameters, as text: `zeros`, `constant{value=0.5}`,
    /// `uniform{low=-1,high=1,seed=7}` or `normal{mean=0,stddev=0.01,seed=1}` (numbers in
    /// their shortest exact form), for comparing declarations across processes.
    [[nodiscard]] std::string describe() const {
        const auto n = [](double v) { return detail::number_text(v); };
        switch (how) {
        case kind::zeros:
            return "zeros";
        case kind::constant:
            return "constant{value=" + n(a) + "}";
        case kind::uniform:
            return "uniform{low=" + n(a) + ",high=" + n(b) + ",seed=" + std::to_string(seed) + "}";
        case kind::normal:
            return "normal{mean=" + n(a) + ",stddev=" + n(b) + ",seed=" + std::to_string(seed) +
                   "}";
        }
        return "unknown{kind=" + std::to_string(static_cast<unsigned>(how)) + "}";
    }

    /// The initial value of column `column` of `key`'s row.
    [[nodiscard]] double value(std::uint64_t key, std::uint64_t column) const noexcept {
        switch (how) {
        case kind::zeros:
            return 0.0;
        case kind::constant:
            return a;
        case kind::uniform:
            return a + (b - a) * unit(key, column, 0);
        case kind::normal: {
            // Box-Muller from two independent uniforms; u1 in (0, 1] keeps log finite.
            const double u1 = 1.0 - unit(key, column, 1);
            const double u2 = unit(key, column, 2);
            return a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
        }
        }
        return 0.0;
    }

    friend bool operator==(const initializer&, const initializer&) = default;

private:
    static constexpr std::uint64_t mix(std::uint64_t x) noexcept {
        x += 0x9E3779B97F4A7C15ULL;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
        return x ^ (x >> 31);
    }
    /// A uniform number in [0, 1) from (seed, key, column, stream).
    [[nodiscard]] double unit(std::uint64_t key, std::uint64_t column,
                              std::uint64_t stream) const noexcept {
        const std::uint64_t h = mix(mix(mix(seed ^ (stream << 56)) ^ key) ^ column);
        return static_cast<double>(h >> 11) * 0x1.0p-53;
    }
};

} // namespace petrel
