// Petrel: which keys of a request or a table a plan places on a server.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/server/checkpoint.hpp>
#include <petrel/server/replication_plan.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace petrel::detail {

/// Whether server `self` is the primary of every key of `m` under `plan` (always without a
/// plan). Key runs are walked a stripe (`replication_plan::stripe_keys`) at a time, at most
/// 8 stripes per partition in all: a run longer than that reaches every partition, so all
/// must be `self`'s. The work a request can cause is bounded.
[[nodiscard]] inline bool primary_of_keys(const replication_plan& plan, const wire::message& m,
                                          std::uint32_t self) {
    if (!plan.partition_of || plan.primaries.empty()) {
        return true;
    }
    auto mine = [&](std::uint64_t k) {
        const auto p = plan.partition_of(k);
        return primary_of_partition(plan, self, p);
    };
    const auto& h = m.header;
    const auto bytes = m.keys().span();
    const std::size_t ks = wire::size_of(h.key_type);
    const std::size_t n = bytes.size() / ks;
    auto key_at = [&](std::size_t i) {
        std::uint64_t k = 0;
        std::memcpy(&k, bytes.data() + i * ks, ks); // little-endian
        return k;
    };
    if ((h.flags & wire::flag_key_runs) == 0) {
        for (std::size_t i = 0; i < n; ++i) {
            if (!mine(key_at(i))) {
                return false;
            }
        }
        return true;
    }
    const std::uint64_t stripe = std::max<std::uint64_t>(plan.stripe_keys, 1);
    // So many stripes reach every partition (in one run or over all of them): all
    // must be this server's. Bounds the work a request can cause under the lock.
    std::uint64_t budget = 8 * plan.primaries.size();
    auto all = [&] {
        return std::all_of(plan.primaries.begin(), plan.primaries.end(),
                           [self](std::uint32_t p) { return p == self; });
    };
    for (std::size_t i = 0; i + 1 < n; i += 2) {
        const std::uint64_t b = key_at(i);
        const std::uint64_t e = key_at(i + 1);
        if (b >= e) {
            continue;
        }
        if ((e - 1) / stripe - b / stripe >= budget) {
            return all();
        }
        for (std::uint64_t k = b; k < e;) {
            if (budget-- == 0) {
                return all();
            }
            if (!mine(k)) {
                return false;
            }
            const std::uint64_t next = (k / stripe + 1) * stripe;
            if (next <= k) {
                break; // the top of the key space
            }
            k = next;
        }
    }
    return true;
}

/// Drops from `t` the rows whose key `keep(key)` refuses, keeping the others in order.
template <typename Keep>
void keep_rows_if(shard_table& t, Keep keep) {
    const std::size_t ks = wire::size_of(t.key_type);
    const std::size_t vs = wire::size_of(t.value_type);
    const std::size_t row = t.width * vs;
    const std::size_t state = t.state_width * vs;
    std::uint64_t kept = 0;
    for (std::uint64_t r = 0; r < t.rows; ++r) {
        std::uint64_t key = 0;
        std::memcpy(&key, t.keys.data() + r * ks, ks); // little-endian
        if (!keep(key)) {
            continue;
        }
        if (kept != r) {
            std::memmove(t.keys.data() + kept * ks, t.keys.data() + r * ks, ks);
            std::memmove(t.values.data() + kept * row, t.values.data() + r * row, row);
            if (state > 0) {
                std::memmove(t.state.data() + kept * state, t.state.data() + r * state, state);
            }
        }
        ++kept;
    }
    t.rows = kept;
    t.keys.resize(kept * ks);
    t.values.resize(kept * row);
    t.state.resize(kept * state);
}

/// Drops from `t` the rows whose primary under `plan` is not server `self` (a replica's rows:
/// their primary saves them, and a replica's copy may lag a clock behind); keeps every row
/// without a plan.
inline void keep_rows_of(const replication_plan& plan, std::uint32_t self, shard_table& t) {
    if (!plan.partition_of || plan.primaries.empty()) {
        return; // no replication plan: every row is this server's
    }
    keep_rows_if(t, [&](std::uint64_t key) {
        return primary_of_partition(plan, self, plan.partition_of(key));
    });
}

/// The keys of `m` for which `keep(key)` holds, with their rows (`h.width` values
/// each), as a key list (key runs are expanded). @throws std::bad_alloc
template <typename Keep>
[[nodiscard]] wire::message filtered(const wire::message& m, Keep keep) {
    const auto& h = m.header;
    const std::size_t ks = wire::size_of(h.key_type);
    const std::size_t row = std::size_t{h.width} * wire::size_of(h.value_type);
    const auto bytes = m.keys().span();
    const auto values = m.values().span();
    const bool has_values = !values.empty();
    std::vector<std::byte> keys;
    std::vector<std::byte> rows;
    std::uint64_t count = 0;
    std::uint64_t lo = ~std::uint64_t{0};
    std::uint64_t hi = 0;
    auto key_at = [&](std::size_t i) {
        std::uint64_t k = 0;
        std::memcpy(&k, bytes.data() + i * ks, ks); // little-endian
        return k;
    };
    std::size_t index = 0; // the key's position in the request: its row
    auto visit = [&](std::uint64_t k) {
        if (keep(k)) {
            const auto at = keys.size();
            keys.resize(at + ks);
            std::memcpy(keys.data() + at, &k, ks);
            if (has_values && (index + 1) * row <= values.size()) {
                rows.insert(rows.end(), values.begin() + static_cast<std::ptrdiff_t>(index * row),
                            values.begin() + static_cast<std::ptrdiff_t>((index + 1) * row));
            }
            ++count;
            lo = std::min(lo, k);
            hi = std::max(hi, k);
        }
        ++index;
    };
    const std::size_t n = bytes.size() / ks;
    if ((h.flags & wire::flag_key_runs) == 0) {
        for (std::size_t i = 0; i < n; ++i) {
            visit(key_at(i));
        }
    } else {
        for (std::size_t i = 0; i + 1 < n; i += 2) {
            for (std::uint64_t k = key_at(i); k < key_at(i + 1); ++k) {
                visit(k);
            }
        }
    }
    wire::message out;
    out.header = h;
    out.header.flags &= static_cast<std::uint8_t>(~wire::flag_key_runs);
    out.header.key_count = count;
    out.header.range_begin = count == 0 ? h.range_begin : lo;
    out.header.range_end = count == 0 ? h.range_begin : hi + 1;
    out.set_segment(wire::keys_segment, shared_bytes::copy_of(keys));
    if (has_values) {
        out.set_segment(wire::values_segment, shared_bytes::copy_of(rows));
    }
    return out;
}

} // namespace petrel::detail
