#include <petrel/cluster/ring.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace {

/// Keys per server, as fractions of the mean.
template <typename Keys>
std::vector<double> shares(const petrel::ring& r, const Keys& keys, std::size_t servers) {
    std::map<petrel::node_id, std::size_t> count;
    for (auto k : keys) {
        ++count[r.owner(k)];
    }
    const double mean = static_cast<double>(keys.size()) / static_cast<double>(servers);
    std::vector<double> out;
    for (const auto& [id, n] : count) {
        out.push_back(static_cast<double>(n) / mean);
    }
    return out;
}

} // namespace

TEST_CASE("ring: 4 servers hold 85-115% of the mean, dense and sparse keys", "[cluster][ring]") {
    const std::vector<petrel::node_id> servers{1, 2, 3, 4};
    const auto r = petrel::ring::balanced({}, servers);

    std::vector<std::uint64_t> dense(1'000'000);
    for (std::uint64_t k = 0; k < dense.size(); ++k) {
        dense[k] = k;
    }
    std::mt19937_64 gen(12345);
    std::set<std::uint64_t> unique;
    while (unique.size() < 1'000'000) {
        unique.insert(gen() >> 1);
    }
    const std::vector<std::uint64_t> sparse(unique.begin(), unique.end());

    for (const std::vector<std::uint64_t>* keys : {&std::as_const(dense), &sparse}) {
        const auto s = shares(r, *keys, servers.size());
        REQUIRE(s.size() == servers.size()); // every server holds keys
        for (double f : s) {
            CHECK(f >= 0.85);
            CHECK(f <= 1.15);
        }
    }
}

TEST_CASE("ring: small dense tables spread over every server", "[cluster][ring]") {
    const std::vector<petrel::node_id> servers{1, 2, 3, 4, 5, 6, 7, 8};
    const auto r = petrel::ring::balanced({}, servers);
    std::set<petrel::node_id> owners;
    for (std::uint64_t k = 0; k < 64 * 64; ++k) { // 64 stripes
        owners.insert(r.owner(k));
    }
    CHECK(owners.size() == servers.size());
}

TEST_CASE("ring: a stripe of consecutive keys stays on one server", "[cluster][ring]") {
    const auto r =
        petrel::ring::balanced({.stripe_keys = 16}, std::vector<petrel::node_id>{1, 2, 3});
    for (std::uint64_t k = 0; k < 10'000; ++k) {
        const auto range = r.stripe_range(k);
        CHECK(range.contains(k));
        CHECK(range.size() == 16);
        CHECK(r.owner(range.begin) == r.owner(k));
        CHECK(r.owner(range.end - 1) == r.owner(k));
    }
    const auto top = r.stripe_range(petrel::key_space_end<std::uint64_t> - 1);
    CHECK(top.end == petrel::key_space_end<std::uint64_t>);
}

TEST_CASE("ring: owner lists hold the primary and distinct replicas", "[cluster][ring]") {
    const std::vector<petrel::node_id> servers{10, 20, 30};
    const auto r = petrel::ring::balanced({.partitions = 64, .replicas = 2}, servers);
    std::map<petrel::node_id, int> primaries;
    for (std::uint32_t p = 0; p < 64; ++p) {
        const auto o = r.owners(p);
        REQUIRE(o.size() == 3);
        CHECK(std::set<petrel::node_id>(o.begin(), o.end()).size() == 3);
        ++primaries[o[0]];
    }
    for (auto id : servers) {
        CHECK(primaries[id] >= 21);
        CHECK(primaries[id] <= 22);
    }
    CHECK(r.primaries() == servers);
}

TEST_CASE("ring: the same options and servers give the same placement", "[cluster][ring]") {
    const std::vector<petrel::node_id> servers{1, 2, 3};
    const auto a = petrel::ring::balanced({}, servers);
    const auto b = petrel::ring::balanced({}, servers);
    CHECK(a == b);
    const auto c = petrel::ring::balanced({.seed = 99}, servers);
    int moved = 0;
    for (std::uint64_t k = 0; k < 100'000; k += 64) {
        CHECK(a.owner(k) == b.owner(k));
        moved += a.owner(k) != c.owner(k) ? 1 : 0;
    }
    CHECK(moved > 0); // the seed changes the placement
}

TEST_CASE("ring: bad options are refused with a clear error", "[cluster][ring]") {
    const std::vector<petrel::node_id> one{1};
    CHECK_THROWS_WITH(petrel::ring::balanced({.partitions = 1000}, one),
                      Catch::Contains("power of two"));
    CHECK_THROWS_WITH(petrel::ring::balanced({.stripe_keys = 3}, one),
                      Catch::Contains("power of two"));
    CHECK_THROWS_WITH(petrel::ring::balanced({.replicas = 1}, one), Catch::Contains("replicas"));
    CHECK_THROWS_WITH(petrel::ring::balanced({}, std::vector<petrel::node_id>{}),
                      Catch::Contains("no servers"));
    CHECK_THROWS_AS(petrel::ring({.partitions = 4}, std::vector<petrel::node_id>{1, 2}),
                    std::invalid_argument);
}

TEST_CASE("ring: failover hands a failed server's partitions to their replicas", "[cluster]") {
    const std::vector<petrel::node_id> all{1, 2, 3, 4};
    const auto r = petrel::ring::balanced({.partitions = 32, .replicas = 1}, all);
    const std::vector<petrel::node_id> live{1, 3, 4};
    const auto f = r.failover(live);
    CHECK(f.lost.empty());
    CHECK_FALSE(f.ring.holds(2));
    CHECK(f.ring.options().replicas == 1);
    std::map<petrel::node_id, std::vector<petrel::node_id>> chain_of;
    for (std::uint32_t p = 0; p < 32; ++p) {
        const auto before = r.owners(p);
        const auto after = f.ring.owners(p);
        INFO("partition " << p);
        // The first live owner leads; every partition again has two distinct owners.
        CHECK(after[0] == (before[0] == 2 ? before[1] : before[0]));
        CHECK(after[0] != after[1]);
        // One chain per primary.
        const std::vector<petrel::node_id> chain(after.begin(), after.end());
        auto [it, fresh] = chain_of.emplace(after[0], chain);
        CHECK(it->second == chain);
    }
    CHECK(chain_of.at(1) == std::vector<petrel::node_id>{1, 3});
    CHECK(chain_of.at(3) == std::vector<petrel::node_id>{3, 4});
    // Keys hash as before: only owner lists changed.
    CHECK(f.ring.partition_of(std::uint64_t{12345}) == r.partition_of(std::uint64_t{12345}));
}

TEST_CASE("ring: failover of every copy of a partition lists it as lost", "[cluster]") {
    const std::vector<petrel::node_id> all{1, 2, 3};
    const auto r = petrel::ring::balanced({.partitions = 8, .replicas = 1}, all);
    const std::vector<petrel::node_id> live{1};
    const auto f = r.failover(live);
    // Partitions of server 2 ([2, 3]) have no live copy; the others keep server 1.
    std::vector<std::uint32_t> expected;
    for (std::uint32_t p = 0; p < 8; ++p) {
        if (r.owners(p)[0] == 2) {
            expected.push_back(p);
        } else {
            CHECK(f.ring.owners(p)[0] == 1);
        }
    }
    CHECK(f.lost == expected);
    CHECK(f.ring.options().replicas == 0); // one server left holds one copy
    CHECK(f.ring.holds(2));                // lost partitions still name their owner
}

TEST_CASE("ring: a server without replicas hands its partitions over evenly, moving no other",
          "[cluster]") {
    const std::vector<petrel::node_id> servers{1, 2, 3, 4};
    const auto r = petrel::ring::balanced({.partitions = 64}, servers);
    const std::vector<petrel::node_id> live{1, 2, 4};
    const auto h = r.handed_over(3, live);
    std::map<petrel::node_id, int> held;
    int moved = 0;
    for (std::uint32_t p = 0; p < 64; ++p) {
        INFO("partition " << p);
        ++held[h.owners(p)[0]];
        if (r.owners(p)[0] == 3) {
            ++moved;
        } else {
            CHECK(h.owners(p)[0] == r.owners(p)[0]);
        }
    }
    CHECK(moved == 16);
    CHECK_FALSE(h.holds(3));
    CHECK(held.size() == 3);
    for (const auto id : live) {
        CHECK(held[id] >= 21);
        CHECK(held[id] <= 22);
    }
    CHECK(h.partition_of(std::uint64_t{999}) == r.partition_of(std::uint64_t{999}));
    // Nobody to hand over to, the leaving server among the live, or replicas: refused.
    CHECK_THROWS_AS(r.handed_over(3, std::vector<petrel::node_id>{}), std::invalid_argument);
    CHECK_THROWS_AS(r.handed_over(3, servers), std::invalid_argument);
    const auto k1 = petrel::ring::balanced({.partitions = 64, .replicas = 1}, servers);
    CHECK_THROWS_WITH(k1.handed_over(3, live), Catch::Contains("failover"));
}

TEST_CASE("ring: joining servers take an even share, moving the fewest partitions", "[cluster]") {
    const std::vector<petrel::node_id> live{1, 2, 3};
    const auto r = petrel::ring::balanced({.partitions = 64, .replicas = 1}, live);
    const std::vector<petrel::node_id> joiners{7};
    const auto j = r.joined(live, joiners);
    std::map<petrel::node_id, int> held;
    std::map<petrel::node_id, std::vector<petrel::node_id>> chain_of;
    int moved = 0;
    for (std::uint32_t p = 0; p < 64; ++p) {
        const auto before = r.owners(p);
        const auto after = j.owners(p);
        INFO("partition " << p);
        ++held[after[0]];
        if (after[0] != before[0]) {
            ++moved;
            CHECK(after[0] == 7); // only to the newcomer
        } else {
            CHECK(std::vector<petrel::node_id>(after.begin(), after.end()) ==
                  std::vector<petrel::node_id>(before.begin(), before.end()));
        }
        CHECK(after[0] != after[1]);
        // One chain per primary: the newcomer's replica is the server after it (1).
        const std::vector<petrel::node_id> chain(after.begin(), after.end());
        auto [it, fresh] = chain_of.emplace(after[0], chain);
        CHECK(it->second == chain);
    }
    CHECK(moved == 16);
    CHECK(held[7] == 16);
    for (const auto id : live) {
        CHECK(held[id] >= 15);
        CHECK(held[id] <= 17);
    }
    CHECK(chain_of.at(7) == std::vector<petrel::node_id>{7, 1});
    CHECK(j.partition_of(std::uint64_t{999}) == r.partition_of(std::uint64_t{999}));
    // Two at once share the moved partitions; a server on the ring cannot join again.
    const std::vector<petrel::node_id> two{7, 8};
    const auto j2 = r.joined(live, two);
    std::map<petrel::node_id, int> held2;
    for (std::uint32_t p = 0; p < 64; ++p) {
        ++held2[j2.owners(p)[0]];
    }
    CHECK(held2[7] == 12);
    CHECK(held2[8] == 12);
    const std::vector<petrel::node_id> again{2};
    CHECK_THROWS_AS(r.joined(live, again), std::invalid_argument);
    // More replicas than servers cannot be placed.
    const auto wide = petrel::ring::balanced({.partitions = 8, .replicas = 2}, live);
    const std::vector<petrel::node_id> two_live{1, 2};
    CHECK_THROWS_AS(wide.joined(std::vector<petrel::node_id>{}, joiners), std::invalid_argument);
    CHECK_NOTHROW(wide.joined(two_live, joiners));
}
