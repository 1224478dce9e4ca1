// Petrel: counters of the bytes a store sends and receives, stage by stage.
#pragma once

#include <petrel/wire/compression_options.hpp>

#include <atomic>
#include <cstdint>

namespace petrel::wire {

/// What one store (one table, one worker) sent and received, and what each stage of the
/// sending pipeline made of it (`kv_store::traffic()`).
///
/// A push goes through the stages in this order: `filter` (its rows, keys and values,
/// before and after the push filters), `key_cache` (the key bytes before, and the key
/// bytes actually sent after), `compression` (the keys and values segments before and
/// after snappy). `sent_bytes` counts whole frames (prefix, header and padded payload) of
/// every request, resends included; `received_bytes` the frames of the replies as they
/// arrived, and `reply_compression` their values segments as received and as decoded.
struct traffic_stats {
    std::uint64_t requests = 0;
    std::uint64_t replies = 0;
    stage_bytes filter{};
    stage_bytes key_cache{};
    std::uint64_t key_cache_hits = 0;   ///< key lists sent as a reference
    std::uint64_t key_cache_misses = 0; ///< references the server did not hold (keys resent)
    stage_bytes compression{};
    stage_bytes reply_compression{};
    std::uint64_t sent_bytes = 0;
    std::uint64_t received_bytes = 0;
};

namespace detail {

/// `traffic_stats` as relaxed atomic counters, updated from any thread.
struct traffic_counters {
    struct pair {
        std::atomic<std::uint64_t> in{0};
        std::atomic<std::uint64_t> out{0};
        void add(stage_bytes b) noexcept {
            in.fetch_add(b.in, std::memory_order_relaxed);
            out.fetch_add(b.out, std::memory_order_relaxed);
        }
        [[nodiscard]] stage_bytes load() const noexcept {
            return {in.load(std::memory_order_relaxed), out.load(std::memory_order_relaxed)};
        }
    };
    std::atomic<std::uint64_t> requests{0};
    std::atomic<std::uint64_t> replies{0};
    pair filter;
    pair key_cache;
    std::atomic<std::uint64_t> key_cache_hits{0};
    std::atomic<std::uint64_t> key_cache_misses{0};
    pair compression;
    pair reply_compression;
    std::atomic<std::uint64_t> sent_bytes{0};
    std::atomic<std::uint64_t> received_bytes{0};

    [[nodiscard]] traffic_stats load() const noexcept {
        traffic_stats t;
        t.requests = requests.load(std::memory_order_relaxed);
        t.replies = replies.load(std::memory_order_relaxed);
        t.filter = filter.load();
        t.key_cache = key_cache.load();
        t.key_cache_hits = key_cache_hits.load(std::memory_order_relaxed);
        t.key_cache_misses = key_cache_misses.load(std::memory_order_relaxed);
        t.compression = compression.load();
        t.reply_compression = reply_compression.load();
        t.sent_bytes = sent_bytes.load(std::memory_order_relaxed);
        t.received_bytes = received_bytes.load(std::memory_order_relaxed);
        return t;
    }
};

} // namespace detail

} // namespace petrel::wire
