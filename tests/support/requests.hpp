// Test support: requests as a client builds them, for tests of the parts below kv_store.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <span>
#include <vector>

namespace petrel::test {

/// A push of one float per key: `keys` is a key list, or with `runs` pairs [begin, end) of
/// key runs; the range is the keys'.
template <typename Key>
wire::message push_request(const std::vector<Key>& keys, const std::vector<float>& values,
                           bool runs = false) {
    wire::message m;
    auto& h = m.header;
    h.kind = wire::message_kind::push;
    h.key_type = wire::scalar_type_of<Key>;
    h.value_type = wire::scalar_type::f32;
    h.width = 1;
    h.key_count = values.size();
    if (runs) {
        h.flags |= wire::flag_key_runs;
    }
    h.range_begin = keys.front();
    h.range_end = keys.back() + (runs ? 0U : 1U);
    m.set_segment(wire::keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(wire::values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

} // namespace petrel::test
