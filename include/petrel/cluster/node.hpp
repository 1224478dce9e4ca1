// Petrel: node ids and roles.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace petrel {

/// A node's id in a job, assigned by the manager: 0 is the manager, then the servers,
/// then the workers, each group ordered by (process rank, index within the process).
using node_id = std::uint32_t;

/// The id of no node.
inline constexpr node_id no_node = 0xFFFFFFFFu;

/// A node's own key: 128 random bits the manager gives a node when it joins, which only
/// that node is sent. Registering again as the node (after a lost connection, or with a
/// manager that takes the job over) requires it, so that no other holder of the job's
/// secret can take a node's place. All zero: no key.
using node_key = std::array<std::uint64_t, 2>;

/// Whether `a` and `b` are the same key, in a time that does not depend on where they
/// differ. No key matches nothing.
[[nodiscard]] constexpr bool same_key(const node_key& a, const node_key& b) noexcept {
    const std::uint64_t differ = (a[0] ^ b[0]) | (a[1] ^ b[1]);
    const std::uint64_t empty = a[0] | a[1];
    return differ == 0 && empty != 0;
}

/// What a node does. Numbers are fixed: they are on the wire.
enum class node_role : std::uint8_t {
    manager = 1, ///< rendezvous, membership view, barriers, heartbeats
    server = 2,  ///< holds a share of the tables and answers pushes and pulls
    worker = 3,  ///< runs the training code: pushes gradients, pulls weights
    reader = 4,  ///< a worker of a read-only group: pulls the newest completed clock
};

[[nodiscard]] constexpr std::string_view to_string(node_role r) noexcept {
    switch (r) {
    case node_role::manager:
        return "manager";
    case node_role::server:
        return "server";
    case node_role::worker:
        return "worker";
    case node_role::reader:
        return "reader";
    }
    return "unknown";
}

/// "manager", "server", "worker" or "reader" (as `to_string` writes them); nothing
/// otherwise.
[[nodiscard]] constexpr std::optional<node_role> parse_node_role(std::string_view s) noexcept {
    for (auto r : {node_role::manager, node_role::server, node_role::worker, node_role::reader}) {
        if (s == to_string(r)) {
            return r;
        }
    }
    return std::nullopt;
}

} // namespace petrel
