// Petrel: snappy compression of payload segments, applied where it pays.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/core/error.hpp>
#include <petrel/wire/compression_options.hpp>
#include <petrel/wire/header.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

namespace petrel::wire {

namespace detail {

/// Compresses `in` into a pooled buffer; empty when it does not fit `max_out` bytes.
[[nodiscard]] PETREL_DECL shared_bytes snappy_compress(std::span<const std::byte> in,
                                                       std::size_t max_out, buffer_pool& pool);

/// Whether compressing `bytes` pays under `o` (see `compression_options`).
[[nodiscard]] PETREL_DECL bool worth_compressing(std::span<const std::byte> bytes,
                                                 const compression_options& o, buffer_pool& pool);

/// The raw length of the snappy block `in`, read from its start into `length`; false when
/// it cannot be read.
[[nodiscard]] PETREL_DECL bool snappy_raw_length(std::span<const std::byte> in,
                                                 std::size_t& length);

/// Decompresses the snappy block `in` into `out`, which holds its raw length (see
/// `snappy_raw_length`); false when the block does not decode.
[[nodiscard]] PETREL_DECL bool snappy_uncompress(std::span<const std::byte> in, std::byte* out);

} // namespace detail

/// Compresses segment `s` of `m` (keys or values) when `o` says so and it pays; sets the
/// matching `encoding_flag` and the segment's size. Adds the segment's size before and
/// after to `stats` when given. Returns whether it compressed.
PETREL_DECL bool compress_segment(message& m, segment s, const compression_options& o,
                                  buffer_pool& pool, stage_bytes* stats = nullptr);

/// Compresses the keys and values segments of `m` where `o` says so (see
/// `compress_segment`); `stats` gets the payload's bytes before and after.
PETREL_DECL void compress(message& m, const compression_options& o, buffer_pool& pool,
                          stage_bytes* stats = nullptr);

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
        } else if (!detail::snappy_raw_length(m.segments[s].span(), raw[s])) {
            return errc::malformed_payload;
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
        pooled_buffer out = pool.acquire(std::max<std::size_t>(raw[s], 1));
        if (!detail::snappy_uncompress(m.segments[s].span(), out.data())) {
            return errc::malformed_payload;
        }
        m.set_segment(static_cast<segment>(s), raw[s] ? out.share(0, raw[s]) : shared_bytes{});
        h.encoding &= static_cast<std::uint8_t>(~bit);
    }
    return {};
}

/// `decompress` with no check of the decoded header beyond the size limit.
[[nodiscard]] PETREL_DECL std::error_code decompress(message& m, std::uint64_t max_frame_bytes,
                                                     buffer_pool& pool);

} // namespace petrel::wire

#if PETREL_HEADER_ONLY
#include <petrel/wire/impl/compression.ipp>
#endif
