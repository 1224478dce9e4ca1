// Petrel: snappy compression of payload segments, applied where it pays.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/error.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <snappy.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <system_error>

namespace petrel::wire {

/// When payload segments are compressed.
enum class compression_mode : std::uint8_t {
    off,      ///< never
    always,   ///< every segment of at least `min_bytes` that shrinks to `max_ratio` or less
    adaptive, ///< as `always`, and only when the time saved on the link exceeds the time spent
};

/// How a sender compresses the keys and values segments of its messages.
///
/// Snappy runs at roughly 0.5–2 GB/s per core on gradient data, slower than a loopback
/// connection and faster than a 1 Gbit/s link, so whether compression pays depends on the
/// link and on the data. In `adaptive` mode each segment's first `sample_bytes` are
/// compressed and timed; the whole segment is compressed only when
/// `(1 - ratio) × size / link` (the transfer time saved) exceeds
/// `1.5 × size / speed` (compressing here plus decompressing on the receiver, estimated
/// at half the compression time).
///
/// @par Example
/// @code
/// petrel::kv_store_options<std::uint64_t> o;
/// o.compression = {.mode = petrel::wire::compression_mode::adaptive, .link_gbps = 1};
/// @endcode
struct compression_options {
    compression_mode mode = compression_mode::off;
    /// Smaller segments are sent as they are.
    std::size_t min_bytes = 4096;
    /// A compressed segment is kept only when it is at most this fraction of the original.
    double max_ratio = 0.875;
    /// `adaptive`: the speed of the network between the nodes, in Gbit/s per connection.
    double link_gbps = 10.0;
    /// `adaptive`: bytes compressed to estimate the ratio and the speed.
    std::size_t sample_bytes = 64 * 1024;
};

/// Bytes before and after one stage of the sending pipeline.
struct stage_bytes {
    std::uint64_t in = 0;
    std::uint64_t out = 0;
};

namespace detail {

/// Compresses `in` into a pooled buffer; empty when it does not fit `max_out` bytes.
[[nodiscard]] inline shared_bytes snappy_compress(std::span<const std::byte> in,
                                                  std::size_t max_out, buffer_pool& pool) {
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

/// Whether compressing `bytes` pays under `o` (see `compression_options`).
[[nodiscard]] inline bool worth_compressing(std::span<const std::byte> bytes,
                                            const compression_options& o, buffer_pool& pool) {
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

} // namespace detail

/// Compresses segment `s` of `m` (keys or values) when `o` says so and it pays; sets the
/// matching `encoding_flag` and the segment's size. Adds the segment's size before and
/// after to `stats` when given. Returns whether it compressed.
inline bool compress_segment(message& m, segment s, const compression_options& o, buffer_pool& pool,
                             stage_bytes* stats = nullptr) {
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

/// Compresses the keys and values segments of `m` where `o` says so (see
/// `compress_segment`); `stats` gets the payload's bytes before and after.
inline void compress(message& m, const compression_options& o, buffer_pool& pool,
                     stage_bytes* stats = nullptr) {
    compress_segment(m, keys_segment, o, pool, stats);
    compress_segment(m, values_segment, o, pool, stats);
}

/// Undoes `compress`: every snappy segment of `m` is replaced by its raw bytes in a pooled
/// buffer and the header says so. Each raw length is read from the block and checked
/// against `max_frame_bytes` (and their padded sum against it too) before anything is
/// allocated, and so does `check(header)`: the header as it will be once decompressed
/// (raw segment sizes, snappy bits cleared), so that a receiver can check it completely
/// before it allocates anything. A block that does not decode is refused.
template <typename Check>
[[nodiscard]] std::error_code decompress(message& m, std::uint64_t max_frame_bytes,
                                         buffer_pool& pool, Check&& check) {
    auto& h = m.header;
    std::uint64_t total = 0;
    std::size_t raw[segment_count] = {};
    for (std::size_t s = 0; s < segment_count; ++s) {
        const std::uint8_t bit = s == keys_segment     ? encoding_keys_snappy
                                 : s == values_segment ? encoding_values_snappy
                                                       : 0;
        if (bit == 0 || (h.encoding & bit) == 0) {
            raw[s] = m.segments[s].size();
        } else {
            const auto& seg = m.segments[s];
            if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(seg.data()),
                                               seg.size(), &raw[s])) {
                return errc::malformed_payload;
            }
        }
        if (raw[s] > max_frame_bytes) {
            return errc::frame_too_large;
        }
        total += (std::uint64_t{raw[s]} + 7) & ~std::uint64_t{7}; // padded to 8 on the wire
    }
    if (total > max_frame_bytes) {
        return errc::frame_too_large;
    }
    {
        message_header decoded = h;
        decoded.encoding &= static_cast<std::uint8_t>(~encoding_snappy_mask);
        for (std::size_t s = 0; s < segment_count; ++s) {
            decoded.segment_bytes[s] = raw[s];
        }
        if (auto ec = check(decoded)) {
            return ec;
        }
    }
    for (std::size_t s = 0; s < 2; ++s) {
        const std::uint8_t bit = s == keys_segment ? encoding_keys_snappy : encoding_values_snappy;
        if ((h.encoding & bit) == 0) {
            continue;
        }
        const auto& seg = m.segments[s];
        pooled_buffer out = pool.acquire(std::max<std::size_t>(raw[s], 1));
        if (!snappy::RawUncompress(reinterpret_cast<const char*>(seg.data()), seg.size(),
                                   reinterpret_cast<char*>(out.data()))) {
            return errc::malformed_payload;
        }
        m.set_segment(static_cast<segment>(s), raw[s] ? out.share(0, raw[s]) : shared_bytes{});
        h.encoding &= static_cast<std::uint8_t>(~bit);
    }
    return {};
}

/// `decompress` with no check of the decoded header beyond the size limit.
[[nodiscard]] inline std::error_code decompress(message& m, std::uint64_t max_frame_bytes,
                                                buffer_pool& pool) {
    return decompress(m, max_frame_bytes, pool,
                      [](const message_header&) { return std::error_code{}; });
}

} // namespace petrel::wire
