#include <petrel/client/detail/router.hpp>

#include <petrel/cluster/ring.hpp>
#include <petrel/core/key.hpp>
#include <petrel/wire/message.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <vector>

using petrel::detail::key_run;
using petrel::detail::key_source;
using petrel::detail::route_table;

namespace {

/// Three servers (ids 1..3, slots 0..2) on a balanced ring with small stripes, and no
/// links: the router reads only the view and the slots.
route_table three_server_routes(petrel::node_state second = petrel::node_state::alive) {
    petrel::membership_view v;
    v.version = 4;
    std::vector<petrel::node_id> ids;
    for (std::uint32_t i = 0; i < 3; ++i) {
        const auto id = static_cast<petrel::node_id>(i + 1);
        v.nodes.push_back({id,
                           petrel::node_role::server,
                           i == 1 ? second : petrel::node_state::alive,
                           "127.0.0.1:1",
                           0,
                           i,
                           {},
                           {}});
        ids.push_back(id);
    }
    petrel::ring_options o;
    o.partitions = 16;
    o.stripe_keys = 8;
    v.ring = petrel::ring::balanced(o, ids);
    route_table t;
    t.view = std::make_shared<const petrel::membership_view>(std::move(v));
    t.links.resize(3);
    t.caches.resize(3);
    t.servers = ids;
    t.partition_slot.resize(o.partitions);
    for (std::uint32_t p = 0; p < o.partitions; ++p) {
        t.partition_slot[p] = t.view->ring.owners(p)[0] - 1;
    }
    return t;
}

/// The slot of one key, from the ring alone: what every walk must agree with.
std::size_t slot_of(const route_table& t, std::uint64_t k) {
    return t.view->ring.owner(k) - 1;
}

/// Each slot's positions, key by key: the reference the runs are checked against.
std::vector<std::vector<std::size_t>> positions_by_slot(const route_table& t,
                                                        const std::vector<std::uint64_t>& keys) {
    std::vector<std::vector<std::size_t>> out(t.slots());
    for (std::size_t i = 0; i < keys.size(); ++i) {
        out[slot_of(t, keys[i])].push_back(i);
    }
    return out;
}

std::vector<std::vector<std::size_t>> expand(const petrel::detail::routes& r) {
    std::vector<std::vector<std::size_t>> out(r.runs.size());
    for (std::size_t s = 0; s < r.runs.size(); ++s) {
        std::size_t n = 0;
        for (const auto& ru : r.runs[s]) {
            CHECK(ru.count > 0);
            for (std::size_t i = ru.first; i < ru.first + ru.count; ++i) {
                out[s].push_back(i);
            }
            n += ru.count;
        }
        CHECK(n == r.counts[s]);
    }
    return out;
}

template <typename Key>
std::vector<Key> narrow(const std::vector<std::uint64_t>& keys) {
    return {keys.begin(), keys.end()};
}

} // namespace

TEST_CASE("router: a key list is cut by the server of each key, in runs of positions",
          "[client][router]") {
    const auto t = three_server_routes();
    std::mt19937_64 rng(7);
    for (int round = 0; round < 50; ++round) {
        std::set<std::uint64_t> picked;
        const std::size_t n = 1 + rng() % 300;
        while (picked.size() < n) {
            picked.insert(rng() % 5000);
        }
        const std::vector<std::uint64_t> keys(picked.begin(), picked.end());
        const auto want = positions_by_slot(t, keys);

        const auto k64 = narrow<std::uint64_t>(keys);
        const auto r64 = petrel::detail::route(
            t, key_source::list(std::as_bytes(std::span(k64)), petrel::wire::scalar_type::u64));
        CHECK(expand(r64) == want);

        const auto k32 = narrow<std::uint32_t>(keys);
        const auto r32 = petrel::detail::route(
            t, key_source::list(std::as_bytes(std::span(k32)), petrel::wire::scalar_type::u32));
        CHECK(expand(r32) == want);

        // Consecutive positions of one slot make one run.
        for (const auto& runs : r64.runs) {
            for (std::size_t i = 1; i < runs.size(); ++i) {
                CHECK(runs[i - 1].first + runs[i - 1].count < runs[i].first);
            }
        }
    }
}

TEST_CASE("router: a range and key runs are cut a stripe at a time, the same as their keys",
          "[client][router]") {
    const auto t = three_server_routes();
    SECTION("a range across many stripes") {
        std::vector<std::uint64_t> keys;
        for (std::uint64_t k = 13; k < 413; ++k) {
            keys.push_back(k);
        }
        const auto r = petrel::detail::route(t, key_source::range(13, 413));
        CHECK(expand(r) == positions_by_slot(t, keys));
        std::size_t runs = 0;
        for (const auto& rs : r.runs) {
            runs += rs.size();
        }
        CHECK(runs <= 52); // at most one run per stripe touched
    }
    SECTION("key runs, an empty one among them, crossing stripes") {
        const std::vector<std::uint32_t> pairs{3, 30, 40, 40, 41, 42, 100, 190};
        std::vector<std::uint64_t> keys;
        for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
            for (std::uint64_t k = pairs[i]; k < pairs[i + 1]; ++k) {
                keys.push_back(k);
            }
        }
        const auto r = petrel::detail::route(
            t, key_source::runs(std::as_bytes(std::span(pairs)), petrel::wire::scalar_type::u32));
        CHECK(expand(r) == positions_by_slot(t, keys));
    }
    SECTION("a range that ends at the top of the key space ends") {
        const std::uint64_t top = ~std::uint64_t{0};
        const auto r = petrel::detail::route(t, key_source::range(top - 20, top));
        std::size_t n = 0;
        for (const auto c : r.counts) {
            n += c;
        }
        CHECK(n == 20);
    }
    SECTION("an empty range has no keys") {
        const auto r = petrel::detail::route(t, key_source::range(9, 9));
        CHECK(r.used().empty());
    }
}

TEST_CASE("router: keys in one stripe, or under one server, have a sole slot found in one look",
          "[client][router]") {
    const auto t = three_server_routes(); // stripes of 8 keys
    using petrel::detail::sole_slot;
    auto list = [](const std::vector<std::uint64_t>& keys) {
        return key_source::list(std::as_bytes(std::span(keys)), petrel::wire::scalar_type::u64);
    };
    // Whenever it names a slot, every key is there (checked against the ring, key by key).
    std::mt19937_64 rng(11);
    std::size_t named = 0;
    for (int round = 0; round < 300; ++round) {
        std::set<std::uint64_t> picked;
        const std::uint64_t base = rng() % 4000;
        const std::size_t n = 1 + rng() % 6;
        while (picked.size() < n) {
            picked.insert(base + rng() % (1 + rng() % 24));
        }
        const std::vector<std::uint64_t> keys(picked.begin(), picked.end());
        const auto s = sole_slot(t, list(keys));
        const bool one_stripe = keys.front() / 8 == keys.back() / 8;
        CHECK(s.has_value() == one_stripe);
        if (s) {
            ++named;
            for (const auto k : keys) {
                CHECK(slot_of(t, k) == *s);
            }
        }
        const auto r = sole_slot(t, key_source::range(keys.front(), keys.back() + 1));
        CHECK(r.has_value() == one_stripe);
        if (r) {
            CHECK(*r == slot_of(t, keys.front()));
        }
    }
    CHECK(named > 50);
    CHECK(sole_slot(t, list({7, 8})) == std::nullopt); // two stripes
    CHECK(sole_slot(t, list({8, 15})) == slot_of(t, 8));
    const std::vector<std::uint32_t> k32{16, 23};
    CHECK(sole_slot(t, key_source::list(std::as_bytes(std::span(k32)),
                                        petrel::wire::scalar_type::u32)) == slot_of(t, 16));
    // No keys, and key runs, are left to the walk.
    CHECK(sole_slot(t, list({})) == std::nullopt);
    CHECK(sole_slot(t, key_source::range(9, 9)) == std::nullopt);
    const std::vector<std::uint64_t> pairs{3, 4};
    CHECK(sole_slot(t, key_source::runs(std::as_bytes(std::span(pairs)),
                                        petrel::wire::scalar_type::u64)) == std::nullopt);
    // A table of one slot holds every key, however far apart.
    auto one = t;
    one.links.resize(1);
    one.caches.resize(1);
    one.servers.resize(1);
    std::fill(one.partition_slot.begin(), one.partition_slot.end(), 0U);
    CHECK(sole_slot(one, list({0, 4000, 1'000'000})) == 0U);
    CHECK(sole_slot(one, key_source::range(5, 100'000)) == 0U);
}

TEST_CASE("router: the servers of a range, every one for a range that reaches them all",
          "[client][router]") {
    const auto t = three_server_routes();
    // One stripe: one server.
    const auto one = petrel::detail::owners_of(t, 16, 24);
    REQUIRE(one.size() == 1);
    CHECK(one.front() == slot_of(t, 16));
    // A few stripes: the servers of their keys, in slot order.
    std::set<std::size_t> want;
    for (std::uint64_t k = 0; k < 40; ++k) {
        want.insert(slot_of(t, k));
    }
    const auto few = petrel::detail::owners_of(t, 0, 40);
    CHECK(std::set<std::size_t>(few.begin(), few.end()) == want);
    CHECK(std::is_sorted(few.begin(), few.end()));
    // The whole key space: every server, without walking it.
    CHECK(petrel::detail::owners_of(t, 0, petrel::key_space_end<std::uint64_t>) ==
          std::vector<std::size_t>{0, 1, 2});
    CHECK(petrel::detail::owners_of(t, 5, 5).empty());
}

TEST_CASE("router: the one live server of a request's keys", "[client][router]") {
    // Keys of one stripe lie on one server; keys of two servers have no single one.
    const auto t = three_server_routes();
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    for (std::uint64_t k = 0; k < 1000; k += 8) {
        if (slot_of(t, k) != slot_of(t, 0)) {
            b = k;
            break;
        }
    }
    REQUIRE(b != 0);
    const std::vector<std::uint64_t> same{a, a + 1, a + 7};
    const std::vector<std::uint64_t> split{a, b};
    const auto u64 = petrel::wire::scalar_type::u64;
    CHECK(petrel::detail::single_owner(t, key_source::list(std::as_bytes(std::span(same)), u64)) ==
          slot_of(t, a));
    CHECK_FALSE(
        petrel::detail::single_owner(t, key_source::list(std::as_bytes(std::span(split)), u64)));
    CHECK_FALSE(petrel::detail::single_owner(t, key_source::list({}, u64)));

    // The same keys when their server has failed: none.
    const auto failed = three_server_routes(petrel::node_state::failed);
    for (std::uint64_t k = 0; k < 1000; ++k) {
        if (slot_of(failed, k) == 1) {
            const std::vector<std::uint64_t> one{k};
            CHECK_FALSE(petrel::detail::single_owner(
                failed, key_source::list(std::as_bytes(std::span(one)), u64)));
            CHECK_FALSE(failed.alive(1));
            CHECK(failed.alive(0));
            break;
        }
    }
}

TEST_CASE("router: a request's keys are read as the wire carries them", "[client][router]") {
    const auto t = three_server_routes();
    petrel::wire::message m;
    m.header.key_type = petrel::wire::scalar_type::u32;
    const std::vector<std::uint32_t> pairs{0, 64};
    m.set_segment(petrel::wire::keys_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(pairs))));
    SECTION("as key runs under the flag") {
        m.header.flags |= petrel::wire::flag_key_runs;
        const auto s = key_source::of(m);
        CHECK(s.shape == key_source::form::runs);
        std::size_t n = 0;
        for (const auto c : petrel::detail::route(t, s).counts) {
            n += c;
        }
        CHECK(n == 64);
    }
    SECTION("as a key list without it") {
        const auto s = key_source::of(m);
        CHECK(s.shape == key_source::form::list);
        std::size_t n = 0;
        for (const auto c : petrel::detail::route(t, s).counts) {
            n += c;
        }
        CHECK(n == 2);
    }
}

TEST_CASE("router: a key source counts and reads the key values it holds, of either width",
          "[client]") {
    const std::vector<std::uint32_t> k32{7, 70000, 4000000000U};
    const auto list32 =
        key_source::list(std::as_bytes(std::span(k32)), petrel::wire::scalar_type::u32);
    REQUIRE(list32.stored() == 3);
    CHECK(list32.stored_key(0) == 7);
    CHECK(list32.stored_key(1) == 70000);
    CHECK(list32.stored_key(2) == 4000000000U);
    const std::vector<std::uint64_t> pairs{5, 9, (std::uint64_t{1} << 40),
                                           (std::uint64_t{1} << 40) + 3};
    const auto runs =
        key_source::runs(std::as_bytes(std::span(pairs)), petrel::wire::scalar_type::u64);
    REQUIRE(runs.stored() == 4); // two runs: first and end of each
    CHECK(runs.stored_key(2) == (std::uint64_t{1} << 40));
    CHECK(runs.stored_key(3) == (std::uint64_t{1} << 40) + 3);
    CHECK(key_source::range(3, 8).stored() == 0); // a range holds no key bytes
    // Bytes of a key type of no size hold no keys.
    CHECK(
        key_source::list(std::as_bytes(std::span(k32)), petrel::wire::scalar_type::none).stored() ==
        0);
}
