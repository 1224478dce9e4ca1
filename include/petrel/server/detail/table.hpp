// Petrel: a server's storage of one table (dense or sparse rows, optimizer state).
#pragma once

#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/detail/clock_sums.hpp>
#include <petrel/server/detail/hash_index.hpp>
#include <petrel/server/detail/key_seq.hpp>
#include <petrel/server/detail/row_store.hpp>
#include <petrel/server/detail/stripe_locks.hpp>
#include <petrel/server/detail/table_base.hpp>
#include <petrel/server/initializer.hpp>
#include <petrel/server/updater.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace petrel::detail {

/// A table's rows: `width` values and the update rule's state per key.
///
/// Sparse (the default): keys are inserted on first push and found through a
/// `hash_index`. Dense (a key range declared up front): keys are found by arithmetic,
/// and rows are created a page of 64 consecutive keys at a time, each page contiguous
/// in memory; keys outside the range are refused with `errc::key_out_of_range`.
///
/// A key never pushed reads as the initializer's values.
template <typename Key, typename Value>
class table final : public table_base {
public:
    /// Keys per page of a dense table.
    static constexpr std::size_t page_keys = 64;

    /// A sparse table of `width` values per key, summing pushes, starting from zeros.
    explicit table(std::uint32_t width)
        : table(width, make_updater<Value>(petrel::sum{}), initializer::zeros(), std::nullopt) {}

    /// A table with update rule `u` and initial values `init`; dense over `dense` when
    /// given (within the keys `Key` can hold). @throws std::invalid_argument on an empty
    /// or too large dense range.
    table(std::uint32_t width, std::shared_ptr<const any_updater<Value>> u, initializer init,
          std::optional<key_range<std::uint64_t>> dense)
        : table_base(wire::scalar_type_of<Key>, wire::scalar_type_of<Value>, width), width_(width),
          state_width_(u->state_size(width)), updater_(std::move(u)), init_(init),
          rows_(width + state_width_), dense_(dense) {
        if (dense_) {
            if (dense_->empty() || dense_->end > key_space_end<Key>) {
                throw std::invalid_argument("petrel: a dense table needs a non-empty key range "
                                            "within its key type");
            }
            pages_.assign((dense_->size() + page_keys - 1) / page_keys, npos);
            stripe_shift_ = shift_for(pages_.size() - 1);
        }
    }

    [[nodiscard]] bool dense() const noexcept { return dense_.has_value(); }
    [[nodiscard]] std::optional<key_range<std::uint64_t>> dense_range() const noexcept {
        return dense_;
    }
    [[nodiscard]] std::size_t state_width() const noexcept { return state_width_; }
    [[nodiscard]] const any_updater<Value>& update_rule() const noexcept { return *updater_; }
    [[nodiscard]] const initializer& init() const noexcept { return init_; }

    std::error_code check_keys(const wire::message& m) const override {
        if (!dense_ || m.header.key_count == 0) {
            return {};
        }
        // Keys are sorted (or runs ascending): the header's range bounds them all.
        const auto keys = key_seq<Key>::of(m);
        const std::uint64_t lo = keys.data.front();
        const std::uint64_t hi =
            keys.runs ? std::uint64_t{keys.data.back()} : std::uint64_t{keys.data.back()} + 1;
        return dense_->contains(lo) && hi <= dense_->end ? std::error_code{}
                                                         : errc::key_out_of_range;
    }

    void reserve(const wire::message& m) override {
        const auto keys = key_seq<Key>::of(m);
        found_.clear();
        found_keys_ = nullptr;
        if (dense_) {
            reserve_pages(keys);
        } else {
            reserve_keys(keys);
            found_keys_ = keys.data.data();
        }
    }

    void apply(const wire::message& m) noexcept override {
        const Value* values = m.values().as<Value>().data();
        const auto keys = key_seq<Key>::of(m);
        // The rows `reserve` just found for these keys (a sparse keyed push), so that the
        // keys are not looked up twice.
        if (!dense_ && !keys.runs && found_keys_ == keys.data.data() &&
            found_.size() == keys.data.size()) {
            for (std::size_t i = 0; i < found_.size(); ++i) {
                update_rows(values + i * width_, found_[i], 1);
            }
        } else {
            for_each_block(keys, [&](std::size_t i, Key, std::uint32_t r, std::size_t n) {
                update_rows(values + i * width_, r, n);
            });
        }
        found_.clear();
        found_keys_ = nullptr;
    }

    using table_base::apply_shared;
    using table_base::apply_split;

    std::error_code apply_shared(const wire::message& m, std::size_t& created) noexcept override {
        created = 0;
        const Value* values = m.values().as<Value>().data();
        const auto keys = key_seq<Key>::of(m);
        try {
            std::shared_lock lock(locks_->rows());
            if (!dense_ && !keys.runs) {
                // A keyed push of a sparse table (the common case): each key's row once;
                // the rows of a few keys on the stack.
                std::array<std::uint32_t, 16> few{};
                std::vector<std::uint32_t> many;
                const std::size_t n = keys.data.size();
                if (n > few.size()) {
                    many.resize(n);
                }
                const std::span<std::uint32_t> rows(n > few.size() ? many.data() : few.data(), n);
                if (!rows_of_keys(keys.data, rows)) {
                    lock.unlock();
                    created = create_rows(keys);
                    lock.lock();
                    rows_of_keys(keys.data, rows);
                }
                by_stripe(keys.data,
                          [&](std::size_t i) { update_rows(values + i * width_, rows[i], 1); });
                return {};
            }
            std::vector<block> blocks;
            if (!blocks_of(keys, blocks)) {
                lock.unlock();
                created = create_rows(keys);
                lock.lock();
                blocks.clear();
                blocks_of(keys, blocks);
            }
            by_stripe(blocks,
                      [&](const block& b) { update_rows(values + b.at * width_, b.row, b.rows); });
            return {};
        } catch (const std::bad_alloc&) {
            return errc::out_of_memory;
        }
    }

    bool holds_all(const wire::message& m) const override {
        const auto keys = key_seq<Key>::of(m);
        std::shared_lock lock(locks_->rows());
        if (!dense_ && !keys.runs) {
            std::vector<std::uint32_t> rows(keys.data.size());
            return rows_of_keys(keys.data, rows);
        }
        std::vector<block> blocks;
        return blocks_of(keys, blocks);
    }

    void read_shared(const wire::message& m, std::byte* out) const override {
        std::shared_lock lock(locks_->rows());
        read_locked(m, out);
    }

    std::error_code apply_split(std::span<const request_part> parts, const part_runner& run,
                                std::size_t& created) noexcept override {
        created = 0;
        try {
            std::vector<split_rows> found(parts.size());
            std::shared_lock lock(locks_->rows());
            auto missing = find_split(parts, found, run);
            if (missing == split_found::missing) {
                lock.unlock();
                for (const auto& p : parts) {
                    created += create_rows(key_seq<Key>::of(p.message));
                }
                lock.lock();
                missing = find_split(parts, found, run); // rows stay while shared
            }
            if (missing != split_found::all) {
                return errc::out_of_memory; // nothing applied
            }
            run(parts.size(), [&](std::size_t i) {
                const Value* values = parts[i].message.values().template as<Value>().data();
                const auto keys = key_seq<Key>::of(parts[i].message);
                if (!dense_ && !keys.runs) {
                    by_stripe(keys.data, [&](std::size_t k) {
                        update_rows(values + k * width_, found[i].rows[k], 1);
                    });
                } else {
                    by_stripe(found[i].blocks, [&](const block& b) {
                        update_rows(values + b.at * width_, b.row, b.rows);
                    });
                }
            });
            return {};
        } catch (const std::bad_alloc&) {
            return errc::out_of_memory;
        }
    }

    void read_split(std::span<const request_part> parts, std::byte* out,
                    const part_runner& run) const override {
        std::shared_lock lock(locks_->rows());
        std::atomic<bool> failed{false};
        run(parts.size(), [&](std::size_t i) {
            try {
                read_locked(parts[i].message,
                            out + parts[i].first * std::size_t{width_} * sizeof(Value));
            } catch (const std::bad_alloc&) {
                failed = true;
            }
        });
        if (failed) {
            throw std::bad_alloc();
        }
    }

    void apply_clock(std::span<const wire::message* const> pushes, bool mean) noexcept override {
        if (pushes.empty()) {
            return;
        }
        if (pushes.size() == 1 || (updater_->is_sum() && !mean)) {
            // One push has one row per key; sums are added in order as they are.
            for (const auto* m : pushes) {
                apply(*m);
            }
            return;
        }
        try {
            aggregate(pushes, mean);
        } catch (const std::bad_alloc&) {
            for (const auto* m : pushes) {
                apply(*m);
            }
        }
    }

    [[nodiscard]] wire::message
    rows_of(std::span<const wire::message* const> pushes) const override {
        std::vector<Key> keys;
        for (const auto* m : pushes) {
            key_seq<Key>::of(*m).for_each([&](std::size_t, Key k) { keys.push_back(k); });
        }
        if (pushes.size() > 1) {
            std::sort(keys.begin(), keys.end());
            keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        }
        const std::size_t stride = width_ + state_width_;
        std::vector<Value> rows(keys.size() * stride);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            std::memcpy(rows.data() + i * stride, rows_.row(find(keys[i])), stride * sizeof(Value));
        }
        wire::message out;
        out.header = pushes.front()->header;
        out.header.kind = wire::message_kind::row_transfer;
        out.header.flags = wire::flag_ordered; // the rows of one clock
        out.header.width = static_cast<std::uint32_t>(stride);
        out.header.key_count = keys.size();
        out.header.range_begin = keys.empty() ? 0 : std::uint64_t{keys.front()};
        out.header.range_end = keys.empty() ? 0 : std::uint64_t{keys.back()} + 1;
        out.set_segment(wire::keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
        out.set_segment(wire::values_segment,
                        shared_bytes::copy_of(std::as_bytes(std::span(rows))));
        return out;
    }

    void read(const wire::message& m, std::byte* out) const override {
        Value* dst = reinterpret_cast<Value*>(out);
        for_each_block(key_seq<Key>::of(m),
                       [&](std::size_t i, Key k, std::uint32_t r, std::size_t n) {
                           read_rows(dst + i * width_, k, r, n);
                       });
    }

    [[nodiscard]] std::size_t size() const noexcept override {
        return dense_ ? rows_.rows() : index_.size();
    }

    [[nodiscard]] std::size_t memory_bytes() const noexcept override {
        return index_.memory_bytes() + pages_.capacity() * sizeof(std::uint32_t) +
               rows_.memory_bytes() + sums_.memory_bytes();
    }

    /// Calls `f(key, row)` for each stored key in `r`, in increasing key order; `row` is a
    /// `std::span<const Value>` of `width` values. Sparse: O(size() + m log m) time and
    /// O(m) memory for the m keys in `r`; dense: O(pages in r). `f` must not add rows.
    template <typename F>
    void for_each_in(key_range<Key> r, F&& f) const {
        if (dense_) {
            const std::uint64_t lo = std::max<std::uint64_t>(r.begin, dense_->begin);
            const std::uint64_t hi = std::min<std::uint64_t>(r.end, dense_->end);
            for (std::uint64_t k = lo; k < hi; ++k) {
                const std::uint32_t p = pages_[(k - dense_->begin) / page_keys];
                if (p == npos) {
                    k = dense_->begin + ((k - dense_->begin) / page_keys + 1) * page_keys - 1;
                    continue;
                }
                f(static_cast<Key>(k),
                  std::span<const Value>(rows_.row(p + (k - dense_->begin) % page_keys), width_));
            }
            return;
        }
        std::vector<std::pair<Key, std::uint32_t>> found;
        index_.for_each([&](Key k, std::uint32_t at) {
            if (r.contains(k)) {
                found.emplace_back(k, at);
            }
        });
        std::sort(found.begin(), found.end());
        for (const auto& [k, at] : found) {
            f(k, std::span<const Value>(rows_.row(at), width_));
        }
    }

    /// As above, with rows `f` may modify (`std::span<Value>`).
    template <typename F>
    void for_each_in(key_range<Key> r, F&& f) {
        std::as_const(*this).for_each_in(r, [&f](Key k, std::span<const Value> row) {
            f(k, std::span<Value>(const_cast<Value*>(row.data()), row.size()));
        });
    }

    [[nodiscard]] std::string_view updater_name() const noexcept override {
        return updater_->name();
    }
    [[nodiscard]] std::uint32_t state_values() const noexcept override {
        return static_cast<std::uint32_t>(state_width_);
    }
    [[nodiscard]] std::optional<key_range<std::uint64_t>> dense_keys() const noexcept override {
        return dense_;
    }

    [[nodiscard]] std::shared_mutex& rows_mutex() const noexcept override { return locks_->rows(); }

    [[nodiscard]] shard_table dump(std::uint32_t table_id) const override {
        shard_table t;
        t.table_id = table_id;
        t.key_type = wire::scalar_type_of<Key>;
        t.value_type = wire::scalar_type_of<Value>;
        t.width = static_cast<std::uint32_t>(width_);
        t.state_width = static_cast<std::uint32_t>(state_width_);
        t.updater = std::string(updater_->name());
        std::vector<Key> keys;
        std::vector<Value> values;
        std::vector<Value> state;
        keys.reserve(size());
        values.reserve(size() * width_);
        state.reserve(size() * state_width_);
        for_each_in(key_range<Key>{0, key_space_end<Key>}, [&](Key k, std::span<const Value> row) {
            keys.push_back(k);
            values.insert(values.end(), row.begin(), row.end());
            state.insert(state.end(), row.data() + width_, row.data() + width_ + state_width_);
        });
        t.rows = keys.size();
        auto bytes = [](const auto& v) {
            const auto b = std::as_bytes(std::span(v));
            return std::vector<std::byte>(b.begin(), b.end());
        };
        t.keys = bytes(keys);
        t.values = bytes(values);
        t.state = bytes(state);
        return t;
    }

    void load(const shard_table& t, const std::function<bool(std::uint64_t)>& owns) override {
        const std::size_t n = static_cast<std::size_t>(t.rows);
        std::vector<Key> keys(n);
        std::memcpy(keys.data(), t.keys.data(), n * sizeof(Key));
        std::vector<std::size_t> picked;
        std::vector<Key> owned;
        for (std::size_t i = 0; i < n; ++i) {
            if (owns(keys[i])) {
                if (dense_ && !dense_->contains(keys[i])) {
                    throw std::out_of_range("key " + std::to_string(keys[i]) +
                                            " lies outside the dense table's range");
                }
                picked.push_back(i);
                owned.push_back(keys[i]);
            }
        }
        const key_seq<Key> seq{std::span<const Key>(owned), false};
        if (dense_) {
            reserve_pages(seq);
        } else {
            reserve_keys(seq);
        }
        const auto* values = reinterpret_cast<const Value*>(t.values.data());
        const auto* state = reinterpret_cast<const Value*>(t.state.data());
        for (std::size_t j = 0; j < picked.size(); ++j) {
            Value* row = rows_.row(find(owned[j]));
            std::memcpy(row, values + picked[j] * width_, width_ * sizeof(Value));
            if (state_width_ > 0) {
                std::memcpy(row + width_, state + picked[j] * state_width_,
                            state_width_ * sizeof(Value));
            }
        }
    }

private:
    static constexpr std::uint32_t npos = hash_index<Key>::npos;
    // How many keys ahead a walk over a request's keys prefetches their slots or rows.
    static constexpr std::size_t ahead = 8;

    /// Rows `row .. row + rows - 1`, of keys `key ..`: the `at`-th key of a request on.
    struct block {
        Key key;
        std::uint32_t row;
        std::uint32_t rows;
        std::size_t at;
    };

    /// A key's stripe: its place in the span of the keys stored (a dense table: of its
    /// pages), so that ascending keys go through the stripes in order, each once, and a
    /// page's keys share one (keys outside the span: the first or last stripe). The span
    /// changes only while rows are created, with `rows` held exclusively.
    [[nodiscard]] std::size_t stripe_of(Key k) const noexcept {
        if (dense_) {
            return static_cast<std::size_t>(((k - dense_->begin) / page_keys) >> stripe_shift_);
        }
        const std::uint64_t at = std::clamp<std::uint64_t>(k, low_key_, high_key_);
        return static_cast<std::size_t>((at - low_key_) >> stripe_shift_);
    }

    /// The shift that maps a span of `n` + 1 values onto at most 256 stripes.
    static unsigned shift_for(std::uint64_t n) noexcept {
        static_assert(stripe_locks::stripes == 256);
        const auto bits = static_cast<unsigned>(std::bit_width(n));
        return bits > 8 ? bits - 8 : 0;
    }

    /// `read_shared` with `rows` held. @throws std::bad_alloc
    void read_locked(const wire::message& m, std::byte* out) const {
        Value* dst = reinterpret_cast<Value*>(out);
        const auto keys = key_seq<Key>::of(m);
        if (!dense_ && !keys.runs) {
            by_stripe(keys.data, [&](std::size_t i) {
                if (i + ahead < keys.data.size()) {
                    index_.prefetch(keys.data[i + ahead]);
                }
                read_rows(dst + i * width_, keys.data[i], index_.find(keys.data[i]), 1);
            });
            return;
        }
        std::vector<block> blocks;
        for_each_block(keys, [&](std::size_t i, Key k, std::uint32_t r, std::size_t n) {
            if (r == npos) {
                read_rows(dst + i * width_, k, r, n); // initial values: no row to lock
            } else {
                blocks.push_back({k, r, static_cast<std::uint32_t>(n), i});
            }
        });
        by_stripe(blocks,
                  [&](const block& b) { read_rows(dst + b.at * width_, b.key, b.row, b.rows); });
    }

    /// What `apply_split` found of a part's keys: their rows (listed keys of a sparse
    /// table) or their blocks.
    struct split_rows {
        std::vector<std::uint32_t> rows;
        std::vector<block> blocks;
    };
    enum class split_found { all, missing, no_memory };

    /// Finds the rows of every part (`run` runs the parts), under `rows`.
    split_found find_split(std::span<const request_part> parts, std::vector<split_rows>& found,
                           const part_runner& run) const {
        std::atomic<bool> missing{false};
        std::atomic<bool> no_memory{false};
        run(parts.size(), [&](std::size_t i) {
            const auto keys = key_seq<Key>::of(parts[i].message);
            try {
                bool stored = true;
                if (!dense_ && !keys.runs) {
                    found[i].rows.resize(keys.data.size());
                    stored = rows_of_keys(keys.data, found[i].rows);
                } else {
                    found[i].blocks.clear();
                    stored = blocks_of(keys, found[i].blocks);
                }
                if (!stored) {
                    missing = true;
                }
            } catch (const std::bad_alloc&) {
                no_memory = true;
            }
        });
        return no_memory ? split_found::no_memory
               : missing ? split_found::missing
                         : split_found::all;
    }

    /// The blocks of `keys`, or false at the first key not stored. Under `rows`.
    bool blocks_of(const key_seq<Key>& keys, std::vector<block>& out) const {
        bool stored = true;
        out.reserve(keys.runs ? 16 : keys.data.size());
        for_each_block(keys, [&](std::size_t i, Key k, std::uint32_t r, std::size_t n) {
            stored = stored && r != npos;
            if (stored) {
                out.push_back({k, r, static_cast<std::uint32_t>(n), i});
            }
        });
        return stored;
    }

    /// The row of each key of `keys` (a sparse table), or false at the first key not
    /// stored. Under `rows`.
    bool rows_of_keys(std::span<const Key> keys, std::span<std::uint32_t> out) const noexcept {
        for (std::size_t i = 0; i < keys.size(); ++i) {
            if (i + ahead < keys.size()) {
                index_.prefetch(keys[i + ahead]);
            }
            out[i] = index_.find(keys[i]);
            if (out[i] == npos) {
                return false;
            }
        }
        return true;
    }

    /// Creates the rows of `keys` not stored yet, with `rows` held exclusively; returns
    /// how many it created.
    std::size_t create_rows(const key_seq<Key>& keys) {
        std::lock_guard lock(locks_->rows());
        const std::size_t before = size();
        if (dense_) {
            reserve_pages(keys);
        } else {
            reserve_keys(keys);
        }
        found_.clear();
        return size() - before;
    }

    /// Calls `f(i)` for the index of every key of `keys` (ascending, stored), a stripe at
    /// a time under its lock. Under `rows`.
    template <typename F>
    void by_stripe(std::span<const Key> keys, F&& f) const {
        locks_->walk(
            keys.size(), [&](std::size_t i) { return stripe_of(keys[i]); }, f);
    }

    /// Calls `f(b)` for every block (ascending keys), a stripe at a time under its lock.
    /// Under `rows`.
    template <typename F>
    void by_stripe(const std::vector<block>& blocks, F&& f) const {
        locks_->walk(
            blocks.size(), [&](std::size_t i) { return stripe_of(blocks[i].key); },
            [&](std::size_t i) { f(blocks[i]); });
    }

    /// Applies the pushed values `g` (`n` rows of `width` values) to rows `r .. r + n - 1`.
    void update_rows(const Value* g, std::uint32_t r, std::size_t n) noexcept {
        Value* row = rows_.row(r);
        if (updater_->is_sum() && state_width_ == 0) {
            // Rows of a block are contiguous: one loop over all their values.
            for (std::size_t j = 0; j < n * width_; ++j) {
                row[j] += g[j];
            }
            return;
        }
        const bool add = updater_->is_sum();
        const std::size_t stride = width_ + state_width_;
        for (std::size_t q = 0; q < n; ++q, row += stride, g += width_) {
            if (add) {
                for (std::size_t j = 0; j < width_; ++j) {
                    row[j] += g[j];
                }
            } else {
                update(row, g);
            }
        }
    }

    /// Writes the values of keys `k .. k + n - 1` (rows `r ..`, or none: `npos`) to `d`.
    void read_rows(Value* d, Key k, std::uint32_t r, std::size_t n) const noexcept {
        if (r == npos) {
            for (std::size_t q = 0; q < n; ++q) {
                for (std::size_t j = 0; j < width_; ++j) {
                    *d++ = static_cast<Value>(init_.value(k + q, j));
                }
            }
        } else if (state_width_ == 0) {
            std::memcpy(d, rows_.row(r), n * width_ * sizeof(Value));
        } else {
            const std::size_t stride = width_ + state_width_;
            const Value* row = rows_.row(r);
            for (std::size_t q = 0; q < n; ++q, row += stride, d += width_) {
                std::memcpy(d, row, width_ * sizeof(Value));
            }
        }
    }

    [[nodiscard]] std::uint32_t find(Key k) const noexcept {
        if (dense_) {
            if (!dense_->contains(k)) {
                return npos;
            }
            const std::uint64_t off = k - dense_->begin;
            const std::uint32_t p = pages_[off / page_keys];
            return p == npos ? npos : static_cast<std::uint32_t>(p + off % page_keys);
        }
        return index_.find(k);
    }

    void update(Value* row, const Value* g) const noexcept {
        updater_->update(std::span<Value>(row, width_),
                         std::span<Value>(row + width_, state_width_),
                         std::span<const Value>(g, width_));
    }

    void init_row(Value* row, Key k) const noexcept {
        for (std::size_t j = 0; j < width_; ++j) {
            row[j] = static_cast<Value>(init_.value(k, j));
        }
        updater_->init_state(std::span<Value>(row + width_, state_width_));
    }

    void check_room(std::size_t more) const {
        if (rows_.rows() + more >= npos) {
            throw std::bad_alloc(); // row numbers are 32 bits
        }
    }

    /// Creates the rows of the keys not stored yet, and records every key's row in
    /// `found_` (for a keyed push; runs are not recorded).
    void reserve_keys(const key_seq<Key>& keys) {
        // `found_` is about to describe `keys`: until `reserve` says which push they are,
        // it belongs to none (a held push must not find another request's rows).
        found_keys_ = nullptr;
        std::vector<Key> fresh;
        if (!keys.runs) {
            found_.resize(keys.data.size());
        }
        keys.for_each([&](std::size_t i, Key k) {
            const std::uint32_t r = index_.find(k);
            if (!keys.runs) {
                found_[i] = r;
            }
            if (r == npos) {
                fresh.push_back(k);
            }
        });
        if (fresh.empty()) {
            return;
        }
        check_room(fresh.size());
        rows_.reserve_more(fresh.size());
        index_.reserve_more(fresh.size());
        const auto [lo, hi] = std::minmax_element(fresh.begin(), fresh.end());
        const std::uint64_t low = index_.size() == 0 ? *lo : std::min<std::uint64_t>(low_key_, *lo);
        high_key_ = index_.size() == 0 ? *hi : std::max<std::uint64_t>(high_key_, *hi);
        low_key_ = low;
        stripe_shift_ = shift_for(high_key_ - low_key_);
        std::size_t next = 0;
        for (Key k : fresh) {
            const auto r = static_cast<std::uint32_t>(rows_.add());
            init_row(rows_.row(r), k);
            index_.insert(k, r);
            if (!keys.runs) {
                while (found_[next] != npos) {
                    ++next;
                }
                found_[next++] = r; // fresh keys come in the order of the push
            }
        }
    }

    /// Calls `f(i, key, row, n)` for consecutive keys `key .. key + n - 1` (the i-th key of
    /// `keys` onwards) whose rows `row .. row + n - 1` are contiguous, or `row == npos` for
    /// keys not stored: a dense table's key runs go a page at a time, everything else a
    /// key at a time.
    template <typename F>
    void for_each_block(const key_seq<Key>& keys, F&& f) const {
        if (!dense_ || !keys.runs) {
            keys.for_each([&](std::size_t i, Key k) { f(i, k, find(k), std::size_t{1}); });
            return;
        }
        std::size_t i = 0;
        for (std::size_t r = 0; r + 1 < keys.data.size(); r += 2) {
            for (std::uint64_t k = keys.data[r]; k < keys.data[r + 1];) {
                const std::uint64_t off = k - dense_->begin;
                const std::size_t n = static_cast<std::size_t>(
                    std::min<std::uint64_t>(keys.data[r + 1] - k, page_keys - off % page_keys));
                const std::uint32_t p = pages_[off / page_keys];
                f(i, static_cast<Key>(k),
                  p == npos ? npos : static_cast<std::uint32_t>(p + off % page_keys), n);
                i += n;
                k += n;
            }
        }
    }

    void reserve_pages(const key_seq<Key>& keys) {
        std::vector<std::size_t> fresh;
        std::size_t last = ~std::size_t{0};
        for_each_block(keys, [&](std::size_t, Key k, std::uint32_t, std::size_t) {
            const std::size_t p = (k - dense_->begin) / page_keys;
            if (p != last && pages_[p] == npos) {
                fresh.push_back(p);
            }
            last = p;
        });
        if (fresh.empty()) {
            return;
        }
        check_room(fresh.size() * page_keys);
        rows_.reserve_more(fresh.size() * page_keys);
        for (std::size_t p : fresh) {
            const auto first = static_cast<std::uint32_t>(rows_.rows());
            for (std::size_t i = 0; i < page_keys; ++i) {
                const std::uint64_t k = dense_->begin + p * page_keys + i;
                init_row(rows_.row(rows_.add()), k < dense_->end ? static_cast<Key>(k) : Key{});
            }
            pages_[p] = first;
        }
    }

    /// Sums the pushes per key (in push order), then updates each key once.
    void aggregate(std::span<const wire::message* const> pushes, bool mean) {
        try {
            for (const auto* m : pushes) {
                const auto values = m->values().template as<Value>();
                key_seq<Key>::of(*m).for_each(
                    [&](std::size_t i, Key k) { sums_.add(find(k), values.data() + i * width_); });
            }
        } catch (...) {
            sums_.clear();
            throw;
        }
        const bool add = updater_->is_sum();
        sums_.drain([&](std::uint32_t r, std::span<Value> s, std::uint32_t count) noexcept {
            if (mean && count > 1) {
                const Value scale = Value{1} / static_cast<Value>(count);
                for (Value& x : s) {
                    x *= scale;
                }
            }
            Value* row = rows_.row(r);
            if (add) {
                for (std::size_t j = 0; j < width_; ++j) {
                    row[j] += s[j];
                }
            } else {
                update(row, s.data());
            }
        });
    }

    std::size_t width_;
    std::size_t state_width_;
    std::shared_ptr<const any_updater<Value>> updater_;
    initializer init_;
    row_store<Value> rows_;
    std::optional<key_range<std::uint64_t>> dense_;
    hash_index<Key> index_;            // sparse
    std::vector<std::uint32_t> found_; // rows of the keys of the push `reserve` last saw
    const Key* found_keys_ = nullptr;  // ... and where its keys were
    std::vector<std::uint32_t> pages_; // dense: first row of each page, or npos
    clock_sums<Value> sums_{width_};   // scratch of apply_clock
    std::unique_ptr<stripe_locks> locks_ = std::make_unique<stripe_locks>();
    std::uint64_t low_key_ = 0;  // sparse: the smallest and largest key stored
    std::uint64_t high_key_ = 0; //
    unsigned stripe_shift_ = 0;  // see stripe_of
};

/// The sparse table of the first releases, by its old name.
template <typename Key, typename Value>
using sparse_table = table<Key, Value>;

} // namespace petrel::detail
