// Petrel: keys to row numbers by open addressing.
#pragma once

#include <petrel/core/key.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace petrel::detail {

/// Keys to row numbers by open addressing (linear probing, at most 4/5 full, growing by
/// half): a key and a 32-bit row number per slot, no per-key allocation, 12 to 23 bytes
/// per u64 key. The largest key (reserved, never a valid key) marks empty slots.
template <typename Key>
class hash_index {
public:
    static constexpr std::uint32_t npos = 0xFFFFFFFF;
    static constexpr Key empty = key_space_end<Key>;

    [[nodiscard]] std::size_t size() const noexcept { return size_; }

    [[nodiscard]] std::uint32_t find(Key k) const noexcept {
        if (capacity_ == 0) {
            return npos;
        }
        for (std::size_t i = slot_of(k);; i = next(i)) {
            if (keys_[i] == k) {
                return rows_[i];
            }
            if (keys_[i] == empty) {
                return npos;
            }
        }
    }

    /// Asks the processor to load the home slot of `k` (a later `find` of it).
    void prefetch(Key k) const noexcept {
        if (capacity_ != 0) {
            const std::size_t i = slot_of(k);
            __builtin_prefetch(&keys_[i]);
            __builtin_prefetch(&rows_[i]);
        }
    }

    /// Makes room for `more` keys beyond `size()`. @throws std::bad_alloc (as it was).
    void reserve_more(std::size_t more) {
        const std::size_t need = size_ + more;
        if (need * 5 <= capacity_ * 4) {
            return;
        }
        std::size_t cap = std::max<std::size_t>(capacity_, 16);
        while (need * 5 > cap * 4) {
            cap += cap / 2;
        }
        rehash(cap);
    }

    /// Adds `k` (not present) with row `row`; room was reserved.
    void insert(Key k, std::uint32_t row) noexcept {
        std::size_t i = slot_of(k);
        while (keys_[i] != empty) {
            i = next(i);
        }
        keys_[i] = k;
        rows_[i] = row;
        ++size_;
    }

    /// Calls `f(key, row)` for every key, in no particular order.
    template <typename F>
    void for_each(F&& f) const {
        for (std::size_t i = 0; i < capacity_; ++i) {
            if (keys_[i] != empty) {
                f(keys_[i], rows_[i]);
            }
        }
    }

    [[nodiscard]] std::size_t memory_bytes() const noexcept {
        return capacity_ * (sizeof(Key) + sizeof(std::uint32_t));
    }

private:
    /// The key's home slot: a Fibonacci hash scaled to the capacity (any capacity).
    [[nodiscard]] std::size_t slot_of(Key k) const noexcept {
        const std::uint64_t h = static_cast<std::uint64_t>(k) * 0x9E3779B97F4A7C15ULL;
        __extension__ using wide = unsigned __int128;
        return static_cast<std::size_t>((static_cast<wide>(h) * capacity_) >> 64);
    }
    [[nodiscard]] std::size_t next(std::size_t i) const noexcept {
        return i + 1 == capacity_ ? 0 : i + 1;
    }

    void rehash(std::size_t cap) {
        auto keys = std::make_unique_for_overwrite<Key[]>(cap);
        auto rows = std::make_unique_for_overwrite<std::uint32_t[]>(cap);
        std::fill_n(keys.get(), cap, empty);
        std::swap(keys, keys_);
        std::swap(rows, rows_);
        const std::size_t old = capacity_;
        capacity_ = cap;
        size_ = 0;
        for (std::size_t i = 0; i < old; ++i) {
            if (keys[i] != empty) {
                insert(keys[i], rows[i]);
            }
        }
    }

    std::unique_ptr<Key[]> keys_;
    std::unique_ptr<std::uint32_t[]> rows_;
    std::size_t capacity_ = 0;
    std::size_t size_ = 0;
};

} // namespace petrel::detail
