#include <petrel/server/detail/migration.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using petrel::replication_plan;
using petrel::detail::migration;

replication_plan::peer peer(std::uint32_t id) {
    return {id, "127.0.0.1:" + std::to_string(9000 + id)};
}

/// Servers 1, 2 and 3 own partitions 0, 1 and 2; server 4 joins and learns partition 2
/// from server 3.
replication_plan joining() {
    replication_plan p;
    p.version = 5;
    p.chains[1] = {peer(1)};
    p.chains[2] = {peer(2)};
    p.chains[3] = {peer(3)};
    p.partition_of = [](std::uint64_t k) { return static_cast<std::uint32_t>(k % 3); };
    p.primaries = {1, 2, 3};
    p.next_primaries = {1, 2, 4};
    p.learners = {peer(4)};
    return p;
}

/// The plan after the join: server 4 owns partition 2; `with_3` whether server 3 is alive.
replication_plan joined(bool with_3 = true) {
    replication_plan p;
    p.version = 6;
    p.chains[1] = {peer(1)};
    p.chains[2] = {peer(2)};
    if (with_3) {
        p.chains[3] = {peer(3)};
    }
    p.chains[4] = {peer(4)};
    p.partition_of = [](std::uint64_t k) { return static_cast<std::uint32_t>(k % 3); };
    p.primaries = {1, 2, 4};
    return p;
}

using parts = migration::partitions;

} // namespace

TEST_CASE("migration: a primary copies moving partitions, then hands them over", "[server]") {
    migration m;
    auto first = m.follow({}, joining(), 3);
    REQUIRE(first.copies.size() == 1);
    CHECK(first.copies[0].to == 4);
    CHECK(first.copies[0].parts == parts{2});
    CHECK(first.hand_overs.empty());
    CHECK(m.learners().at(4) == parts{2});
    CHECK(m.hand_over_ready(5) == 0); // the copy's end is not acknowledged yet
    // An answer for other partitions (an older plan's copy) changes nothing.
    CHECK_FALSE(m.copy_answered(4, parts{0, 2}, 4, true));
    CHECK(m.hand_over_ready(5) == 0);
    CHECK(m.copy_answered(4, parts{2}, 5, false)); // failed: worth sending again
    CHECK_FALSE(m.copy_answered(4, parts{2}, 5, true));
    CHECK(m.hand_over_ready(5) == 5);

    // The same plan again (a newer version): the copy stands.
    auto again = joining();
    again.version = 6;
    auto same = m.follow(joining(), again, 3);
    CHECK(same.copies.empty());
    CHECK(m.hand_over_ready(6) == 6);

    // The plan that makes 4 the owner: the hand-over.
    auto after = m.follow(again, joined(), 3);
    REQUIRE(after.hand_overs.size() == 1);
    CHECK(after.hand_overs[0].to == 4);
    CHECK(after.hand_overs[0].parts == parts{2});
    CHECK_FALSE(after.hand_overs[0].copy_again);
    CHECK(after.copies.empty());
    CHECK(m.handing_over());
    CHECK(m.learners().empty());
    CHECK(m.hand_over_ready(6) == 0);
    m.hand_over_answered(4, false, false); // failed: it is sent again
    CHECK(m.handing_over());
    m.hand_over_answered(4, true, false);
    CHECK_FALSE(m.handing_over());
}

TEST_CASE("migration: what did not reach a learner is copied again before the hand-over",
          "[server]") {
    migration m;
    (void)m.follow({}, joining(), 3);
    m.failed(4); // an update sent to it was lost
    auto after = m.follow(joining(), joined(), 3);
    REQUIRE(after.hand_overs.size() == 1);
    CHECK(after.hand_overs[0].copy_again);
    CHECK_FALSE(m.take_failed(4)); // taken by the hand-over
    // A hand-over that failed: a failure meanwhile asks for another copy first.
    m.failed(4);
    CHECK(m.take_failed(4));
    CHECK_FALSE(m.take_failed(4));
    m.hand_over_answered(4, false, true); // the last attempt: nobody waits any more
    CHECK_FALSE(m.handing_over());
}

TEST_CASE("migration: a new copy forgets the old one's failures and acknowledgement", "[server]") {
    migration m;
    (void)m.follow({}, joining(), 3);
    CHECK_FALSE(m.copy_answered(4, parts{2}, 5, true));
    m.failed(4);
    auto more = joining();
    more.version = 6;
    more.next_primaries = {4, 2, 4}; // now partitions 2 and 0 move, from 1 and 3
    more.primaries = {3, 2, 3};
    auto next = m.follow(joining(), more, 3);
    REQUIRE(next.copies.size() == 1);
    CHECK(next.copies[0].parts == parts{0, 2});
    CHECK(m.hand_over_ready(6) == 0);
    CHECK_FALSE(m.take_failed(4));
}

TEST_CASE("migration: a joining server learns, then waits for the hand-over", "[server]") {
    migration m;
    auto first = m.follow({}, joining(), 4);
    CHECK(first.copies.empty());
    CHECK(first.hand_overs.empty());
    CHECK(m.learns_from(3));
    CHECK_FALSE(m.learns_from(1));
    CHECK(m.join_ready(5) == 0);
    m.copy_ended(3, 4); // the end of a copy made for an older plan
    CHECK(m.join_ready(5) == 0);
    CHECK_FALSE(m.taught_by(3));
    m.copy_ended(3, 5);
    CHECK(m.join_ready(5) == 5);
    CHECK(m.taught_by(3));
    CHECK_FALSE(m.awaiting_hand_over());

    (void)m.follow(joining(), joined(), 4);
    CHECK(m.awaiting_hand_over());
    CHECK(m.learns_from(3)); // its last updates still come
    // A copy down the chain waits for the hand-over.
    CHECK(m.defer_chain_copy());
    CHECK_FALSE(m.take_chain_copy());
    CHECK(m.handed_over(3));
    CHECK_FALSE(m.awaiting_hand_over());
    CHECK_FALSE(m.learns_from(3));
    CHECK(m.take_chain_copy());
    CHECK_FALSE(m.take_chain_copy());
    CHECK_FALSE(m.defer_chain_copy()); // nothing awaited: copy at once
}

TEST_CASE("migration: a teacher that left sends no hand-over to wait for", "[server]") {
    migration m;
    (void)m.follow({}, joining(), 4);
    m.copy_ended(3, 5);
    (void)m.follow(joining(), joined(false), 4);
    CHECK_FALSE(m.awaiting_hand_over());
    CHECK_FALSE(m.learns_from(3));
    CHECK(m.join_ready(6) == 0);
}
