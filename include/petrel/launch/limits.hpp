// Petrel: the limits a process keeps on what its peers make it hold, as launcher settings.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace petrel {

/// Limits on what one process holds for its peers (`docs/SECURITY.md`, "Limits"). Each
/// one left unset keeps the default of the option it sets; see there for what it bounds.
struct process_limits {
    /// `transport_options::max_accepted_connections`.  `--max-connections N`.
    std::optional<std::uint32_t> max_connections{};
    /// `transport_options::max_connections_per_address`.
    /// `--max-connections-per-address N`.
    std::optional<std::uint32_t> max_connections_per_address{};
    /// `transport_options::idle_timeout` (0: none).  `--idle-timeout MS`.
    std::optional<std::chrono::milliseconds> idle_timeout{};
    /// `transport_options::frame_timeout`.  `--frame-timeout MS`.
    std::optional<std::chrono::milliseconds> frame_timeout{};
    /// `transport_options::max_receiving_bytes`.  `--max-receiving-bytes BYTES`.
    std::optional<std::uint64_t> max_receiving_bytes{};
    /// `transport_options::max_queued_reply_bytes`.  `--max-queued-reply-bytes BYTES`.
    std::optional<std::uint64_t> max_queued_reply_bytes{};
    /// `transport_options::max_cached_key_bytes`.  `--max-cached-key-bytes BYTES`.
    std::optional<std::uint64_t> max_cached_key_bytes{};
    /// `server_options::max_held_bytes`.  `--max-held-bytes BYTES`.
    std::optional<std::uint64_t> max_held_bytes{};
    /// `server_options::max_tables_per_connection`.  `--max-tables-per-connection N`.
    std::optional<std::uint32_t> max_tables_per_connection{};
    /// `server_options::max_rows_per_connection`.  `--max-rows-per-connection N`.
    std::optional<std::uint64_t> max_rows_per_connection{};
    /// `manager_options::max_readers`.  `--max-readers N`.
    std::optional<std::uint32_t> max_readers{};
    /// `manager_options::departed_grace`.  `--departed-grace MS`.
    std::optional<std::chrono::milliseconds> departed_grace{};

    bool operator==(const process_limits&) const = default;
};

} // namespace petrel
