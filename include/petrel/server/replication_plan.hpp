// Petrel: the chains along which servers replicate updates.
#pragma once

#include <petrel/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <system_error>
#include <vector>

namespace petrel {

/// Where a server's updates are replicated: each primary's chain of servers (chain
/// replication), made from the job's membership view (`replication_plan_of`).
struct replication_plan {
    struct peer {
        std::uint32_t id = 0;
        /// Where the server listens ("host:port" for TCP).
        std::string address{};
        friend bool operator==(const peer&, const peer&) = default;
    };
    /// A plan replaces only an older one.
    std::uint64_t version = 0;
    /// For each primary: its chain, the primary first, then its live replicas in order.
    std::map<std::uint32_t, std::vector<peer>> chains{};
    /// The partition of a key, and each partition's primary: the keys a server is the
    /// primary of, which it copies to the servers that join its chain.
    std::function<std::uint32_t(std::uint64_t)> partition_of{};
    std::vector<std::uint32_t> primaries{};
    /// While servers join the running job: each partition's primary in the placement
    /// their copies are made for (`membership_view::next_ring`); empty otherwise. A
    /// primary copies the partitions that move to a joining server (its *learner*) to
    /// it, then sends it every later update of them, until a plan makes the learner
    /// their primary; it then sends it the end of its ownership (the hand-over).
    std::vector<std::uint32_t> next_primaries{};
    /// Where the servers of `next_primaries` that are on no chain (the joining ones)
    /// listen.
    std::vector<peer> learners{};
    /// Consecutive keys that share a partition (the ring's stripe), for key ranges.
    std::uint64_t stripe_keys = 1;
    /// The job's server secret (`member::server_secret`): every update a server sends
    /// down a chain carries it, and a server applies only updates that do, so that no
    /// worker (or other peer) can write a replica's rows. 0 only for plans made by hand,
    /// whose servers then accept updates carrying 0.
    std::uint64_t secret = 0;
};

// Queries of a plan (pure functions of it).

/// Whether plan `p` makes server `id` the primary of partition `part`.
[[nodiscard]] inline bool primary_of_partition(const replication_plan& p, std::uint32_t id,
                                               std::size_t part) noexcept {
    return part < p.primaries.size() && p.primaries[part] == id;
}

/// Whether server `id` is the primary of a partition under `before` that it is not the
/// primary of under `after` (keys moved away from it).
[[nodiscard]] inline bool gives_up(const replication_plan& before, const replication_plan& after,
                                   std::uint32_t id) noexcept {
    for (std::size_t part = 0; part < before.primaries.size(); ++part) {
        if (before.primaries[part] == id && !primary_of_partition(after, id, part)) {
            return true;
        }
    }
    return false;
}

/// Whether server `id` is the primary of a partition under `after` that it was not the
/// primary of under `before` (keys moved to it).
[[nodiscard]] inline bool gains(const replication_plan& before, const replication_plan& after,
                                std::uint32_t id) noexcept {
    for (std::size_t part = 0; part < after.primaries.size(); ++part) {
        if (after.primaries[part] == id && !primary_of_partition(before, id, part)) {
            return true;
        }
    }
    return false;
}

/// The server `id` on a chain or among the learners of plan `p`, or null.
[[nodiscard]] inline const replication_plan::peer* peer_of(const replication_plan& p,
                                                           std::uint32_t id) noexcept {
    for (const auto& [primary, chain] : p.chains) {
        for (const auto& peer : chain) {
            if (peer.id == id) {
                return &peer;
            }
        }
    }
    for (const auto& peer : p.learners) {
        if (peer.id == id) {
            return &peer;
        }
    }
    return nullptr;
}

/// Whether server `id` is a replica (not the primary) on the chain of `primary`.
[[nodiscard]] inline bool replicates(const replication_plan& p, std::uint32_t primary,
                                     std::uint32_t id) noexcept {
    const auto c = p.chains.find(primary);
    return c != p.chains.end() &&
           std::any_of(c->second.begin() + (c->second.empty() ? 0 : 1), c->second.end(),
                       [id](const replication_plan::peer& peer) { return peer.id == id; });
}

/// The ids on the chain of `primary`, the primary first (empty without one).
[[nodiscard]] inline std::vector<std::uint32_t> chain_ids(const replication_plan& p,
                                                          std::uint32_t primary) {
    std::vector<std::uint32_t> out;
    if (const auto c = p.chains.find(primary); c != p.chains.end()) {
        for (const auto& peer : c->second) {
            out.push_back(peer.id);
        }
    }
    return out;
}

/// The server after `self` on the chain of primary `origin`, for a table of `replicas`
/// copies; null at the chain's tail (of the table's copies) or without a chain for a primary
/// `self`. `errc::stale_view` (and null) when the plan puts `self` on no such place: a replica
/// update from a primary whose chain does not hold `self`.
[[nodiscard]] inline const replication_plan::peer*
next_hop(const replication_plan& p, std::uint32_t self, std::uint32_t origin,
         std::uint32_t replicas, std::error_code& ec) noexcept {
    const auto it = p.chains.find(origin);
    const bool primary = origin == self;
    if (it == p.chains.end()) {
        if (!primary) {
            ec = errc::stale_view;
        }
        return nullptr;
    }
    const auto& chain = it->second;
    std::size_t at = 0;
    while (at < chain.size() && chain[at].id != self) {
        ++at;
    }
    if (at == chain.size() || (at == 0) != primary) {
        ec = errc::stale_view;
        return nullptr;
    }
    const std::size_t tail = std::min<std::size_t>(replicas, chain.size() - 1);
    return at < tail ? &chain[at + 1] : nullptr;
}

/// The partitions of plan `p` that move while servers join: away from server `id`, by the
/// server they move to (`to` false), or to it, by the server they move from (`to` true).
[[nodiscard]] inline std::map<std::uint32_t, std::vector<std::uint32_t>>
moving(const replication_plan& p, std::uint32_t id, bool to) {
    std::map<std::uint32_t, std::vector<std::uint32_t>> out;
    const std::size_t n = std::min(p.primaries.size(), p.next_primaries.size());
    for (std::size_t i = 0; i < n; ++i) {
        const auto from = p.primaries[i];
        const auto next = p.next_primaries[i];
        if (from != next && (to ? next : from) == id) {
            out[to ? from : next].push_back(static_cast<std::uint32_t>(i));
        }
    }
    return out;
}
[[nodiscard]] inline auto moving_from(const replication_plan& p, std::uint32_t id) {
    return moving(p, id, false);
}
[[nodiscard]] inline auto moving_to(const replication_plan& p, std::uint32_t id) {
    return moving(p, id, true);
}

} // namespace petrel
