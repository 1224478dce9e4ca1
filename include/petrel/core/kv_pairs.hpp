// Petrel: sorted keys with their values.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/clock_entry.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>

#include <xtensor/xadapt.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <system_error>
#include <vector>

namespace petrel {

/// Sorted, unique keys and one row of `width` values per key, as xtensor views.
///
/// This is what a pull returns. The keys and values live in shared buffers (for a
/// pull, the buffer the reply was received into), so copies of a `kv_pairs` are cheap
/// and `keys()` / `values()` adapt the bytes without copying them.
///
/// `values()` has shape `[n]` for scalar values and `[n, width]` for rows.
///
/// @par Example
/// @code
/// auto kv = petrel::kv_pairs<std::uint64_t, float>::copy_of(keys, values, 1);
/// float sum = xt::sum(kv.values())();
/// @endcode
///
/// @par Thread Safety
/// Immutable: any number of threads may read one object and its copies.
template <key Key, typename Value>
class kv_pairs {
public:
    using key_type = Key;
    using value_type = Value;

    kv_pairs() = default;

    /// Adopts buffers as they are. Preconditions (checked by the wire decoder for
    /// received data): `keys` holds sorted unique keys, `values` holds `width` values per
    /// key, both aligned for their types. `rows` selects the shape `[n, width]` even when
    /// `width == 1`.
    kv_pairs(shared_bytes keys, shared_bytes values, std::size_t width, bool rows = false)
        : keys_(std::move(keys)), values_(std::move(values)), width_(width),
          rows_(rows || width != 1) {}

    /// Copies `keys` and `values` (`width` values per key) into new buffers.
    /// @throws std::system_error with `errc::keys_not_sorted`, `errc::key_out_of_range`
    /// (the reserved key `key_space_end<Key>`) or `errc::value_count_mismatch` when the
    /// input breaks the invariants.
    [[nodiscard]] static kv_pairs copy_of(std::span<const Key> keys, std::span<const Value> values,
                                          std::size_t width = 1) {
        if (std::adjacent_find(keys.begin(), keys.end(), std::greater_equal<Key>{}) != keys.end()) {
            throw std::system_error(make_error_code(errc::keys_not_sorted));
        }
        if (!keys.empty() && keys.back() == key_space_end<Key>) {
            throw std::system_error(make_error_code(errc::key_out_of_range));
        }
        if (width == 0 || values.size() != keys.size() * width) {
            throw std::system_error(make_error_code(errc::value_count_mismatch));
        }
        return kv_pairs(shared_bytes::copy_of(std::as_bytes(keys)),
                        shared_bytes::copy_of(std::as_bytes(values)), width);
    }

    [[nodiscard]] std::size_t size() const noexcept { return keys_.size() / sizeof(Key); }
    [[nodiscard]] bool empty() const noexcept { return size() == 0; }
    [[nodiscard]] std::size_t width() const noexcept { return width_; }

    [[nodiscard]] std::span<const Key> key_span() const noexcept { return keys_.as<Key>(); }
    [[nodiscard]] std::span<const Value> value_span() const noexcept { return values_.as<Value>(); }

    /// The keys as a 1-D xtensor adaptor (no copy).
    [[nodiscard]] auto keys() const {
        const Key* p = key_span().data();
        return xt::adapt(std::move(p), size(), xt::no_ownership(),
                         std::array<std::size_t, 1>{size()});
    }

    /// The values as an xtensor adaptor of shape `[n]` or `[n, width]` (no copy).
    [[nodiscard]] auto values() const {
        const Value* p = value_span().data();
        std::vector<std::size_t> shape{size()};
        if (rows_) {
            shape.push_back(width_);
        }
        return xt::adapt(std::move(p), size() * width_, xt::no_ownership(), std::move(shape));
    }

    /// The values of the `i`-th key.
    [[nodiscard]] std::span<const Value> row(std::size_t i) const noexcept {
        return value_span().subspan(i * width_, width_);
    }

    /// The index of `k`, or `size()` when absent (binary search).
    [[nodiscard]] std::size_t find(Key k) const noexcept {
        const auto ks = key_span();
        const auto it = std::lower_bound(ks.begin(), ks.end(), k);
        return (it != ks.end() && *it == k) ? static_cast<std::size_t>(it - ks.begin()) : ks.size();
    }

    /// How fresh the values are: the clocks the servers reported for the pulled keys
    /// (per worker and key range, from every server involved; empty when unknown).
    [[nodiscard]] std::span<const clock_entry> clocks() const noexcept { return clocks_; }

    /// The clocks every live worker had completed on all the pulled keys when the
    /// servers answered: the values include every push those workers made at lower
    /// clocks (under `sequential` and `bounded_delay`). `departed_clock` when no clocks
    /// were reported or no worker is live.
    [[nodiscard]] std::uint64_t min_clock() const noexcept {
        std::uint64_t m = departed_clock;
        for (const auto& c : clocks_) {
            m = std::min(m, c.clock);
        }
        return m;
    }

    /// Attaches the clocks a pull's replies carried.
    void set_clocks(std::vector<clock_entry> clocks) noexcept { clocks_ = std::move(clocks); }

    /// The underlying buffers, for sending them on without a copy.
    [[nodiscard]] const shared_bytes& key_bytes() const noexcept { return keys_; }
    [[nodiscard]] const shared_bytes& value_bytes() const noexcept { return values_; }

private:
    shared_bytes keys_;
    shared_bytes values_;
    std::size_t width_ = 1;
    bool rows_ = false;
    std::vector<clock_entry> clocks_;
};

} // namespace petrel
