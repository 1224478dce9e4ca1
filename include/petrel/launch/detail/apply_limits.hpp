// Petrel: a process's limits set in the options of its transports, servers and manager.
#pragma once

#include <petrel/cluster/manager_node.hpp>
#include <petrel/launch/limits.hpp>
#include <petrel/server/server_node.hpp>
#include <petrel/transport/connection.hpp>

#include <optional>

namespace petrel::detail {

/// `field = *limit` when the limit is set.
template <class T, class Field>
void set_if(const std::optional<T>& limit, Field& field) {
    if (limit) {
        field = *limit;
    }
}

/// Sets what `l` gives; the other fields of `o` keep their values.
inline void apply_limits(const process_limits& l, transport_options& o) {
    set_if(l.max_connections, o.max_accepted_connections);
    set_if(l.max_connections_per_address, o.max_connections_per_address);
    set_if(l.idle_timeout, o.idle_timeout);
    set_if(l.frame_timeout, o.frame_timeout);
    set_if(l.max_receiving_bytes, o.max_receiving_bytes);
    set_if(l.max_queued_reply_bytes, o.max_queued_reply_bytes);
    set_if(l.max_cached_key_bytes, o.max_cached_key_bytes);
}

inline void apply_limits(const process_limits& l, server_options& o) {
    set_if(l.max_held_bytes, o.max_held_bytes);
    set_if(l.max_tables_per_connection, o.max_tables_per_connection);
    set_if(l.max_rows_per_connection, o.max_rows_per_connection);
}

inline void apply_limits(const process_limits& l, manager_options& o) {
    set_if(l.max_readers, o.max_readers);
    set_if(l.departed_grace, o.departed_grace);
}

} // namespace petrel::detail
