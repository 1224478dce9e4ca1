// Petrel: snappy compression of payload segments: the calls into snappy.
#ifndef PETREL_WIRE_IMPL_COMPRESSION_IPP
#define PETREL_WIRE_IMPL_COMPRESSION_IPP

#include <petrel/wire/compression.hpp>

#include <snappy.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>
#include <utility>

namespace petrel::wire {

namespace detail {

PETREL_DECL shared_bytes snappy_compress(std::span<const std::byte> in, std::size_t max_out,
                                         buffer_pool& pool) {
    const std::size_t bound = snappy::MaxCompressedLength(in.size());
    pooled_buffer out = pool.acquire(bound);
    std::size_t n = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(in.data()), in.size(),
                        reinterpret_cast<char*>(out.data()), &n);
    if (n > max_out) {
        return {};
    }
    return out.share(0, n);
}

PETREL_DECL bool worth_compressing(std::span<const std::byte> bytes, const compression_options& o,
                                   buffer_pool& pool) {
    if (o.mode == compression_mode::always) {
        return true;
    }
    const std::size_t n = std::min(bytes.size(), std::max<std::size_t>(o.sample_bytes, 1024));
    const auto start = std::chrono::steady_clock::now();
    const std::size_t bound = snappy::MaxCompressedLength(n);
    pooled_buffer out = pool.acquire(bound);
    std::size_t got = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(bytes.data()), n,
                        reinterpret_cast<char*>(out.data()), &got);
    const double seconds = std::max(
        1e-7, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    const double ratio = static_cast<double>(got) / static_cast<double>(n);
    if (ratio > o.max_ratio) {
        return false;
    }
    const double speed = static_cast<double>(n) / seconds;    // bytes per second
    const double link = std::max(o.link_gbps, 1e-3) * 1.25e8; // bytes per second
    return (1.0 - ratio) / link > 1.5 / speed;
}

PETREL_DECL bool snappy_raw_length(std::span<const std::byte> in, std::size_t& length) {
    return snappy::GetUncompressedLength(reinterpret_cast<const char*>(in.data()), in.size(),
                                         &length);
}

PETREL_DECL bool snappy_uncompress(std::span<const std::byte> in, std::byte* out) {
    return snappy::RawUncompress(reinterpret_cast<const char*>(in.data()), in.size(),
                                 reinterpret_cast<char*>(out));
}

} // namespace detail

PETREL_DECL bool compress_segment(message& m, segment s, const compression_options& o,
                                  buffer_pool& pool, stage_bytes* stats) {
    const std::uint8_t bit = s == keys_segment ? encoding_keys_snappy : encoding_values_snappy;
    const std::size_t before = m.segments[s].size();
    bool done = false;
    if (o.mode != compression_mode::off && (s == keys_segment || s == values_segment) &&
        before >= std::max<std::size_t>(o.min_bytes, 1) && (m.header.encoding & bit) == 0 &&
        detail::worth_compressing(m.segments[s].span(), o, pool)) {
        const auto limit = static_cast<std::size_t>(static_cast<double>(before) * o.max_ratio);
        if (shared_bytes packed = detail::snappy_compress(m.segments[s].span(), limit, pool);
            !packed.empty()) {
            m.set_segment(s, std::move(packed));
            m.header.encoding |= bit;
            done = true;
        }
    }
    if (stats) {
        stats->in += before;
        stats->out += m.segments[s].size();
    }
    return done;
}

PETREL_DECL void compress(message& m, const compression_options& o, buffer_pool& pool,
                          stage_bytes* stats) {
    compress_segment(m, keys_segment, o, pool, stats);
    compress_segment(m, values_segment, o, pool, stats);
}

PETREL_DECL std::error_code decompress(message& m, std::uint64_t max_frame_bytes,
                                       buffer_pool& pool) {
    return decompress(m, max_frame_bytes, pool,
                      [](const message_header&) { return std::error_code{}; });
}

} // namespace petrel::wire

#endif // PETREL_WIRE_IMPL_COMPRESSION_IPP
