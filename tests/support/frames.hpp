// Test support: frames as byte strings, and feeding them to a decoder.
#pragma once

#include <petrel/wire/frame_decoder.hpp>
#include <petrel/wire/key_cache.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <system_error>
#include <vector>

namespace petrel::test {

/// The frame of `m` as one byte string, as a connection writes it.
inline std::vector<std::byte> frame_of(const wire::message& m) {
    std::vector<std::byte> out;
    wire::encode_head(m, out);
    for (const auto& seg : m.segments) {
        out.insert(out.end(), seg.data(), seg.data() + seg.size());
        out.resize(out.size() + (wire::padded(seg.size()) - seg.size()));
    }
    return out;
}

/// An envelope as a sender of version `major.minor` writes it, for a header body of
/// `body` bytes and a payload of `payload` bytes.
inline std::vector<std::byte> envelope_of(wire::message_kind kind, std::uint64_t body,
                                          std::uint64_t payload,
                                          std::uint8_t major = wire::protocol_major,
                                          std::uint8_t minor = wire::protocol_minor) {
    std::vector<std::byte> out(wire::detail::max_envelope_bytes);
    wire::detail::varint_writer w(out.data());
    w.byte(wire::detail::envelope_magic & 0xFF);
    w.byte(wire::detail::envelope_magic >> 8);
    w.byte(major);
    w.byte(minor);
    w.byte(static_cast<std::uint8_t>(kind));
    w.varint(body);
    w.varint(payload);
    out.resize(static_cast<std::size_t>(w.position() - out.data()));
    return out;
}

/// The head of `h` as a sender of minor version `minor` writes it when that version
/// added field `bit` (one this version does not know) and sets it to `value`.
inline std::vector<std::byte> head_with_newer_field(const wire::message_header& h, unsigned bit,
                                                    std::uint64_t value, std::uint8_t minor) {
    std::vector<std::byte> body(wire::detail::body_bytes(h));
    wire::detail::varint_writer w(body.data());
    wire::detail::write_body(h, w);
    const std::uint64_t mask = wire::detail::present_fields(h);
    body.erase(body.begin(),
               body.begin() + static_cast<std::ptrdiff_t>(wire::detail::varint_bytes(mask)));
    std::vector<std::byte> grown(2 * wire::detail::max_varint_bytes);
    wire::detail::varint_writer g(grown.data());
    g.varint(mask | std::uint64_t{1} << bit);
    grown.resize(static_cast<std::size_t>(g.position() - grown.data()));
    grown.insert(grown.end(), body.begin(), body.end());
    std::vector<std::byte> extra(wire::detail::max_varint_bytes);
    wire::detail::varint_writer e(extra.data());
    e.varint(value);
    extra.resize(static_cast<std::size_t>(e.position() - extra.data()));
    grown.insert(grown.end(), extra.begin(), extra.end());
    auto out = envelope_of(h.kind, grown.size(), wire::framed_payload_bytes(h),
                           wire::protocol_major, minor);
    out.insert(out.end(), grown.begin(), grown.end());
    return out;
}

/// The whole frame of `m` as a sender of minor version `minor` writes it, with field
/// `bit` (one this version does not know) set to `value`.
inline std::vector<std::byte> frame_with_newer_field(const wire::message& m, unsigned bit,
                                                     std::uint64_t value, std::uint8_t minor) {
    auto out = head_with_newer_field(m.header, bit, value, minor);
    for (const auto& seg : m.segments) {
        out.insert(out.end(), seg.data(), seg.data() + seg.size());
        out.resize(out.size() + (wire::padded(seg.size()) - seg.size()));
    }
    return out;
}

/// Feeds `stream` to `dec` in pieces as large as its buffer, collecting the messages;
/// returns the first error.
inline std::error_code feed_all(wire::frame_decoder& dec, const std::vector<std::byte>& stream,
                                std::vector<wire::message>& out) {
    std::size_t at = 0;
    while (at < stream.size()) {
        auto buf = dec.buffer();
        const std::size_t n = std::min(buf.size(), stream.size() - at);
        std::memcpy(buf.data(), stream.data() + at, n);
        at += n;
        if (auto ec = dec.consume(n, [&](wire::message&& m) { out.push_back(std::move(m)); })) {
            return ec;
        }
    }
    return {};
}

/// A push of `n` u64 keys 0, 2, 4, ... with `width` floats each.
inline wire::message numbered_push(std::size_t n, std::uint32_t width) {
    std::vector<std::uint64_t> keys(n);
    for (std::size_t i = 0; i < n; ++i) {
        keys[i] = 2 * i;
    }
    std::vector<float> values(n * width);
    std::iota(values.begin(), values.end(), 0.0f);
    wire::message m;
    m.header.kind = wire::message_kind::push;
    m.header.request_id = 42;
    m.header.table_id = 3;
    m.header.width = width;
    m.header.key_count = n;
    m.header.range_begin = 0;
    m.header.range_end = 2 * n + 1;
    m.set_segment(wire::keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(wire::values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

/// A push of `keys` (u64, ascending) with one float each, sent with key caching as `d`
/// says: the keys and a request to keep them as list `d.id`, or only a reference to it.
inline wire::message cached_push(const std::vector<std::uint64_t>& keys,
                                 wire::key_cache_sender::decision d) {
    std::vector<float> values(keys.size(), 1.0f);
    wire::message m;
    m.header.kind = wire::message_kind::push;
    m.header.key_count = keys.size();
    m.header.range_begin = keys.front();
    m.header.range_end = keys.back() + 1;
    m.header.key_list_id = d.id;
    m.header.key_list_digest = d.digest;
    m.header.encoding = d.known ? wire::encoding_keys_cached : wire::encoding_keys_store;
    if (!d.known) {
        m.set_segment(wire::keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    }
    m.set_segment(wire::values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

struct feed_result {
    std::vector<wire::message> messages;
    std::error_code error;
};

/// Feeds `stream` to a decoder in pieces of at most `chunk` bytes.
inline feed_result feed_in_pieces(const std::vector<std::byte>& stream, std::size_t chunk,
                                  wire::wire_limits limits = {}) {
    wire::frame_decoder dec(limits, std::make_shared<buffer_pool>());
    feed_result r;
    std::size_t pos = 0;
    while (pos < stream.size()) {
        auto buf = dec.buffer();
        REQUIRE_FALSE(buf.empty());
        const std::size_t n = std::min({chunk, buf.size(), stream.size() - pos});
        std::memcpy(buf.data(), stream.data() + pos, n);
        pos += n;
        r.error = dec.consume(n, [&](wire::message&& m) { r.messages.push_back(std::move(m)); });
        if (r.error) {
            CHECK(dec.buffer().empty());
            break;
        }
    }
    return r;
}

} // namespace petrel::test
