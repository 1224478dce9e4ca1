// Petrel: how a sender compresses payload segments, and the byte counts of a stage.
#pragma once

#include <cstddef>
#include <cstdint>

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

} // namespace petrel::wire
