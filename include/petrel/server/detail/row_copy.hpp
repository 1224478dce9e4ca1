// Petrel: a table's rows, whole, as the pushes that copy them to another server.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <vector>

namespace petrel::detail {

/// The most payload bytes of one copy message.
inline constexpr std::uint64_t copy_message_bytes = std::uint64_t{4} << 20;

/// Makes the pushes that copy the rows of `all` (keys ascending, as `table_base::dump` gives
/// them) whose key `keep(key)` accepts, whole: each
/// row's values, then its optimizer state (a width of `width + state_width`), at most
/// `max_bytes` of keys and rows per message, keys ascending. Each goes to `emit(message)`:
/// a push of table `all.table_id` with `clock` (every clock below it is in its rows), from
/// no worker, its kind for the caller to set. Returns the rows copied.
/// @throws std::bad_alloc
template <typename Keep, typename Emit>
std::uint64_t copy_rows(const shard_table& all, std::uint64_t clock, Keep keep, Emit emit,
                        std::uint64_t max_bytes = copy_message_bytes) {
    const std::size_t ks = wire::size_of(all.key_type);
    const std::size_t vs = wire::size_of(all.value_type);
    const std::size_t width = all.width;
    const std::size_t state = all.state_width;
    const std::size_t row_bytes = ks + (width + state) * vs;
    const std::uint64_t per_message = std::max<std::uint64_t>(1, max_bytes / row_bytes);
    auto key_of = [&](std::uint64_t r) {
        std::uint64_t key = 0;
        std::memcpy(&key, all.keys.data() + r * ks, ks); // little-endian
        return key;
    };
    std::vector<std::uint64_t> kept;
    for (std::uint64_t r = 0; r < all.rows; ++r) {
        if (keep(key_of(r))) {
            kept.push_back(r);
        }
    }
    for (std::size_t from = 0; from < kept.size(); from += per_message) {
        const std::size_t n = std::min<std::size_t>(per_message, kept.size() - from);
        std::vector<std::byte> keys(n * ks);
        std::vector<std::byte> rows(n * (width + state) * vs);
        for (std::size_t j = 0; j < n; ++j) {
            const std::uint64_t r = kept[from + j];
            std::memcpy(keys.data() + j * ks, all.keys.data() + r * ks, ks);
            auto* row = rows.data() + j * (width + state) * vs;
            std::memcpy(row, all.values.data() + r * width * vs, width * vs);
            if (state > 0) {
                std::memcpy(row + width * vs, all.state.data() + r * state * vs, state * vs);
            }
        }
        wire::message m;
        m.header.kind = wire::message_kind::push;
        m.header.flags = 0;
        m.header.table_id = all.table_id;
        m.header.key_type = all.key_type;
        m.header.value_type = all.value_type;
        m.header.width = static_cast<std::uint32_t>(width + state);
        m.header.key_count = n;
        m.header.range_begin = key_of(kept[from]); // keys ascend
        m.header.range_end = key_of(kept[from + n - 1]) + 1;
        m.header.worker = wire::no_worker;
        m.header.clock = clock;
        m.set_segment(wire::keys_segment, shared_bytes::copy_of(keys));
        m.set_segment(wire::values_segment, shared_bytes::copy_of(rows));
        emit(std::move(m));
    }
    return kept.size();
}

/// The rows that copy message `m` (made by `copy_rows`) carries, for a table of `width`
/// values and `state_width` optimizer state values per row. `errc::invalid_argument` for a
/// message whose keys are runs or whose sizes do not match its header, `errc::width_mismatch`
/// for rows of another width. @throws std::bad_alloc
inline std::error_code rows_of_copy(const wire::message& m, std::uint32_t width,
                                    std::uint32_t state_width, shard_table& rows) {
    const auto& h = m.header;
    if ((h.flags & wire::flag_key_runs) != 0) {
        return errc::invalid_argument;
    }
    if (h.width != std::uint64_t{width} + state_width) {
        return errc::width_mismatch;
    }
    const std::size_t ks = wire::size_of(h.key_type);
    const std::size_t vs = wire::size_of(h.value_type);
    const std::size_t stride = std::size_t{h.width} * vs;
    const auto keys = m.keys().span();
    const auto values = m.values().span();
    if (keys.size() != h.key_count * ks || values.size() != h.key_count * stride) {
        return errc::invalid_argument;
    }
    rows = {};
    rows.table_id = h.table_id;
    rows.key_type = h.key_type;
    rows.value_type = h.value_type;
    rows.width = width;
    rows.state_width = state_width;
    rows.rows = h.key_count;
    rows.keys.assign(keys.begin(), keys.end());
    rows.values.resize(h.key_count * width * vs);
    rows.state.resize(h.key_count * state_width * vs);
    for (std::uint64_t r = 0; r < h.key_count; ++r) {
        const auto* row = values.data() + r * stride;
        std::memcpy(rows.values.data() + r * width * vs, row, width * vs);
        if (state_width > 0) {
            std::memcpy(rows.state.data() + r * state_width * vs, row + width * vs,
                        state_width * vs);
        }
    }
    return {};
}

} // namespace petrel::detail
