// Petrel: where a client's keys go. One placement function (stripe → partition → the
// slot of its primary server) and the walks built on it: a request's keys cut into runs
// per server, the servers a key range touches, and the one live server holding every key.
#pragma once

#include <petrel/cluster/view.hpp>
#include <petrel/core/config.hpp>
#include <petrel/wire/header.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace petrel::wire {
class key_cache_sender;
struct message;
} // namespace petrel::wire

namespace petrel::detail {

class request_link;

/// Where keys go under one view: a link, a key cache and a server per slot (a server of
/// the view), and each partition's slot. Built whole for each new view, then shared
/// read-only by the requests sent under it.
struct route_table {
    std::shared_ptr<const membership_view> view;
    std::vector<std::shared_ptr<request_link>> links;            // by slot
    std::vector<std::shared_ptr<wire::key_cache_sender>> caches; // by slot (null: none)
    std::vector<node_id> servers;                                // by slot
    std::vector<std::uint32_t> partition_slot;                   // partition → slot

    [[nodiscard]] std::size_t slots() const noexcept { return servers.size(); }

    /// The placement: the slot of the server that holds the keys of stripe `stripe`.
    [[nodiscard]] PETREL_DECL std::uint32_t slot_of_stripe(std::uint64_t stripe) const;

    /// Whether the view counts the server of `slot` alive.
    [[nodiscard]] PETREL_DECL bool alive(std::size_t slot) const;
};

/// Keys at positions [first, first + count) of a request, in its order.
struct key_run {
    std::size_t first = 0;
    std::size_t count = 0;
};

/// A request's keys as the router reads them: a sorted key list, pairs [begin, end) of
/// key runs (empty runs count no keys), or one range. Views the caller's bytes.
struct key_source {
    enum class form : std::uint8_t { list, runs, range };

    form shape = form::list;
    std::span<const std::byte> keys; // list or runs: little-endian keys of `key_type`
    wire::scalar_type key_type = wire::scalar_type::u64;
    std::uint64_t begin = 0; // range
    std::uint64_t end = 0;   // range

    [[nodiscard]] static key_source list(std::span<const std::byte> keys, wire::scalar_type t) {
        return {form::list, keys, t, 0, 0};
    }
    [[nodiscard]] static key_source runs(std::span<const std::byte> pairs, wire::scalar_type t) {
        return {form::runs, pairs, t, 0, 0};
    }
    [[nodiscard]] static key_source range(std::uint64_t b, std::uint64_t e) {
        return {form::range, {}, wire::scalar_type::u64, b, e};
    }
    /// The keys of a request as it is on the wire (a key list, or key runs by its flag).
    [[nodiscard]] PETREL_DECL static key_source of(const wire::message& m);

    /// How many key values `keys` holds: the keys of a list, two per run (first, end).
    [[nodiscard]] PETREL_DECL std::size_t stored() const noexcept;
    /// Key value `i` of `keys` (`i < stored()`).
    [[nodiscard]] PETREL_DECL std::uint64_t stored_key(std::size_t i) const noexcept;
};

/// The keys of a request cut by slot: each slot's runs of positions in the request's
/// order (consecutive positions with the same slot are one run) and its key count.
struct routes {
    std::vector<std::vector<key_run>> runs; // by slot
    std::vector<std::size_t> counts;        // by slot

    /// The slots with keys, in slot order.
    [[nodiscard]] PETREL_DECL std::vector<std::size_t> used() const;
};

/// Cuts `keys` by the slot that holds them under `t`. A range and each key run are walked
/// a stripe at a time, so the work follows the stripes covered, not the keys; a key list
/// costs one lookup per stripe change.
[[nodiscard]] PETREL_DECL routes route(const route_table& t, const key_source& keys);

/// The slot of every key of `keys` when one look shows that they all lie in one slot: the
/// table has a single slot, or a key list or range lies within one stripe (a stripe is a
/// block of consecutive keys). None otherwise (they may still lie in one slot), and for no
/// keys or key runs. Costs two lookups at most, however many keys there are.
[[nodiscard]] PETREL_DECL std::optional<std::uint32_t> sole_slot(const route_table& t,
                                                                 const key_source& keys);

/// The slots of the servers holding keys of [begin, end): every slot for a range over at
/// least four stripes per partition (it reaches them all, and walking it could be long).
[[nodiscard]] PETREL_DECL std::vector<std::size_t>
owners_of(const route_table& t, std::uint64_t begin, std::uint64_t end);

/// The slot of the live server that holds every key; none when the keys lie on several
/// servers, there are none, or their server is not alive.
[[nodiscard]] PETREL_DECL std::optional<std::size_t> single_owner(const route_table& t,
                                                                  const key_source& keys);

} // namespace petrel::detail

#if PETREL_HEADER_ONLY
#include <petrel/client/impl/router.ipp>
#endif
