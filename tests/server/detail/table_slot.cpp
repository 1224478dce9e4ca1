#include <petrel/server/detail/table_slot.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>

using petrel::detail::table_slot;
using all = petrel::clock_gate<petrel::detail::waiting_request>;

TEST_CASE("table_slot: the durable clock waits for every server the rows went to", "[server]") {
    table_slot s(2);
    CHECK(s.durable() == 0);
    s.gate.tick(0, all::all(), 3);
    s.gate.tick(1, all::all(), 3);
    CHECK(s.durable() == 3); // no copies: complete here is durable
    // Clock 1's rows went to two servers, clock 2's to one (clocks resent late leave the
    // queue out of order).
    s.unacked = {2, 1, 1};
    CHECK(s.durable() == 1);
    s.acknowledged(1);
    CHECK(s.durable() == 1); // one server has not acknowledged clock 1 yet
    s.acknowledged(1);
    CHECK(s.durable() == 2);
    s.acknowledged(7); // never sent: nothing changes
    CHECK(s.durable() == 2);
    s.acknowledged(2);
    CHECK(s.durable() == 3);
    CHECK(s.unacked.empty());
}

TEST_CASE("table_slot: after a takeover, ordered reads wait for each live worker's resync",
          "[server]") {
    table_slot s(3);
    s.depart(2); // gone before the takeover: not waited for
    const auto now = table_slot::clock::now();
    s.await_resync(5, 3, now);
    CHECK(s.resync_view == 5);
    CHECK(s.resync_since == now);
    CHECK(s.resync_pending == std::set<std::uint32_t>{0, 1});
    CHECK(s.resync_holds(4));
    CHECK_FALSE(s.resync_holds(0)); // an unordered read waits for nothing
    s.resynced(0, 4);               // a tick sent under an older view does not count
    CHECK(s.resync_pending.count(0) == 1);
    s.resynced(0, 5);
    CHECK(s.resync_pending == std::set<std::uint32_t>{1});
    s.depart(1); // leaves instead: nobody waits for it
    CHECK(s.resync_pending.empty());
    CHECK_FALSE(s.resync_holds(4));
    CHECK(s.gate.departed(1));
}
