#include <petrel/server/replication_plan.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <system_error>
#include <vector>

namespace {

using petrel::replication_plan;

/// Servers 1, 2 and 3, each the primary of one of three partitions (key % 3), each chain
/// holding the two servers after its primary; server 4 joins and takes partition 2 over.
replication_plan three_server_plan() {
    replication_plan p;
    p.version = 5;
    auto peer = [](std::uint32_t id) {
        return replication_plan::peer{id, "127.0.0.1:" + std::to_string(9000 + id)};
    };
    p.chains[1] = {peer(1), peer(2), peer(3)};
    p.chains[2] = {peer(2), peer(3), peer(1)};
    p.chains[3] = {peer(3), peer(1), peer(2)};
    p.partition_of = [](std::uint64_t k) { return static_cast<std::uint32_t>(k % 3); };
    p.primaries = {1, 2, 3};
    p.next_primaries = {1, 2, 4};
    p.learners = {peer(4)};
    return p;
}

} // namespace

TEST_CASE("replication_plan: chains and learners name their servers", "[server]") {
    const auto p = three_server_plan();
    REQUIRE(petrel::peer_of(p, 2) != nullptr);
    CHECK(petrel::peer_of(p, 2)->address == "127.0.0.1:9002");
    REQUIRE(petrel::peer_of(p, 4) != nullptr); // a learner
    CHECK(petrel::peer_of(p, 4)->address == "127.0.0.1:9004");
    CHECK(petrel::peer_of(p, 5) == nullptr);
    CHECK(petrel::chain_ids(p, 2) == std::vector<std::uint32_t>{2, 3, 1});
    CHECK(petrel::chain_ids(p, 4).empty());
    CHECK(petrel::replicates(p, 1, 3));
    CHECK_FALSE(petrel::replicates(p, 1, 1)); // the primary is no replica of itself
    CHECK_FALSE(petrel::replicates(p, 4, 1));
}

TEST_CASE("replication_plan: the next hop of a chain, up to a table's replicas", "[server]") {
    const auto p = three_server_plan();
    std::error_code ec;
    // Primary 1's chain is 1, 2, 3.
    REQUIRE(petrel::next_hop(p, 1, 1, 7, ec) != nullptr);
    CHECK(petrel::next_hop(p, 1, 1, 7, ec)->id == 2);
    CHECK(petrel::next_hop(p, 2, 1, 7, ec)->id == 3);
    CHECK(petrel::next_hop(p, 3, 1, 7, ec) == nullptr); // the tail
    CHECK(petrel::next_hop(p, 2, 1, 1, ec) == nullptr); // a table of one replica ends at 2
    CHECK(petrel::next_hop(p, 1, 1, 0, ec) == nullptr); // no replicas
    CHECK_FALSE(ec);
    // Server 4 is on no chain: an update from primary 1 reaching it is refused.
    CHECK(petrel::next_hop(p, 4, 1, 7, ec) == nullptr);
    CHECK(ec == petrel::errc::stale_view);
    ec = {};
    CHECK(petrel::next_hop(p, 1, 2, 7, ec) == nullptr); // 1 is the tail of 2's chain
    CHECK_FALSE(ec);
    // A chain that does not start at its primary: the primary's place is stale.
    auto moved = p;
    moved.chains[1] = {{2, "b"}, {1, "a"}};
    CHECK(petrel::next_hop(moved, 1, 1, 7, ec) == nullptr);
    CHECK(ec == petrel::errc::stale_view);
    ec = {};
    // A primary without a chain replicates nowhere; anyone else's update is stale.
    replication_plan none;
    CHECK(petrel::next_hop(none, 1, 1, 7, ec) == nullptr);
    CHECK_FALSE(ec);
    CHECK(petrel::next_hop(none, 1, 2, 7, ec) == nullptr);
    CHECK(ec == petrel::errc::stale_view);
}

TEST_CASE("replication_plan: partitions gained, given up and moving to joining servers",
          "[server]") {
    const auto before = three_server_plan();
    CHECK(petrel::primary_of_partition(before, 3, 2));
    CHECK_FALSE(petrel::primary_of_partition(before, 3, 1));
    CHECK_FALSE(petrel::primary_of_partition(before, 3, 3)); // beyond the partitions
    auto after = before;
    after.version = 6;
    after.primaries = {1, 2, 4};
    after.next_primaries.clear();
    CHECK(petrel::gives_up(before, after, 3));
    CHECK_FALSE(petrel::gives_up(before, after, 4));
    CHECK(petrel::gains(before, after, 4));
    CHECK_FALSE(petrel::gains(before, after, 1));
    CHECK_FALSE(petrel::gains(before, before, 3));
    // While 4 joins, partition 2 moves from 3 to it.
    using moves = std::map<std::uint32_t, std::vector<std::uint32_t>>;
    CHECK(petrel::moving_from(before, 3) == moves{{4, {2}}});
    CHECK(petrel::moving_to(before, 4) == moves{{3, {2}}});
    CHECK(petrel::moving_from(before, 1).empty());
    CHECK(petrel::moving_to(after, 4).empty()); // no server joins any more
}
