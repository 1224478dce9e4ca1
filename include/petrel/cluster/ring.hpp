// Petrel: the ring of key ranges that places keys on servers.
#pragma once

#include <petrel/cluster/node.hpp>
#include <petrel/core/key.hpp>
#include <petrel/core/key_range.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace petrel {

/// The shape of a ring: how keys are cut into stripes and stripes hashed onto partitions.
struct ring_options {
    /// Partitions of the hash space (the ring's virtual nodes); a power of two. Each
    /// server holds about `partitions / servers` of them.
    std::uint32_t partitions = 4096;
    /// Consecutive keys kept together on one server (a stripe); a power of two. Larger
    /// stripes keep more locality for dense keys, smaller ones spread small tables better.
    std::uint32_t stripe_keys = 64;
    /// Copies of each partition besides the primary (used by replication).
    std::uint32_t replicas = 0;
    /// Mixed into the hash, so that two jobs may place keys differently.
    std::uint64_t seed = 0x70657472656cULL;

    friend bool operator==(const ring_options&, const ring_options&) = default;
};

/// Places keys on servers: a consistent-hashing ring over key ranges.
///
/// The key space is cut into stripes of `stripe_keys` consecutive keys; each stripe is
/// hashed onto one of `partitions` equal partitions of the hash space, and each partition
/// has an owner list: its primary server, then `replicas` successors. Dense small keys
/// (0..N) therefore spread over every server while a stripe of neighbouring keys stays
/// together, and a change of servers moves whole partitions only, never single keys.
///
/// The owner lists are data (made by `balanced`, carried in the membership view), so
/// that failover and migration can reassign partitions without changing how keys hash.
///
/// @par Example
/// @code
/// auto r = petrel::ring::balanced({}, std::vector<petrel::node_id>{1, 2, 3, 4});
/// petrel::node_id s = r.owner(std::uint64_t{42});   // the server holding key 42
/// @endcode
///
/// @par Thread Safety
/// Immutable after construction; share it freely.
class ring {
public:
    ring() = default;

    /// A ring with the given owner lists: `partitions * (1 + replicas)` node ids,
    /// partition by partition, primary first. @throws std::invalid_argument
    ring(ring_options opts, std::vector<node_id> owners) : opts_(opts), owners_(std::move(owners)) {
        check_options(opts_);
        if (owners_.size() != std::size_t{opts_.partitions} * (opts_.replicas + 1)) {
            throw std::invalid_argument("petrel::ring: " + std::to_string(owners_.size()) +
                                        " owners for " + std::to_string(opts_.partitions) +
                                        " partitions with " + std::to_string(opts_.replicas) +
                                        " replicas");
        }
        stripe_shift_ = static_cast<unsigned>(std::countr_zero(opts_.stripe_keys));
    }

    /// Spreads the partitions evenly: partition p's primary is `servers[p % n]` and its
    /// j-th replica `servers[(p + j) % n]`. Needs more servers than replicas.
    /// @throws std::invalid_argument
    static ring balanced(ring_options opts, std::span<const node_id> servers) {
        check_options(opts);
        if (servers.empty()) {
            throw std::invalid_argument("petrel::ring: no servers");
        }
        if (opts.replicas >= servers.size()) {
            throw std::invalid_argument("petrel::ring: " + std::to_string(opts.replicas) +
                                        " replicas need more than " +
                                        std::to_string(servers.size()) + " servers");
        }
        std::vector<node_id> owners;
        owners.reserve(std::size_t{opts.partitions} * (opts.replicas + 1));
        for (std::uint32_t p = 0; p < opts.partitions; ++p) {
            for (std::uint32_t j = 0; j <= opts.replicas; ++j) {
                owners.push_back(servers[(p + j) % servers.size()]);
            }
        }
        return ring(opts, std::move(owners));
    }

    /// What `failover` makes of a ring.
    struct failover_result;

    /// The ring once only the servers in `live` (in ring order) remain: each partition
    /// keeps its live owners in order (the first live replica of a failed primary becomes
    /// the primary), then takes the next servers of `live` after its last kept owner
    /// (cyclically) until it has `replicas + 1` owners again, or every live server. With
    /// fewer live servers than `replicas + 1`, the new ring keeps `live.size() - 1`
    /// replicas. A partition with no live owner keeps its first owners and is listed as
    /// lost: nobody holds its keys any more. Partitions of one primary keep the same
    /// successors, so that each primary has one replication chain.
    [[nodiscard]] failover_result failover(std::span<const node_id> live) const;

    /// The ring once servers `joiners` (on no owner list) join the servers `live` (the
    /// live servers of this ring, in ring order): each joiner becomes the primary of
    /// `partitions / (live + joiners)` partitions (fewer when there are too few to go
    /// round), taken in turn from the primaries that hold more than that, so that the
    /// least moves; its replicas are the servers after it in `live` then `joiners` order.
    /// The other partitions keep their owner lists, and each primary keeps one chain.
    /// Needs `replicas` below the number of servers. @throws std::invalid_argument
    [[nodiscard]] ring joined(std::span<const node_id> live,
                              std::span<const node_id> joiners) const;

    /// The ring once server `leaving` hands its partitions over to the servers `live`
    /// (the other live servers of this ring), for a ring without replicas (with replicas,
    /// a leaving server's partitions move to a replica: `failover`): each of its
    /// partitions goes to the live server that holds the fewest at that point (the
    /// earliest of `live` on a tie), so the load stays even and nothing else moves.
    /// @throws std::invalid_argument with replicas, or with no live server besides it
    [[nodiscard]] ring handed_over(node_id leaving, std::span<const node_id> live) const;

    [[nodiscard]] const ring_options& options() const noexcept { return opts_; }

    /// Whether server `id` is on some owner list.
    [[nodiscard]] bool holds(node_id id) const noexcept {
        return std::find(owners_.begin(), owners_.end(), id) != owners_.end();
    }
    [[nodiscard]] bool empty() const noexcept { return owners_.empty(); }

    /// The stripe holding `k`: `k / stripe_keys`.
    [[nodiscard]] std::uint64_t stripe_of(std::uint64_t k) const noexcept {
        return k >> stripe_shift_;
    }

    /// The partition a stripe hashes to.
    [[nodiscard]] std::uint32_t partition_of_stripe(std::uint64_t stripe) const noexcept {
        return static_cast<std::uint32_t>(mix(stripe ^ opts_.seed) & (opts_.partitions - 1));
    }

    [[nodiscard]] std::uint32_t partition_of(std::uint64_t k) const noexcept {
        return partition_of_stripe(stripe_of(k));
    }

    /// The primary server of `k`. Precondition: `!empty()`.
    [[nodiscard]] node_id owner(std::uint64_t k) const noexcept {
        return owners_[std::size_t{partition_of(k)} * (opts_.replicas + 1)];
    }

    /// The owners of a partition, primary first.
    [[nodiscard]] std::span<const node_id> owners(std::uint32_t partition) const noexcept {
        const std::size_t n = opts_.replicas + 1;
        return std::span<const node_id>(owners_).subspan(partition * n, n);
    }

    /// Every owner list, partition by partition (what the membership view carries).
    [[nodiscard]] const std::vector<node_id>& owner_table() const noexcept { return owners_; }

    /// The keys of the stripe holding `k` (clipped to the key type's reserved end).
    template <key Key>
    [[nodiscard]] key_range<Key> stripe_range(Key k) const noexcept {
        const std::uint64_t first = stripe_of(k) << stripe_shift_;
        const std::uint64_t last = first + (opts_.stripe_keys - 1);
        const std::uint64_t end = std::min<std::uint64_t>(last, key_space_end<Key> - 1) + 1;
        return {static_cast<Key>(first), static_cast<Key>(end)};
    }

    /// The distinct servers that are the primary of some partition, in increasing order.
    [[nodiscard]] std::vector<node_id> primaries() const {
        std::vector<node_id> out;
        for (std::size_t p = 0; p < opts_.partitions; ++p) {
            out.push_back(owners_[p * (opts_.replicas + 1)]);
        }
        std::sort(out.begin(), out.end());
        out.erase(std::unique(out.begin(), out.end()), out.end());
        return out;
    }

    friend bool operator==(const ring& a, const ring& b) {
        return a.opts_ == b.opts_ && a.owners_ == b.owners_;
    }

private:
    static void check_options(const ring_options& o) {
        if (o.partitions == 0 || !std::has_single_bit(o.partitions) ||
            o.partitions > (std::uint32_t{1} << 20)) {
            throw std::invalid_argument("petrel::ring: partitions must be a power of two "
                                        "between 1 and 2^20, not " +
                                        std::to_string(o.partitions));
        }
        if (o.stripe_keys == 0 || !std::has_single_bit(o.stripe_keys)) {
            throw std::invalid_argument("petrel::ring: stripe_keys must be a power of two, not " +
                                        std::to_string(o.stripe_keys));
        }
        if (o.replicas > 7) {
            throw std::invalid_argument("petrel::ring: at most 7 replicas, not " +
                                        std::to_string(o.replicas));
        }
    }

    /// SplitMix64's finalizer: every input bit affects every output bit.
    static constexpr std::uint64_t mix(std::uint64_t x) noexcept {
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebULL;
        x ^= x >> 31;
        return x;
    }

    ring_options opts_{};
    std::vector<node_id> owners_;
    unsigned stripe_shift_ = 6;
};

struct ring::failover_result {
    petrel::ring ring;
    /// Partitions none of whose owners is live, ascending.
    std::vector<std::uint32_t> lost;
};

inline ring::failover_result ring::failover(std::span<const node_id> live) const {
    failover_result out;
    ring_options o = opts_;
    if (live.empty()) {
        out.ring = *this;
        for (std::uint32_t p = 0; p < opts_.partitions; ++p) {
            out.lost.push_back(p);
        }
        return out;
    }
    o.replicas =
        std::min<std::uint32_t>(opts_.replicas, static_cast<std::uint32_t>(live.size() - 1));
    const std::size_t n = o.replicas + 1;
    auto position = [&](node_id id) -> std::size_t {
        const auto it = std::find(live.begin(), live.end(), id);
        return it == live.end() ? live.size() : static_cast<std::size_t>(it - live.begin());
    };
    std::vector<node_id> owners;
    owners.reserve(std::size_t{o.partitions} * n);
    std::vector<node_id> list;
    for (std::uint32_t p = 0; p < opts_.partitions; ++p) {
        const auto old = this->owners(p);
        list.clear();
        std::size_t last = live.size();
        for (const auto id : old) {
            const std::size_t at = position(id);
            if (at < live.size() && list.size() < n) {
                list.push_back(id);
                last = at;
            }
        }
        if (list.empty()) {
            out.lost.push_back(p);
            owners.insert(owners.end(), old.begin(), old.begin() + static_cast<std::ptrdiff_t>(n));
            continue;
        }
        for (std::size_t step = 1; list.size() < n && step < live.size(); ++step) {
            const node_id next = live[(last + step) % live.size()];
            if (std::find(list.begin(), list.end(), next) == list.end()) {
                list.push_back(next);
            }
        }
        owners.insert(owners.end(), list.begin(), list.end());
    }
    out.ring = ring(o, std::move(owners));
    return out;
}

inline ring ring::joined(std::span<const node_id> live, std::span<const node_id> joiners) const {
    std::vector<node_id> all(live.begin(), live.end());
    all.insert(all.end(), joiners.begin(), joiners.end());
    const std::size_t n = opts_.replicas + 1;
    if (owners_.empty() || all.empty() || opts_.replicas >= all.size()) {
        throw std::invalid_argument("petrel::ring: " + std::to_string(opts_.replicas) +
                                    " replicas need more than " + std::to_string(all.size()) +
                                    " servers");
    }
    for (const auto j : joiners) {
        if (holds(j)) {
            throw std::invalid_argument("petrel::ring: server " + std::to_string(j) +
                                        " joins but holds partitions already");
        }
    }
    const std::uint32_t quota = opts_.partitions / static_cast<std::uint32_t>(all.size());
    std::map<node_id, std::uint32_t> held;
    for (std::uint32_t p = 0; p < opts_.partitions; ++p) {
        ++held[owners_[std::size_t{p} * n]];
    }
    std::vector<node_id> owners = owners_;
    std::size_t turn = 0;
    for (std::uint32_t p = 0; p < opts_.partitions && !joiners.empty(); ++p) {
        const node_id from = owners_[std::size_t{p} * n];
        if (held[from] <= quota) {
            continue;
        }
        std::size_t pick = joiners.size();
        for (std::size_t t = 0; t < joiners.size() && pick == joiners.size(); ++t) {
            const std::size_t j = (turn + t) % joiners.size();
            if (held[joiners[j]] < quota) {
                pick = j;
            }
        }
        if (pick == joiners.size()) {
            break; // every joiner has its share
        }
        turn = pick + 1;
        const node_id to = joiners[pick];
        --held[from];
        ++held[to];
        const std::size_t at =
            static_cast<std::size_t>(std::find(all.begin(), all.end(), to) - all.begin());
        for (std::size_t j = 0; j < n; ++j) {
            owners[std::size_t{p} * n + j] = all[(at + j) % all.size()];
        }
    }
    return ring(opts_, std::move(owners));
}

inline ring ring::handed_over(node_id leaving, std::span<const node_id> live) const {
    if (opts_.replicas != 0) {
        throw std::invalid_argument("petrel::ring: a hand-over moves the partitions of a ring "
                                    "without replicas; with " +
                                    std::to_string(opts_.replicas) +
                                    " they move to a replica (failover)");
    }
    if (owners_.empty() || live.empty() ||
        std::find(live.begin(), live.end(), leaving) != live.end()) {
        throw std::invalid_argument("petrel::ring: server " + std::to_string(leaving) +
                                    " hands its partitions over to other live servers, and "
                                    "there are none");
    }
    // (partitions held, position in `live`): the smallest gets the next partition.
    std::vector<std::uint32_t> held(live.size(), 0);
    for (const auto id : owners_) {
        if (const auto it = std::find(live.begin(), live.end(), id); it != live.end()) {
            ++held[static_cast<std::size_t>(it - live.begin())];
        }
    }
    using load = std::pair<std::uint32_t, std::size_t>;
    std::priority_queue<load, std::vector<load>, std::greater<>> least;
    for (std::size_t i = 0; i < live.size(); ++i) {
        least.emplace(held[i], i);
    }
    std::vector<node_id> owners = owners_;
    for (auto& owner : owners) {
        if (owner == leaving) {
            auto [count, at] = least.top();
            least.pop();
            owner = live[at];
            least.emplace(count + 1, at);
        }
    }
    return ring(opts_, std::move(owners));
}

} // namespace petrel
