// Petrel: where a client's keys go (see <petrel/client/detail/router.hpp>).
#ifndef PETREL_CLIENT_IMPL_ROUTER_IPP
#define PETREL_CLIENT_IMPL_ROUTER_IPP

#include <petrel/client/detail/router.hpp>
#include <petrel/wire/message.hpp>

#include <algorithm>
#include <cstring>

namespace petrel::detail {

namespace router_walk {

/// Calls `visit(slot, keys)` for the keys of [begin, end) a stripe at a time, in order.
template <typename Visit>
void stripes(const route_table& t, std::uint64_t begin, std::uint64_t end, Visit&& visit) {
    const auto& r = t.view->ring;
    const std::uint64_t width = r.options().stripe_keys;
    for (std::uint64_t k = begin; k < end;) {
        const std::uint64_t st = r.stripe_of(k);
        // The stripe's last key, then its end (at the top of the key space there is none).
        const std::uint64_t last = (st * width) + (width - 1);
        const std::uint64_t stop = last >= end - 1 ? end : last + 1;
        visit(t.slot_of_stripe(st), stop - k);
        k = stop;
    }
}

} // namespace router_walk

PETREL_DECL std::uint32_t route_table::slot_of_stripe(std::uint64_t stripe) const {
    return partition_slot[view->ring.partition_of_stripe(stripe)];
}

PETREL_DECL bool route_table::alive(std::size_t slot) const {
    const auto* n = view->find(servers[slot]);
    return n && n->state == node_state::alive;
}

PETREL_DECL key_source key_source::of(const wire::message& m) {
    const auto t = m.header.key_type;
    const auto bytes = m.keys().span();
    return (m.header.flags & wire::flag_key_runs) != 0 ? runs(bytes, t) : list(bytes, t);
}

PETREL_DECL std::size_t key_source::stored() const noexcept {
    const std::size_t size = wire::size_of(key_type);
    return size == 0 ? 0 : keys.size() / size;
}

PETREL_DECL std::uint64_t key_source::stored_key(std::size_t i) const noexcept {
    const std::size_t size = wire::size_of(key_type);
    std::uint64_t k = 0; // little-endian keys of `size` bytes
    std::memcpy(&k, keys.data() + i * size, size);
    return k;
}

PETREL_DECL std::vector<std::size_t> routes::used() const {
    std::vector<std::size_t> out;
    for (std::size_t s = 0; s < counts.size(); ++s) {
        if (counts[s] != 0) {
            out.push_back(s);
        }
    }
    return out;
}

PETREL_DECL routes route(const route_table& t, const key_source& keys) {
    routes out;
    out.runs.resize(t.slots());
    out.counts.assign(t.slots(), 0);
    std::size_t at = 0; // the next key's position
    std::size_t last_slot = ~std::size_t{0};
    auto add = [&](std::uint32_t slot, std::size_t n) {
        if (slot == last_slot) {
            out.runs[slot].back().count += n;
        } else {
            out.runs[slot].push_back({at, n});
            last_slot = slot;
        }
        out.counts[slot] += n;
        at += n;
    };
    switch (keys.shape) {
    case key_source::form::range:
        router_walk::stripes(t, keys.begin, keys.end, add);
        break;
    case key_source::form::runs: {
        const std::size_t n = keys.stored();
        for (std::size_t i = 0; i + 1 < n; i += 2) {
            router_walk::stripes(t, keys.stored_key(i), keys.stored_key(i + 1), add);
        }
        break;
    }
    case key_source::form::list: {
        const std::size_t n = keys.stored();
        const auto& r = t.view->ring;
        std::uint64_t stripe = 0;
        std::uint32_t slot = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint64_t st = r.stripe_of(keys.stored_key(i));
            if (i == 0 || st != stripe) {
                stripe = st;
                slot = t.slot_of_stripe(st);
            }
            add(slot, 1);
        }
        break;
    }
    }
    return out;
}

PETREL_DECL std::optional<std::uint32_t> sole_slot(const route_table& t, const key_source& keys) {
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    switch (keys.shape) {
    case key_source::form::range:
        if (keys.begin >= keys.end) {
            return std::nullopt;
        }
        first = keys.begin;
        last = keys.end - 1;
        break;
    case key_source::form::list: {
        const std::size_t n = keys.stored();
        if (n == 0) {
            return std::nullopt;
        }
        first = keys.stored_key(0);
        last = keys.stored_key(n - 1); // sorted: the largest
        break;
    }
    case key_source::form::runs:
        return std::nullopt;
    }
    if (t.slots() == 1) {
        return 0;
    }
    const auto& r = t.view->ring;
    const std::uint64_t stripe = r.stripe_of(first);
    if (r.stripe_of(last) != stripe) {
        return std::nullopt;
    }
    return t.slot_of_stripe(stripe);
}

PETREL_DECL std::vector<std::size_t> owners_of(const route_table& t, std::uint64_t begin,
                                               std::uint64_t end) {
    if (begin >= end) {
        return {};
    }
    const auto& r = t.view->ring;
    if (r.stripe_of(end - 1) - r.stripe_of(begin) >= std::uint64_t{4} * r.options().partitions) {
        std::vector<std::size_t> all(t.slots());
        for (std::size_t s = 0; s < all.size(); ++s) {
            all[s] = s;
        }
        return all;
    }
    return route(t, key_source::range(begin, end)).used();
}

PETREL_DECL std::optional<std::size_t> single_owner(const route_table& t, const key_source& keys) {
    if (const auto slot = sole_slot(t, keys)) {
        return t.alive(*slot) ? std::optional<std::size_t>(*slot) : std::nullopt;
    }
    const auto used = route(t, keys).used();
    if (used.size() != 1 || !t.alive(used.front())) {
        return std::nullopt;
    }
    return used.front();
}

} // namespace petrel::detail

#endif
