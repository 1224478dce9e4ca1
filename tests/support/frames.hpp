// Test support: frames as byte strings, and feeding them to a decoder.
#pragma once

#include <petrel/wire/frame.hpp>

#include <algorithm>
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
