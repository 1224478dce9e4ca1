// Petrel: a table's rows in fixed-size blocks.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <memory>
#include <vector>

namespace petrel::detail {

/// Rows of `stride` values in fixed-size blocks: no over-allocation beyond one block and
/// no copy when growing. Rows are numbered from 0 in creation order.
template <typename Value>
class row_store {
public:
    explicit row_store(std::size_t stride) : stride_(stride) {
        // About 64 KiB per block, at least 64 rows.
        const std::size_t want = std::max<std::size_t>(64, (64 * 1024) / (stride * sizeof(Value)));
        shift_ = static_cast<unsigned>(std::bit_width(want) - 1);
    }

    [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
    [[nodiscard]] std::size_t stride() const noexcept { return stride_; }

    [[nodiscard]] Value* row(std::size_t i) noexcept {
        return blocks_[i >> shift_].get() + (i & mask()) * stride_;
    }
    [[nodiscard]] const Value* row(std::size_t i) const noexcept {
        return blocks_[i >> shift_].get() + (i & mask()) * stride_;
    }

    /// Makes room for `more` rows beyond `rows()`. @throws std::bad_alloc (the store is
    /// as it was, but for blocks added, which later rows use).
    void reserve_more(std::size_t more) {
        const std::size_t need = rows_ + more;
        const std::size_t per = std::size_t{1} << shift_;
        std::size_t blocks = (need + per - 1) / per;
        if (blocks > blocks_.size()) {
            blocks_.reserve(std::max(blocks, 2 * blocks_.size()));
            while (blocks_.size() < blocks) {
                blocks_.push_back(std::make_unique_for_overwrite<Value[]>(per * stride_));
            }
        }
    }

    /// The next row, from the room `reserve_more` made.
    std::size_t add() noexcept { return rows_++; }

    /// Removes the last `n` rows.
    void drop(std::size_t n) noexcept { rows_ -= n; }

    [[nodiscard]] std::size_t memory_bytes() const noexcept {
        return blocks_.size() * (std::size_t{1} << shift_) * stride_ * sizeof(Value) +
               blocks_.capacity() * sizeof(void*);
    }

private:
    [[nodiscard]] std::size_t mask() const noexcept { return (std::size_t{1} << shift_) - 1; }

    std::size_t stride_;
    unsigned shift_ = 6;
    std::size_t rows_ = 0;
    std::vector<std::unique_ptr<Value[]>> blocks_;
};

} // namespace petrel::detail
