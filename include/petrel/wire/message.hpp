// Petrel: a message, its header and payload segments.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/wire/header.hpp>

#include <array>
#include <cstddef>

namespace petrel::wire {

/// A header plus its payload segments (keys, values, per-key lengths), each a
/// `shared_bytes` that the message shares rather than copies.
///
/// Segments are written to the socket as they are (scatter-gather) and read into one
/// pooled buffer on the receiving side; `header.segment_bytes` always equals the
/// segments' sizes once `set_segment` was used to fill them.
///
/// @par Thread Safety
/// A value type; copies share the payload bytes, which are never modified.
struct message {
    message_header header;
    std::array<shared_bytes, segment_count> segments;
    /// On a received message: its payload bytes as they arrived (padded, before
    /// decompression). 0 on a message built to send.
    std::uint64_t received_bytes = 0;
    /// On a received message: the values segment's bytes as they arrived.
    std::uint64_t received_values_bytes = 0;
    /// On a received message: the bytes of its envelope and header body as they arrived.
    std::uint64_t received_head_bytes = 0;

    /// Sets segment `s` and records its size in the header.
    void set_segment(segment s, shared_bytes bytes) {
        header.segment_bytes[s] = bytes.size();
        segments[s] = std::move(bytes);
    }

    [[nodiscard]] const shared_bytes& keys() const noexcept { return segments[keys_segment]; }
    [[nodiscard]] const shared_bytes& values() const noexcept { return segments[values_segment]; }
    [[nodiscard]] const shared_bytes& lengths() const noexcept { return segments[lengths_segment]; }

    /// Payload bytes without framing.
    [[nodiscard]] std::size_t payload_size() const noexcept {
        std::size_t n = 0;
        for (const auto& s : segments) {
            n += s.size();
        }
        return n;
    }
};

/// A reply to `request` of kind `kind`: same request id, table, types, width and range,
/// sender and receiver swapped, no payload yet.
[[nodiscard]] inline message make_reply(const message_header& request, message_kind kind) {
    message r;
    r.header.kind = kind;
    r.header.sender = request.receiver;
    r.header.receiver = request.sender;
    r.header.request_id = request.request_id;
    r.header.table_id = request.table_id;
    r.header.key_type = request.key_type;
    r.header.value_type = request.value_type;
    r.header.width = request.width;
    r.header.range_begin = request.range_begin;
    r.header.range_end = request.range_end;
    r.header.key_count = request.key_count;
    return r;
}

} // namespace petrel::wire
