// Petrel: a table of rows by key, created on first push.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key_range.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace petrel::detail {

/// A table's storage, whatever its key and value types.
class table_base {
public:
    table_base(wire::scalar_type k, wire::scalar_type v, std::uint32_t width)
        : key_type_(k), value_type_(v), width_(width) {}
    virtual ~table_base() = default;

    /// Whether a request with this header may touch this table.
    [[nodiscard]] std::error_code check(const wire::message_header& h) const noexcept {
        if (h.key_type != key_type_) {
            return errc::key_type_mismatch;
        }
        if (h.value_type != value_type_) {
            return errc::value_type_mismatch;
        }
        if (h.width != width_) {
            return errc::width_mismatch;
        }
        return {};
    }

    /// Adds the pushed rows (the message passed `check` and wire validation): all or
    /// nothing, as `reserve` then `apply`.
    void add(const wire::message& m) {
        reserve(m);
        apply(m);
    }
    /// Creates zero rows for the pushed keys not stored yet, so that `apply` needs no
    /// memory. All or nothing: on failure (`std::bad_alloc`) the table is as it was.
    virtual void reserve(const wire::message& m) = 0;
    /// Adds the pushed rows, whose keys `reserve` has created; cannot fail.
    virtual void apply(const wire::message& m) noexcept = 0;
    /// Writes the rows of the pulled keys into `out` (zeros for keys never pushed).
    virtual void read(const wire::message& m, std::byte* out) const = 0;
    [[nodiscard]] virtual std::size_t size() const noexcept = 0;

private:
    wire::scalar_type key_type_;
    wire::scalar_type value_type_;
    std::uint32_t width_;
};

/// Rows of `width` values in one contiguous array, found through a hash index.
template <typename Key, typename Value>
class sparse_table final : public table_base {
public:
    explicit sparse_table(std::uint32_t width)
        : table_base(wire::scalar_type_of<Key>, wire::scalar_type_of<Value>, width), width_(width) {
    }

    /// The rows of new keys are created (the only step that allocates); if that fails,
    /// they are removed again and the exception propagates with the table as it was. A
    /// push of keys that all exist allocates nothing.
    void reserve(const wire::message& m) override {
        const auto keys = m.keys().as<Key>();
        if (const std::size_t fresh = count_new(keys); fresh > 0) {
            insert_rows(keys, fresh);
        }
    }

    void apply(const wire::message& m) noexcept override {
        const auto keys = m.keys().as<Key>();
        const auto values = m.values().as<Value>();
        for (std::size_t i = 0; i < keys.size(); ++i) {
            const Value* src = values.data() + i * width_;
            Value* dst = data_.data() + index_.find(keys[i])->second;
            for (std::size_t j = 0; j < width_; ++j) {
                dst[j] += src[j];
            }
        }
    }

    void read(const wire::message& m, std::byte* out) const override {
        const auto keys = m.keys().as<Key>();
        const std::size_t row_bytes = width_ * sizeof(Value);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            std::byte* dst = out + i * row_bytes;
            if (auto it = index_.find(keys[i]); it != index_.end()) {
                std::memcpy(dst, data_.data() + it->second, row_bytes);
            } else {
                std::memset(dst, 0, row_bytes);
            }
        }
    }

    [[nodiscard]] std::size_t size() const noexcept override { return index_.size(); }

    /// Calls `f(key, row)` for each stored key in `r`, in increasing key order; `row` is a
    /// `std::span<const Value>` of `width` values. Takes O(size() + m log m) time and O(m)
    /// memory for the m keys in `r`. `f` must not add rows to the table.
    template <typename F>
    void for_each_in(key_range<Key> r, F&& f) const {
        std::vector<std::pair<Key, std::size_t>> found;
        for (const auto& [k, at] : index_) {
            if (r.contains(k)) {
                found.emplace_back(k, at);
            }
        }
        std::sort(found.begin(), found.end());
        for (const auto& [k, at] : found) {
            f(k, std::span<const Value>(data_.data() + at, width_));
        }
    }

    /// As above, with rows `f` may modify (`std::span<Value>`).
    template <typename F>
    void for_each_in(key_range<Key> r, F&& f) {
        std::as_const(*this).for_each_in(r, [&f](Key k, std::span<const Value> row) {
            f(k, std::span<Value>(const_cast<Value*>(row.data()), row.size()));
        });
    }

private:
    [[nodiscard]] std::size_t count_new(std::span<const Key> keys) const {
        std::size_t fresh = 0;
        for (Key k : keys) {
            fresh += index_.contains(k) ? 0 : 1;
        }
        return fresh;
    }

    /// Adds zero rows for the `fresh` keys not stored yet, growing the storage once
    /// (geometrically); on failure removes what it added and rethrows.
    void insert_rows(std::span<const Key> keys, std::size_t fresh) {
        const std::size_t old_rows = data_.size();
        std::vector<Key> created;
        try {
            created.reserve(fresh);
            index_.reserve(index_.size() + fresh);
            const std::size_t need = data_.size() + fresh * width_;
            if (need > data_.capacity()) {
                data_.reserve(std::max(need, 2 * data_.capacity()));
            }
            for (Key k : keys) {
                if (index_.try_emplace(k, data_.size()).second) {
                    created.push_back(k);
                    data_.resize(data_.size() + width_, Value{});
                }
            }
        } catch (...) {
            for (Key k : created) {
                index_.erase(k);
            }
            data_.resize(old_rows);
            throw;
        }
    }

    std::size_t width_;
    std::unordered_map<Key, std::size_t> index_;
    std::vector<Value> data_;
};

/// A new empty table for the key and value types named in `h`.
[[nodiscard]] inline std::unique_ptr<table_base> make_table(const wire::message_header& h) {
    using wire::scalar_type;
    const bool k32 = h.key_type == scalar_type::u32;
    const bool v32 = h.value_type == scalar_type::f32;
    if (k32) {
        return v32 ? std::unique_ptr<table_base>(
                         std::make_unique<sparse_table<std::uint32_t, float>>(h.width))
                   : std::make_unique<sparse_table<std::uint32_t, double>>(h.width);
    }
    return v32 ? std::unique_ptr<table_base>(
                     std::make_unique<sparse_table<std::uint64_t, float>>(h.width))
               : std::make_unique<sparse_table<std::uint64_t, double>>(h.width);
}

} // namespace petrel::detail
