// Test support: requests of u64 keys and float rows, as a worker sends them to a table.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace petrel::test {

/// A request of `kind` for `keys` (u64; pairs [begin, end) with `runs`) with rows of
/// `width` floats given in `values` (none when empty); the header's range spans the keys.
inline wire::message rows_request(wire::message_kind kind, const std::vector<std::uint64_t>& keys,
                                  const std::vector<float>& values, std::uint32_t width = 1,
                                  bool runs = false) {
    wire::message m;
    m.header.kind = kind;
    m.header.key_type = wire::scalar_type::u64;
    m.header.value_type = wire::scalar_type::f32;
    m.header.width = width;
    m.header.key_count = keys.size();
    if (!keys.empty()) {
        m.header.range_begin = keys.front();
        m.header.range_end = keys.back() + 1;
    }
    if (runs) {
        m.header.flags |= wire::flag_key_runs;
    }
    m.set_segment(wire::keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    if (!values.empty()) {
        m.set_segment(wire::values_segment,
                      shared_bytes::copy_of(std::as_bytes(std::span(values))));
    }
    return m;
}

/// The keys of `m` (u64).
inline std::vector<std::uint64_t> message_keys(const wire::message& m) {
    const auto k = m.keys().as<std::uint64_t>();
    return {k.begin(), k.end()};
}

/// The values of `m` (floats).
inline std::vector<float> message_values(const wire::message& m) {
    const auto v = m.values().as<float>();
    return {v.begin(), v.end()};
}

} // namespace petrel::test
