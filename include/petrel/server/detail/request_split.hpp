// Petrel: a large push or pull cut into parts of contiguous keys, each a message of its own.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace petrel::detail {

/// One part of a request: a message of its own that shares the request's values (and,
/// for listed keys, its keys), and the index of its first key in the request.
struct request_part {
    wire::message message;
    std::size_t first = 0;
};

/// How many parts `split_request` makes of a request of `keys` keys with `row_bytes` bytes
/// of values per key: as many as fit `least_bytes` each, at most `most` (at least 1).
[[nodiscard]] inline std::size_t part_count(std::uint64_t keys, std::size_t row_bytes,
                                            std::size_t most, std::size_t least_bytes) noexcept {
    if (most <= 1 || least_bytes == 0 || row_bytes == 0) {
        return 1;
    }
    const std::uint64_t fit = keys / std::max<std::uint64_t>(1, least_bytes / row_bytes);
    return static_cast<std::size_t>(std::clamp<std::uint64_t>(fit, 1, most));
}

namespace split {

/// The parts of `m`, whose keys (of type `Key`) are listed: even counts of keys.
template <typename Key>
std::vector<request_part> listed(const wire::message& m, std::size_t parts, std::size_t row_bytes) {
    const std::size_t n = m.keys().size() / sizeof(Key);
    parts = std::min(parts, std::max<std::size_t>(n, 1));
    std::vector<request_part> out;
    out.reserve(parts);
    for (std::size_t p = 0; p < parts; ++p) {
        const std::size_t begin = n * p / parts;
        const std::size_t end = n * (p + 1) / parts;
        request_part part{.message = m, .first = begin};
        part.message.header.key_count = end - begin;
        part.message.set_segment(
            wire::keys_segment, m.keys().subspan(begin * sizeof(Key), (end - begin) * sizeof(Key)));
        if (!m.values().empty()) {
            part.message.set_segment(
                wire::values_segment,
                m.values().subspan(begin * row_bytes, (end - begin) * row_bytes));
        }
        out.push_back(std::move(part));
    }
    return out;
}

/// The parts of `m`, whose keys are runs `[begin, end)` of type `Key`: even counts of keys,
/// a run cut in two where a part ends inside it (each part's runs in a buffer of its own).
template <typename Key>
std::vector<request_part> runs(const wire::message& m, std::size_t parts, std::size_t row_bytes) {
    const auto r = m.keys().as<Key>();
    std::uint64_t n = 0;
    for (std::size_t i = 0; i + 1 < r.size(); i += 2) {
        n += r[i + 1] - r[i];
    }
    parts = static_cast<std::size_t>(std::min<std::uint64_t>(parts, std::max<std::uint64_t>(n, 1)));
    std::vector<request_part> out;
    out.reserve(parts);
    std::size_t run = 0;
    Key at = r.empty() ? Key{} : r[0]; // the next key not in a part yet
    std::uint64_t first = 0;
    for (std::size_t p = 0; p < parts; ++p) {
        const std::uint64_t want = n * (p + 1) / parts - n * p / parts;
        std::vector<Key> mine;
        for (std::uint64_t got = 0; got < want && run + 1 < r.size();) {
            const std::uint64_t take = std::min<std::uint64_t>(want - got, r[run + 1] - at);
            if (take > 0) {
                mine.push_back(at);
                mine.push_back(static_cast<Key>(at + take));
            }
            got += take;
            at = static_cast<Key>(at + take);
            if (at == r[run + 1]) {
                run += 2;
                at = run < r.size() ? r[run] : Key{};
            }
        }
        request_part part{.message = m, .first = static_cast<std::size_t>(first)};
        part.message.header.key_count = want;
        part.message.set_segment(wire::keys_segment,
                                 shared_bytes::copy_of(std::as_bytes(std::span(mine))));
        if (!m.values().empty()) {
            part.message.set_segment(wire::values_segment,
                                     m.values().subspan(first * row_bytes, want * row_bytes));
        }
        first += want;
        out.push_back(std::move(part));
    }
    return out;
}

} // namespace split

/// The parts of push or pull `m` (validated; keys listed, or as runs with
/// `wire::flag_key_runs`; no per-key lengths): `parts` (see `part_count`) messages of
/// contiguous keys, even in number, whose values are the request's (a pull's parts have
/// none), so that each part's rows lie in other stripes of the table than the next one's.
/// The parts are cut by key, not by ring partition: the ring hashes its stripes of keys onto
/// partitions, so one partition's keys are not contiguous in a request. @throws
/// std::bad_alloc
[[nodiscard]] inline std::vector<request_part> split_request(const wire::message& m,
                                                             std::size_t parts) {
    const std::size_t row_bytes = std::size_t{m.header.width} * wire::size_of(m.header.value_type);
    const bool runs = (m.header.flags & wire::flag_key_runs) != 0;
    parts = std::max<std::size_t>(1, parts);
    if (m.header.key_type == wire::scalar_type::u32) {
        return runs ? split::runs<std::uint32_t>(m, parts, row_bytes)
                    : split::listed<std::uint32_t>(m, parts, row_bytes);
    }
    return runs ? split::runs<std::uint64_t>(m, parts, row_bytes)
                : split::listed<std::uint64_t>(m, parts, row_bytes);
}

} // namespace petrel::detail
