// Petrel: a process's limits set in the options of its transports, servers and manager.
#pragma once

#include <petrel/cluster/manager_node.hpp>
#include <petrel/launch/limits.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/transport/connection.hpp>

namespace petrel::detail {

/// Sets what `l` gives; the other fields of `o` keep their values.
inline void apply_limits(const process_limits& l, transport_options& o) {
    if (l.max_connections) {
        o.max_accepted_connections = *l.max_connections;
    }
    if (l.max_connections_per_address) {
        o.max_connections_per_address = *l.max_connections_per_address;
    }
    if (l.idle_timeout) {
        o.idle_timeout = *l.idle_timeout;
    }
    if (l.frame_timeout) {
        o.frame_timeout = *l.frame_timeout;
    }
    if (l.max_receiving_bytes) {
        o.max_receiving_bytes = *l.max_receiving_bytes;
    }
    if (l.max_queued_reply_bytes) {
        o.max_queued_reply_bytes = *l.max_queued_reply_bytes;
    }
    if (l.max_cached_key_bytes) {
        o.max_cached_key_bytes = *l.max_cached_key_bytes;
    }
}

inline void apply_limits(const process_limits& l, server_options& o) {
    if (l.max_held_bytes) {
        o.max_held_bytes = *l.max_held_bytes;
    }
    if (l.max_tables_per_connection) {
        o.max_tables_per_connection = *l.max_tables_per_connection;
    }
    if (l.max_rows_per_connection) {
        o.max_rows_per_connection = *l.max_rows_per_connection;
    }
}

inline void apply_limits(const process_limits& l, manager_options& o) {
    if (l.max_readers) {
        o.max_readers = *l.max_readers;
    }
    if (l.departed_grace) {
        o.departed_grace = *l.departed_grace;
    }
}

} // namespace petrel::detail
