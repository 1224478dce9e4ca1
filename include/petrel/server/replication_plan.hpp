// Petrel: the chains along which servers replicate updates.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
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

} // namespace petrel
