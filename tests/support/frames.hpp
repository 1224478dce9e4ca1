// Test support: frames as byte strings, and feeding them to a decoder.
#pragma once

#include <petrel/wire/frame.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
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

} // namespace petrel::test
