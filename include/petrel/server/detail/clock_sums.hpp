// Petrel: the gradients of one clock's pushes summed per row, so each row updates once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace petrel::detail {

/// Sums rows of `width` values per table row, in the order rows are first added, and
/// counts how many were added to each. A table fills it with the pushes of one clock, then
/// drains it to update each touched row once (a mean divides by the count). Its vectors
/// are kept between clocks, so a steady workload allocates nothing. Not thread-safe: the
/// table's writer owns it.
template <typename Value>
class clock_sums {
public:
    explicit clock_sums(std::size_t width) noexcept : width_(width) {}

    /// Adds `g` (`width` values) to the sum of `row`. On `std::bad_alloc` nothing of this
    /// call is kept and the sums added before stay as they were.
    void add(std::uint32_t row, const Value* g) {
        if (marks_.size() <= row) {
            marks_.resize(std::size_t{row} + 1, 0);
        }
        std::uint32_t& mark = marks_[row];
        if (mark != 0) {
            Value* s = sums_.data() + std::size_t{mark - 1} * width_;
            for (std::size_t j = 0; j < width_; ++j) {
                s[j] += g[j];
            }
            ++counts_[mark - 1];
            return;
        }
        touched_.reserve(touched_.size() + 1);
        counts_.reserve(counts_.size() + 1);
        sums_.insert(sums_.end(), g, g + width_);
        touched_.push_back(row);
        counts_.push_back(1);
        mark = static_cast<std::uint32_t>(touched_.size());
    }

    /// Rows with a sum.
    [[nodiscard]] std::size_t size() const noexcept { return touched_.size(); }

    /// Calls `f(row, sum, count)` for each row with a sum, in the order they were first
    /// added (`sum` a `std::span<Value>` of `width` values, which `f` may change), then
    /// forgets every sum. `f` must not throw.
    template <typename F>
    void drain(F&& f) noexcept {
        for (std::size_t t = 0; t < touched_.size(); ++t) {
            f(touched_[t], std::span<Value>(sums_.data() + t * width_, width_), counts_[t]);
        }
        clear();
    }

    /// Forgets every sum (after a failed fill, say).
    void clear() noexcept {
        for (const std::uint32_t r : touched_) {
            marks_[r] = 0;
        }
        touched_.clear();
        counts_.clear();
        sums_.clear();
    }

    /// Bytes its vectors hold.
    [[nodiscard]] std::size_t memory_bytes() const noexcept {
        return (marks_.capacity() + touched_.capacity() + counts_.capacity()) *
                   sizeof(std::uint32_t) +
               sums_.capacity() * sizeof(Value);
    }

private:
    std::size_t width_;
    std::vector<std::uint32_t> marks_;   // row → its place in touched_ + 1, or 0
    std::vector<std::uint32_t> touched_; // rows with a sum, first added first
    std::vector<std::uint32_t> counts_;  // rows added to each sum
    std::vector<Value> sums_;            // width_ values per touched row
};

} // namespace petrel::detail
