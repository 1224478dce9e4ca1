// Petrel: the membership view the manager broadcasts.
#pragma once

#include <petrel/cluster/detail/text.hpp>
#include <petrel/cluster/node.hpp>
#include <petrel/cluster/ring.hpp>
#include <petrel/cluster/scheduler.hpp>

#include <cereal/archives/binary.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace petrel {

/// Where a node is in its life. Numbers are fixed: they are on the wire.
enum class node_state : std::uint8_t {
    alive = 1,  ///< registered and heard from within the heartbeat timeout
    left = 2,   ///< said goodbye: its work is done, nobody waits for it
    failed = 3, ///< died: no heartbeat within the timeout, or its connection was lost
};

[[nodiscard]] constexpr std::string_view to_string(node_state s) noexcept {
    switch (s) {
    case node_state::alive:
        return "alive";
    case node_state::left:
        return "left";
    case node_state::failed:
        return "failed";
    }
    return "unknown";
}

/// One node of a job as the manager knows it.
struct node_info {
    node_id id = no_node;
    node_role role = node_role::worker;
    node_state state = node_state::alive;
    /// Where peers reach it ("host:port"): the listening address of a server or the
    /// manager; empty for a worker.
    std::string address;
    /// The rank of the process hosting it.
    std::uint32_t rank = 0;
    /// Its position among the nodes of its role: server 0..S-1, worker 0..W-1 (a worker
    /// that joined a running job takes the next number), reader 0, 1, ... in join order.
    std::uint32_t index = 0;
    /// Why it failed, when `state == node_state::failed`.
    std::string failure;
    /// Its worker group: `training_group` for workers, the read-only group's name for
    /// readers, empty for the manager and servers.
    std::string group{};

    friend bool operator==(const node_info&, const node_info&) = default;

    /// "server 2 (index 1, rank 1, 10.0.0.2:4001)", for messages.
    [[nodiscard]] std::string describe() const {
        std::string s = std::string(to_string(role)) + " " + std::to_string(id) + " (";
        if (role != node_role::manager) {
            s += to_string(role);
            s += " #" + std::to_string(index) + ", ";
        }
        s += "rank " + std::to_string(rank);
        if (!address.empty()) {
            s += ", " + address;
        }
        if (role == node_role::reader) {
            s += ", group " + group;
        }
        return s + ")";
    }
};

/// The groups a barrier can span.
enum class group : std::uint8_t {
    all = 1,     ///< every server and worker
    servers = 2, ///< every server
    workers = 3, ///< every worker
};

[[nodiscard]] constexpr bool in_group(node_role r, group g) noexcept {
    switch (g) {
    case group::all:
        return r == node_role::server || r == node_role::worker;
    case group::servers:
        return r == node_role::server;
    case group::workers:
        return r == node_role::worker;
    }
    return false;
}

/// What every node knows about its job: who is in it, in which state, and which server
/// owns which keys. The manager makes a new version on every change and sends it to
/// every live node; versions only grow.
struct membership_view {
    std::string job_id;
    std::uint64_t version = 0;
    /// Ordered by id: the manager (0), the servers, then the workers.
    std::vector<node_info> nodes;
    /// Key placement over the servers.
    petrel::ring ring;
    /// While servers join the running job: the placement their copies are made for (empty
    /// otherwise). The primaries copy the partitions that move to a joining server to it,
    /// then every later update of them; once every joining server holds its copy, the
    /// next view makes this the `ring` (see `manager_node`).
    petrel::ring next_ring;
    /// The scheduler's data assignments.
    work_schedule schedule;
    /// The job goes on without a worker that fails (`manager_options::drop_failed_workers`):
    /// as for one that left, its data share goes to the others and nobody waits for it.
    bool drop_failed_workers = false;

    friend bool operator==(const membership_view&, const membership_view&) = default;

    /// The node with id `id`, or nullptr.
    [[nodiscard]] const node_info* find(node_id id) const noexcept {
        auto it = std::lower_bound(nodes.begin(), nodes.end(), id,
                                   [](const node_info& n, node_id i) { return n.id < i; });
        return it != nodes.end() && it->id == id ? &*it : nullptr;
    }

    /// The nodes of one role, in id order.
    [[nodiscard]] std::vector<const node_info*> of_role(node_role r) const {
        std::vector<const node_info*> out;
        for (const auto& n : nodes) {
            if (n.role == r) {
                out.push_back(&n);
            }
        }
        return out;
    }

    [[nodiscard]] std::size_t count(node_role r, node_state s) const noexcept {
        return static_cast<std::size_t>(
            std::count_if(nodes.begin(), nodes.end(),
                          [&](const node_info& n) { return n.role == r && n.state == s; }));
    }

    /// Whether the job is over for its servers: it had some, and every one left (none
    /// alive, none failed). A reader may still be attached.
    [[nodiscard]] bool servers_all_left() const noexcept {
        bool any = false;
        for (const auto& n : nodes) {
            if (n.role == node_role::server) {
                if (n.state != node_state::left) {
                    return false;
                }
                any = true;
            }
        }
        return any;
    }

    /// The live members of worker group `g` (`training_group` or a reader group), in id
    /// order.
    [[nodiscard]] std::vector<node_id> live_group(std::string_view g) const {
        std::vector<node_id> out;
        for (const auto& n : nodes) {
            if (n.state == node_state::alive &&
                (n.role == node_role::worker || n.role == node_role::reader) && n.group == g) {
                out.push_back(n.id);
            }
        }
        return out;
    }

    /// The share of node `id` in data set `name`; nothing when no such data set exists.
    [[nodiscard]] std::optional<data_share> share(std::string_view name, node_id id) const {
        const auto* d = schedule.find(name);
        if (!d) {
            return std::nullopt;
        }
        return d->share_of(id, version);
    }

    /// Whether the job survives the failure of node `n`: a failed server whose keys live on
    /// (the ring no longer names it, as its partitions moved to their replicas), or a
    /// failed worker when the job drops failed workers.
    [[nodiscard]] bool replaced(const node_info& n) const noexcept {
        if (n.state != node_state::failed) {
            return false;
        }
        if (n.role == node_role::worker) {
            return drop_failed_workers;
        }
        return n.role == node_role::server && !ring.empty() && !ring.holds(n.id);
    }

    /// The failed servers and workers, described, one per line; empty when none failed.
    /// Readers are left out: a reader that dies fails nothing but itself; so are nodes
    /// whose failure the job survives (`replaced`).
    [[nodiscard]] std::string failures() const {
        std::string s;
        for (const auto& n : nodes) {
            if (n.state == node_state::failed && n.role != node_role::reader && !replaced(n)) {
                s += n.describe() + " failed: " + n.failure + "\n";
            }
        }
        return s;
    }
};

template <class Archive>
void save(Archive& ar, const node_info& n) {
    ar(n.id, n.role, n.state, n.rank, n.index);
    detail::save_text(ar, n.address);
    detail::save_text(ar, n.failure);
    detail::save_text(ar, n.group);
}

template <class Archive>
void load(Archive& ar, node_info& n) {
    ar(n.id, n.role, n.state, n.rank, n.index);
    detail::load_text(ar, n.address);
    detail::load_text(ar, n.failure);
    detail::load_text(ar, n.group);
    if (n.role < node_role::manager || n.role > node_role::reader || n.state < node_state::alive ||
        n.state > node_state::failed) {
        throw std::domain_error("unknown node role or state");
    }
}

namespace detail {

template <class Archive>
void save_ring(Archive& ar, const ring& r) {
    const auto& o = r.options();
    ar(o.partitions, o.stripe_keys, o.replicas, o.seed);
    const auto& owners = r.owner_table();
    ar(static_cast<std::uint32_t>(owners.size()));
    ar(cereal::binary_data(owners.data(), owners.size() * sizeof(node_id)));
}

/// Checks the owner count against a limit before allocating; throws on bad input.
template <class Archive>
void load_ring(Archive& ar, ring& r) {
    ring_options o;
    ar(o.partitions, o.stripe_keys, o.replicas, o.seed);
    std::uint32_t owners = 0;
    ar(owners);
    if (owners == 0) {
        r = ring{};
        return;
    }
    if (owners > (std::uint32_t{1} << 22)) { // 16 MiB: the most a control body holds
        throw std::length_error("too many ring owners in a view");
    }
    std::vector<node_id> table(owners);
    ar(cereal::binary_data(table.data(), table.size() * sizeof(node_id)));
    r = ring(o, std::move(table)); // checks options and sizes
}

} // namespace detail

template <class Archive>
void save(Archive& ar, const membership_view& v) {
    detail::save_text(ar, v.job_id);
    ar(v.version);
    ar(static_cast<std::uint32_t>(v.nodes.size()));
    for (const auto& n : v.nodes) {
        ar(n);
    }
    detail::save_ring(ar, v.ring);
    detail::save_ring(ar, v.next_ring);
    ar(v.schedule);
    ar(static_cast<std::uint8_t>(v.drop_failed_workers ? 1 : 0));
}

/// Checks every count against a limit before allocating; throws on bad input.
template <class Archive>
void load(Archive& ar, membership_view& v) {
    detail::load_text(ar, v.job_id);
    ar(v.version);
    std::uint32_t n = 0;
    ar(n);
    if (n > detail::max_view_nodes) {
        throw std::length_error("too many nodes in a view");
    }
    v.nodes.resize(n);
    for (auto& node : v.nodes) {
        ar(node);
    }
    if (!std::is_sorted(v.nodes.begin(), v.nodes.end(),
                        [](const node_info& a, const node_info& b) { return a.id < b.id; })) {
        throw std::domain_error("view nodes out of order");
    }
    detail::load_ring(ar, v.ring);
    detail::load_ring(ar, v.next_ring);
    if (!v.next_ring.empty() &&
        (v.ring.empty() || v.next_ring.options().partitions != v.ring.options().partitions)) {
        throw std::domain_error("a view's next ring does not match its ring");
    }
    ar(v.schedule);
    std::uint8_t drop = 0;
    ar(drop);
    if (drop > 1) {
        throw std::domain_error("a view's worker failure policy is not 0 or 1");
    }
    v.drop_failed_workers = drop == 1;
}

} // namespace petrel
