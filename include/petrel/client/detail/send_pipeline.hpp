// Petrel: the client's sending path, the mirror of `wire::receive`: key caching,
// compression and the traffic counters, between a built request and its link.
#pragma once

#include <petrel/core/buffer_pool.hpp>
#include <petrel/core/config.hpp>
#include <petrel/transport/detail/request_link.hpp>
#include <petrel/wire/message.hpp>
#include <petrel/wire/traffic.hpp>

#include <chrono>
#include <cstddef>
#include <memory>

namespace petrel::wire {
class key_cache_sender;
} // namespace petrel::wire

namespace petrel::detail {

/// What the sending path needs, also from callbacks that outlive the client: the encoding
/// options, the pool, the traffic counters and the request timeout. Shared by a client's
/// requests; the counters are atomic and the rest is set before the first send. Its
/// links show it each reply to its requests, which it counts as it arrives.
struct send_pipeline final : reply_observer {
    wire::compression_options compression;
    std::shared_ptr<buffer_pool> pool;
    wire::detail::traffic_counters counters;
    std::chrono::milliseconds request_timeout{0};

    /// Key lists shorter than this are sent as they are (a reference saves nothing).
    static constexpr std::size_t min_cached_key_bytes = 64;

    /// Encodes a keyed request (compression; a pull asks for a compressed reply) and
    /// counts what is sent.
    PETREL_DECL void encode(wire::message& m);

    /// Counts a reply that arrived.
    PETREL_DECL void observe(const wire::message& reply) noexcept override;
};

/// What is left until `deadline`, as a request's timeout: at least 1 ms (a request whose
/// deadline has just passed still goes, and times out at once).
[[nodiscard]] PETREL_DECL std::chrono::milliseconds
time_left(std::chrono::steady_clock::time_point deadline);

/// Sends request `m` on `link` through the pipeline, waiting for its reply until
/// `deadline`. A key list of at least `min_cached_key_bytes` goes through `cache` (when
/// there is one): sent as a reference once the server holds it, and sent once more with
/// its keys when the server answers `errc::key_cache_miss`. `m` is taken as built (before
/// key caching and compression), so a caller that keeps a copy can send it again.
PETREL_DECL void send_request(const std::shared_ptr<send_pipeline>& pipe,
                              const std::shared_ptr<request_link>& link,
                              const std::shared_ptr<wire::key_cache_sender>& cache, wire::message m,
                              reply_callback on_reply,
                              std::chrono::steady_clock::time_point deadline);

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/send_pipeline.ipp>
#endif
