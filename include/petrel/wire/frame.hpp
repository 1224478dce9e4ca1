// Petrel: frames on a byte stream: their layout, encoding and checks (`frame_decoder.hpp`
// cuts a stream into them).
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/wire/compression.hpp>
#include <petrel/wire/detail/header_codec.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/key_cache.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

namespace petrel::wire {

/// Limits a receiver enforces before it allocates anything for a frame.
struct wire_limits {
    /// Largest payload (all segments, padding included) accepted in one frame.
    std::uint64_t max_frame_bytes = std::uint64_t{1} << 30;
    /// Largest serialized header accepted.
    std::uint32_t max_header_bytes = 64 * 1024;
    /// Bytes of key lists a connection keeps for its peer (key caching); the least
    /// recently used lists go first beyond this.
    std::size_t max_key_cache_bytes = std::size_t{64} << 20;
};

/// A frame is `envelope | header body | segment 0 | pad | segment 1 | pad | segment 2 | pad`.
/// The envelope holds a magic number, the protocol version, the message kind and the
/// lengths of the header body and of the payload (`detail/header_codec.hpp`); the body
/// holds the header's fields that are away from their defaults. Each segment is padded
/// with zeros to a multiple of 8 bytes, so that every segment of a received payload is
/// aligned for its scalar type.
inline constexpr std::size_t segment_alignment = 8;

[[nodiscard]] constexpr std::uint64_t padded(std::uint64_t n) noexcept {
    return (n + segment_alignment - 1) & ~std::uint64_t{segment_alignment - 1};
}

/// Zero bytes for segment padding.
inline constexpr std::array<std::byte, segment_alignment> padding_bytes{};

/// What a frame's envelope says.
struct frame_envelope {
    /// The sender's protocol version (major << 8 | minor).
    std::uint16_t version = 0;
    message_kind kind = message_kind::push;
    std::uint32_t body_bytes = 0;
    std::uint64_t payload_bytes = 0;
    /// Bytes of the envelope itself; 0 while more bytes are needed to read it.
    std::size_t size = 0;
};

/// Payload bytes of a frame carrying `h`: its segments, each padded.
[[nodiscard]] inline std::uint64_t framed_payload_bytes(const message_header& h) noexcept {
    std::uint64_t n = 0;
    for (auto s : h.segment_bytes) {
        n += padded(s);
    }
    return n;
}

/// A frame whose payload is at least this large has its head (envelope and header body)
/// padded with zero bytes, at the end of the body, to a multiple of `payload_alignment`
/// bytes. The payload then follows the head at the same alignment as in the sender's
/// buffers, and the kernel copies it into the socket faster: a 64 MiB push+pull took
/// 105 ms with the padding against 132 ms without (medians of 11 alternating runs on two
/// cores, `petrel_bench --case petrel_push_pull_64MiB`). Smaller frames are not padded.
inline constexpr std::uint64_t aligned_payload_bytes = std::uint64_t{64} << 10;
inline constexpr std::size_t payload_alignment = 64;

/// How the head (envelope and header body) of a frame carrying a header is laid out:
/// worked out once, then used to size and to write it.
struct head_layout {
    std::uint64_t mask = 0;     ///< the fields present
    std::size_t body_bytes = 0; ///< the header body's bytes, padding included
    std::uint64_t payload = 0;  ///< the padded segments' bytes
    std::size_t head_bytes = 0; ///< envelope and body
    [[nodiscard]] std::uint64_t frame_bytes() const noexcept { return head_bytes + payload; }
};

[[nodiscard]] inline head_layout layout_of(const message_header& h) noexcept {
    head_layout l;
    const auto body = detail::plan_body(h);
    l.mask = body.mask;
    l.body_bytes = body.bytes;
    l.payload = framed_payload_bytes(h);
    auto head = [&l] {
        return detail::envelope_fixed_bytes + detail::varint_bytes(l.body_bytes) +
               detail::varint_bytes(l.payload) + l.body_bytes;
    };
    l.head_bytes = head();
    if (l.payload >= aligned_payload_bytes) {
        // A longer body may take a longer length: pad until the whole head is aligned.
        while (l.head_bytes % payload_alignment != 0) {
            l.body_bytes += payload_alignment - l.head_bytes % payload_alignment;
            l.head_bytes = head();
        }
    }
    return l;
}

/// Bytes of the envelope and header body of a frame carrying `h`, as the encoder writes
/// them.
[[nodiscard]] inline std::uint64_t head_bytes(const message_header& h) noexcept {
    return layout_of(h).head_bytes;
}

/// Bytes a frame carrying `h` takes on the wire: envelope, header body and padded
/// segments.
[[nodiscard]] inline std::uint64_t frame_bytes(const message_header& h) noexcept {
    return layout_of(h).frame_bytes();
}

/// "7.0": a protocol version as people read it.
[[nodiscard]] inline std::string version_text(std::uint16_t version) {
    return std::to_string(major_of(version)) + "." + std::to_string(minor_of(version));
}

/// Writes the envelope and header body of `m`, laid out as `layout` (`layout_of(m.header)`),
/// at `out`, which has room for `layout.head_bytes` bytes; returns that many. The segments
/// follow on the wire as they are, each padded.
inline std::size_t encode_head_into(const message& m, const head_layout& layout,
                                    std::byte* out) noexcept {
    detail::varint_writer w(out);
    w.byte(static_cast<std::uint8_t>(detail::envelope_magic & 0xFF));
    w.byte(static_cast<std::uint8_t>(detail::envelope_magic >> 8));
    w.byte(protocol_major);
    w.byte(protocol_minor);
    w.byte(static_cast<std::uint8_t>(m.header.kind));
    w.varint(layout.body_bytes);
    w.varint(layout.payload);
    detail::write_body(m.header, layout.mask, w);
    std::byte* const end = out + layout.head_bytes;
    std::fill(w.position(), end, std::byte{0}); // padding, if any
    return layout.head_bytes;
}

/// Writes the envelope and header body of `m` at `out`, which has room for
/// `head_bytes(m.header)` bytes; returns that many.
inline std::size_t encode_head_into(const message& m, std::byte* out) noexcept {
    return encode_head_into(m, layout_of(m.header), out);
}

/// Writes the envelope and header body of `m` into `out` (replacing its contents). The
/// segments follow on the wire as they are, each padded.
inline void encode_head(const message& m, std::vector<std::byte>& out) {
    const auto layout = layout_of(m.header);
    out.resize(layout.head_bytes);
    encode_head_into(m, layout, out.data());
}

/// Reads an envelope from the start of `bytes` and checks it against the limits: magic
/// first, then the major version, the kind and the lengths. Leaves `out.size` 0 when
/// `bytes` ends before the envelope does. `out.version` holds the peer's version from
/// the version check on, also when it is refused.
[[nodiscard]] inline std::error_code
parse_envelope(std::span<const std::byte> bytes, const wire_limits& limits, frame_envelope& out) {
    out.size = 0;
    detail::varint_reader r(bytes);
    std::uint8_t b0 = 0;
    std::uint8_t b1 = 0;
    if (!r.byte(b0)) {
        return {};
    }
    if (b0 == 0x16) {
        // A TLS handshake record where a frame belongs: the peer uses TLS, this node does
        // not (transport_options::tls).
        return errc::tls_failed;
    }
    if (b0 != (detail::envelope_magic & 0xFF)) {
        return errc::bad_magic;
    }
    if (!r.byte(b1)) {
        return {};
    }
    if (b1 != (detail::envelope_magic >> 8)) {
        return errc::bad_magic;
    }
    std::uint8_t major = 0;
    std::uint8_t minor = 0;
    if (!r.byte(major) || !r.byte(minor)) {
        return {};
    }
    out.version = static_cast<std::uint16_t>(major << 8 | minor);
    if (major == 'R' && minor == 'L') {
        // "PTRL": the hello of a connection handshake (transport/detail/handshake.hpp)
        // where a frame belongs: the peer authenticates its connections, this node has no
        // secret.
        return errc::auth_failed;
    }
    if (major != protocol_major) {
        return errc::unsupported_version;
    }
    std::uint8_t kind = 0;
    if (!r.byte(kind)) {
        return {};
    }
    out.kind = static_cast<message_kind>(kind);
    if (!is_known(out.kind)) {
        return errc::bad_message_kind;
    }
    std::uint64_t body = 0;
    std::uint64_t payload = 0;
    if (!r.varint(body) || !r.varint(payload)) {
        // Out of bytes, or a number longer than 10 bytes.
        return r.remaining() == 0 && bytes.size() < detail::max_envelope_bytes
                   ? std::error_code{}
                   : errc::malformed_header;
    }
    if (body > limits.max_header_bytes) {
        return errc::header_too_large;
    }
    if (body == 0) {
        return errc::malformed_header; // a body has at least its presence mask
    }
    if (payload > limits.max_frame_bytes) {
        return errc::frame_too_large;
    }
    out.body_bytes = static_cast<std::uint32_t>(body);
    out.payload_bytes = payload;
    out.size = r.position();
    return {};
}

/// Reads the header body `body` of a frame whose envelope is `envelope` into `out`:
/// its fields (those of a newer minor version skipped, those its kind may not carry
/// refused), and never more than `max_clock_entries` clock entries, whatever the bytes
/// say.
[[nodiscard]] inline std::error_code
decode_body(std::span<const std::byte> body, const frame_envelope& envelope, message_header& out) {
    out = message_header{};
    out.version = envelope.version;
    out.kind = envelope.kind;
    detail::varint_reader r(body);
    return detail::read_body(r, out);
}

/// Decodes a whole head (envelope and header body) from exactly `bytes`, under the
/// default limits; `payload_bytes` receives what the envelope says follows.
[[nodiscard]] inline std::error_code decode_head(std::span<const std::byte> bytes,
                                                 message_header& out,
                                                 std::uint64_t* payload_bytes = nullptr) {
    frame_envelope e;
    if (auto ec = parse_envelope(bytes, wire_limits{}, e)) {
        return ec;
    }
    if (e.size == 0 || bytes.size() - e.size != e.body_bytes) {
        return errc::malformed_header;
    }
    if (payload_bytes) {
        *payload_bytes = e.payload_bytes;
    }
    return decode_body(bytes.subspan(e.size), e, out);
}

namespace detail {

[[nodiscard]] inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
    return !__builtin_mul_overflow(a, b, &out);
}

template <typename Key>
[[nodiscard]] std::error_code check_keys(const shared_bytes& bytes, std::uint64_t lo,
                                         std::uint64_t hi) {
    const auto keys = bytes.as<Key>();
    if (keys.empty()) {
        return {};
    }
    if (keys.front() < lo || keys.back() >= hi) {
        return errc::key_out_of_range;
    }
    for (std::size_t i = 1; i < keys.size(); ++i) {
        if (!(keys[i - 1] < keys[i])) {
            return errc::keys_not_sorted;
        }
    }
    return {};
}

/// Checks key runs (pairs `[begin, end)`): each non-empty, ascending and disjoint, inside
/// `[lo, hi)`, `count` keys in all.
template <typename Key>
[[nodiscard]] std::error_code check_runs(const shared_bytes& bytes, std::uint64_t lo,
                                         std::uint64_t hi, std::uint64_t count) {
    const auto runs = bytes.as<Key>();
    std::uint64_t total = 0;
    std::uint64_t last_end = lo;
    for (std::size_t i = 0; i + 1 < runs.size(); i += 2) {
        const std::uint64_t b = runs[i];
        const std::uint64_t e = runs[i + 1];
        if (b >= e || b < last_end) {
            return errc::keys_not_sorted;
        }
        if (e > hi) {
            return errc::key_out_of_range;
        }
        total += e - b;
        last_end = e;
    }
    return total == count ? std::error_code{} : errc::segment_size_mismatch;
}

} // namespace detail

/// Checks that a decoded header is consistent: a known kind, known scalar types, and
/// segment sizes that match the key count, width and kind and add up to
/// `payload_bytes`. Allocates nothing.
[[nodiscard]] inline std::error_code check_header(const message_header& h,
                                                  std::uint64_t payload_bytes) {
    if (!is_known(h.kind)) {
        return errc::bad_message_kind;
    }
    if ((h.flags & ~flag_known_mask) != 0) {
        return errc::malformed_header;
    }
    if (h.kind == message_kind::control || h.kind == message_kind::control_reply) {
        // A control body: no keys, one opaque segment read by the cluster layer.
        const auto body = h.segment_bytes[values_segment];
        if (h.key_count != 0 || h.segment_bytes[keys_segment] != 0 ||
            h.segment_bytes[lengths_segment] != 0 || !h.clocks.empty()) {
            return errc::segment_size_mismatch;
        }
        if (body > max_control_bytes) {
            return errc::frame_too_large;
        }
        return padded(body) == payload_bytes ? std::error_code{} : errc::segment_size_mismatch;
    }
    // Every segment fits the payload, and the padded segments fill it exactly.
    auto segments_add_up = [&]() -> std::error_code {
        std::uint64_t total = 0;
        for (auto s : h.segment_bytes) {
            if (s > payload_bytes) {
                return errc::segment_size_mismatch;
            }
            total += padded(s);
        }
        return total == payload_bytes ? std::error_code{} : errc::segment_size_mismatch;
    };
    if ((h.encoding & ~encoding_known_mask) != 0) {
        return errc::malformed_header;
    }
    const bool cached = (h.encoding & encoding_keys_cached) != 0;
    const bool stored = (h.encoding & encoding_keys_store) != 0;
    const bool keyed_request = h.kind == message_kind::push || h.kind == message_kind::pull;
    if (cached || stored) {
        if ((cached && stored) || !keyed_request || h.key_list_id == 0 || h.key_count == 0 ||
            (h.flags & flag_key_runs) != 0) {
            return errc::malformed_header;
        }
    }
    if ((h.encoding & encoding_snappy_mask) != 0) {
        if (!keyed_request && h.kind != message_kind::pull_reply) {
            return errc::malformed_header;
        }
        // The sizes are checked against the header once the segments are decompressed
        // (`receive`); here only that they add up to the payload.
        return segments_add_up();
    }
    const std::size_t ks = size_of(h.key_type);
    const std::size_t vs = size_of(h.value_type);
    if ((h.key_type != scalar_type::u32 && h.key_type != scalar_type::u64) ||
        (h.value_type != scalar_type::f32 && h.value_type != scalar_type::f64)) {
        return errc::malformed_header;
    }
    for (const auto& c : h.clocks) {
        if (c.begin > c.end) {
            return errc::malformed_header;
        }
    }
    if (h.range_begin > h.range_end || (h.key_count > 0 && h.range_begin == h.range_end)) {
        return errc::malformed_header;
    }
    if (auto ec = segments_add_up()) {
        return ec;
    }
    const auto keys = h.segment_bytes[keys_segment];
    const auto values = h.segment_bytes[values_segment];
    const auto lengths = h.segment_bytes[lengths_segment];
    std::uint64_t key_bytes = 0;
    std::uint64_t row_values = 0;
    std::uint64_t value_bytes = 0;
    if (!detail::checked_mul(h.key_count, ks, key_bytes) ||
        !detail::checked_mul(h.key_count, h.width, row_values) ||
        !detail::checked_mul(row_values, vs, value_bytes)) {
        return errc::segment_size_mismatch;
    }
    if (h.kind == message_kind::call || h.kind == message_kind::call_reply) {
        // A key range and one opaque body (the function's name and arguments, or its
        // result or error message), read by the server and the store.
        if (h.key_count != 0 || keys != 0 || lengths != 0) {
            return errc::segment_size_mismatch;
        }
        return values <= max_control_bytes ? std::error_code{} : errc::frame_too_large;
    }
    const bool failed_reply = is_reply(h.kind) && h.status != 0;
    if (failed_reply) {
        return (keys | values | lengths) == 0 ? std::error_code{} : errc::segment_size_mismatch;
    }
    if (h.width == 0 && lengths == 0) {
        return errc::malformed_header;
    }
    const bool runs = (h.flags & flag_key_runs) != 0;
    if (runs) {
        // Key runs: 1 to key_count pairs, and no per-key lengths.
        const bool fits =
            (h.kind == message_kind::push || h.kind == message_kind::pull ||
             h.kind == message_kind::replica_update || h.kind == message_kind::row_transfer) &&
            keys > 0 && keys % (2 * ks) == 0 && keys / (2 * ks) <= h.key_count && lengths == 0;
        if (!fits) {
            return errc::segment_size_mismatch;
        }
        if (h.kind == message_kind::pull) {
            return values == 0 ? std::error_code{} : errc::segment_size_mismatch;
        }
        return values == value_bytes ? std::error_code{} : errc::value_count_mismatch;
    }
    switch (h.kind) {
    case message_kind::push:
    case message_kind::replica_update:
    case message_kind::row_transfer: // no rows: the end of a copy
        if (keys != (cached ? 0 : key_bytes)) {
            return errc::segment_size_mismatch;
        }
        if (lengths == 0) {
            return values == value_bytes ? std::error_code{} : errc::value_count_mismatch;
        }
        if (lengths != h.key_count * 4 || values % vs != 0) {
            return errc::segment_size_mismatch;
        }
        return {};
    case message_kind::pull:
        return (keys == (cached ? 0 : key_bytes) && values == 0 && lengths == 0)
                   ? std::error_code{}
                   : errc::segment_size_mismatch;
    case message_kind::push_reply:
        return (keys | values | lengths) == 0 ? std::error_code{} : errc::segment_size_mismatch;
    case message_kind::pull_reply:
        if (keys != 0 || lengths != 0) {
            return errc::segment_size_mismatch;
        }
        return values == value_bytes ? std::error_code{} : errc::value_count_mismatch;
    case message_kind::clock:
    case message_kind::clock_reply:
    case message_kind::hand_over:
        return (h.key_count | keys | values | lengths) == 0 ? std::error_code{}
                                                            : errc::segment_size_mismatch;
    case message_kind::control:
    case message_kind::control_reply:
    case message_kind::call:
    case message_kind::call_reply:
        break; // checked above
    }
    return errc::bad_message_kind;
}

/// Checks a whole message whose header passed `check_header`: keys sorted, unique and
/// inside the stated range; per-key lengths that add up to the values.
[[nodiscard]] inline std::error_code check_payload(const message& m) {
    const auto& h = m.header;
    for (std::size_t i = 0; i < segment_count; ++i) {
        if (m.segments[i].size() != h.segment_bytes[i]) {
            return errc::segment_size_mismatch;
        }
    }
    const bool runs = (h.flags & flag_key_runs) != 0;
    const bool unresolved = (h.encoding & encoding_keys_cached) != 0;
    const std::error_code ec =
        unresolved ? std::error_code{}
        : runs     ? (h.key_type == scalar_type::u32
                          ? detail::check_runs<std::uint32_t>(m.keys(), h.range_begin, h.range_end,
                                                          h.key_count)
                          : detail::check_runs<std::uint64_t>(m.keys(), h.range_begin, h.range_end,
                                                          h.key_count))
        : h.key_type == scalar_type::u32
            ? detail::check_keys<std::uint32_t>(m.keys(), h.range_begin, h.range_end)
            : detail::check_keys<std::uint64_t>(m.keys(), h.range_begin, h.range_end);
    if (ec) {
        return ec;
    }
    if (!m.lengths().empty()) {
        std::uint64_t sum = 0;
        for (auto len : m.lengths().as<std::uint32_t>()) {
            sum += len;
        }
        std::uint64_t bytes = 0;
        if (!detail::checked_mul(sum, size_of(h.value_type), bytes) ||
            bytes != h.segment_bytes[values_segment]) {
            return errc::value_count_mismatch;
        }
    }
    return {};
}

namespace detail {

/// The frame-level checks of a message that did not come through a decoder: its size
/// against the limits, magic, version and `check_header`.
[[nodiscard]] inline std::error_code check_unframed(const message& m, const wire_limits& limits) {
    const std::uint64_t payload = framed_payload_bytes(m.header);
    if (payload > limits.max_frame_bytes) {
        return errc::frame_too_large;
    }
    if (m.header.magic != wire::magic) {
        return errc::bad_magic;
    }
    if (major_of(m.header.version) != protocol_major) {
        return errc::unsupported_version;
    }
    return check_header(m.header, payload);
}

} // namespace detail

/// Undoes the encodings of a message whose header passed `check_header`, and checks its
/// payload: snappy segments are decompressed once the header they decode to passed
/// `check_header` (raw lengths, read from the blocks, against the limits and the header's
/// key count, width and types: nothing is allocated for a block of the wrong size); a key list
/// reference is replaced by the keys `cache` holds, or left as it is when it holds none (the server
/// answers `errc::key_cache_miss`); keys are checked (`check_payload`); keys sent to be kept are
/// checked against their digest and kept in `cache`. Sets `m.received_bytes`.
[[nodiscard]] inline std::error_code receive(message& m, const wire_limits& limits,
                                             buffer_pool& pool, key_cache_receiver* cache) {
    auto& h = m.header;
    m.received_bytes = framed_payload_bytes(h);
    m.received_values_bytes = h.segment_bytes[values_segment];
    if ((h.encoding & encoding_snappy_mask) != 0) {
        // The decoded header is checked completely before anything is allocated.
        if (auto ec = decompress(m, limits.max_frame_bytes, pool, [](const message_header& d) {
                return check_header(d, framed_payload_bytes(d));
            })) {
            return ec;
        }
    }
    if ((h.encoding & encoding_keys_cached) != 0 && cache) {
        const std::uint64_t bytes = h.key_count * size_of(h.key_type); // checked: no overflow
        if (auto keys = cache->find(h.key_list_id, h.key_list_digest, h.key_type, bytes)) {
            m.set_segment(keys_segment, std::move(*keys));
            h.encoding &= static_cast<std::uint8_t>(~encoding_keys_cached);
        }
    }
    if (auto ec = check_payload(m)) {
        return ec;
    }
    if ((h.encoding & encoding_keys_store) != 0) {
        if (key_list_digest(m.keys().span()) != h.key_list_digest) {
            return errc::malformed_payload;
        }
        if (cache) {
            cache->store(h.key_list_id, h.key_list_digest, h.key_type, m.keys().span(), pool);
        }
        h.encoding &= static_cast<std::uint8_t>(~encoding_keys_store);
    }
    return {};
}

/// All checks a receiver makes, for a message that did not come through a decoder
/// (the in-process transport), and the decoding of `receive`.
[[nodiscard]] inline std::error_code validate(message& m, const wire_limits& limits,
                                              buffer_pool& pool, key_cache_receiver* cache) {
    if (auto ec = detail::check_unframed(m, limits)) {
        return ec;
    }
    for (std::size_t i = 0; i < segment_count; ++i) {
        if (m.segments[i].size() != m.header.segment_bytes[i]) {
            return errc::segment_size_mismatch;
        }
    }
    m.received_head_bytes = head_bytes(m.header); // what its frame would have taken
    return receive(m, limits, pool, cache);
}

/// All checks a receiver makes, for a message that did not come through a decoder and
/// carries no encoding (compressed segments or key list references are refused).
[[nodiscard]] inline std::error_code validate(const message& m, const wire_limits& limits) {
    if (auto ec = detail::check_unframed(m, limits)) {
        return ec;
    }
    if (m.header.encoding != 0) {
        return errc::malformed_header;
    }
    return check_payload(m);
}

} // namespace petrel::wire
