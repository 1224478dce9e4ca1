#include <petrel/consistency/clock_gate.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace {

using gate_t = petrel::clock_gate<int>;
using range = gate_t::range_type;
const range all = gate_t::all();

} // namespace

TEST_CASE("clock_gate: ticks raise a worker's clock on a range, never lower it",
          "[consistency][clock_gate]") {
    gate_t g(3);
    CHECK(g.completed(all) == 0);
    g.tick(0, all, 1);
    g.tick(1, all, 1);
    CHECK(g.completed(all) == 0); // worker 2 is still at 0
    g.tick(2, {0, 100}, 1);
    CHECK(g.completed({0, 100}) == 1);
    CHECK(g.completed({0, 101}) == 0);
    CHECK(g.clock().range_count() == 2); // split only where the clocks differ
    g.tick(2, {100, petrel::key_space_end<std::uint64_t>}, 1);
    CHECK(g.clock().range_count() == 1); // and merged again
    g.tick(0, all, 0);                   // an older tick changes nothing
    CHECK(g.completed(all) == 1);
    CHECK_THROWS_AS(g.tick(3, all, 1), std::out_of_range);
}

TEST_CASE("clock_gate: held pushes are released in clock, then worker, then arrival order",
          "[consistency][clock_gate]") {
    gate_t g(3);
    // Arrival order is scrambled; the release order must not depend on it.
    g.hold(2, 0, {0, 10}, 20);
    g.hold(1, 1, {0, 10}, 11);
    g.hold(0, 0, {0, 10}, 0);
    g.hold(1, 0, {0, 10}, 10);
    g.hold(0, 0, {0, 10}, 1); // a second push of worker 0 at clock 0
    CHECK(g.release().pushes.empty());
    for (std::uint32_t w = 0; w < 3; ++w) {
        g.tick(w, all, 1);
    }
    CHECK(g.release().pushes == std::vector<int>{0, 1, 10, 20}); // clock 0 only
    CHECK(g.held() == 1);
    for (std::uint32_t w = 0; w < 3; ++w) {
        g.tick(w, all, 2);
    }
    CHECK(g.release().pushes == std::vector<int>{11});
}

TEST_CASE("clock_gate: a push waits only behind earlier pushes that overlap its keys",
          "[consistency][clock_gate]") {
    gate_t g(2);
    g.hold(0, 0, {0, 10}, 1);  // waits: worker 1 has not completed clock 0 on [0, 10)
    g.hold(1, 0, {5, 20}, 2);  // overlaps the first: must wait behind it
    g.hold(1, 0, {50, 60}, 3); // unrelated keys
    g.tick(0, all, 1);
    g.tick(1, {20, 100}, 1); // worker 1 completed clock 0 only on [20, 100)
    CHECK(g.release().pushes == std::vector<int>{3});
    g.tick(1, {0, 20}, 1);
    CHECK(g.release().pushes == std::vector<int>{1, 2});
}

TEST_CASE("clock_gate: reads wait for the clock and for held pushes of earlier clocks",
          "[consistency][clock_gate]") {
    gate_t g(2);
    CHECK(g.readable({0, 10}, 0)); // eventual reads never wait
    CHECK_FALSE(g.readable({0, 10}, 1));
    g.hold(0, 0, {0, 10}, 100);
    g.park({0, 10}, 1, 7);
    g.park({20, 30}, 2, 8);
    g.tick(0, all, 1);
    auto r = g.release();
    CHECK(r.pushes.empty());
    CHECK(r.reads.empty());
    g.tick(1, all, 1);
    r = g.release();
    CHECK(r.pushes == std::vector<int>{100}); // applied first...
    CHECK(r.reads == std::vector<int>{7});    // ...then the read that needed it
    CHECK(g.parked() == 1);
    // A held push of clock 1 does not hold back a read that needs clock 1.
    g.hold(1, 1, {20, 30}, 200);
    CHECK_FALSE(g.readable({20, 30}, 2));
    g.tick(0, all, 2);
    g.tick(1, all, 2);
    r = g.release();
    CHECK(r.pushes == std::vector<int>{200});
    CHECK(r.reads == std::vector<int>{8});
}

TEST_CASE("clock_gate: a departed worker holds nobody back", "[consistency][clock_gate]") {
    gate_t g(2);
    g.hold(0, 0, {0, 10}, 1);
    g.park({0, 10}, 1, 2);
    g.tick(0, all, 1);
    CHECK(g.release().reads.empty());
    g.depart(1);
    CHECK(g.departed(1));
    const auto r = g.release();
    CHECK(r.pushes == std::vector<int>{1});
    CHECK(r.reads == std::vector<int>{2});
    g.tick(1, all, 3); // a departed worker stays departed
    CHECK(g.clock().get(0, 1) == petrel::departed_clock);
    g.depart(0);
    CHECK(g.completed(all) == petrel::departed_clock);
}

TEST_CASE("clock_gate: entries report each worker's clock per range, clipped",
          "[consistency][clock_gate]") {
    gate_t g(2);
    g.tick(0, {0, 100}, 3);
    auto e = g.entries({50, 150}, 100);
    // [50, 100) with clocks {3, 0} and [100, 150) with {0, 0}.
    REQUIRE(e.size() == 4);
    CHECK(e[0] == petrel::clock_entry{50, 100, 0, 3});
    CHECK(e[1] == petrel::clock_entry{50, 100, 1, 0});
    CHECK(e[2] == petrel::clock_entry{100, 150, 0, 0});
    CHECK(e[3] == petrel::clock_entry{100, 150, 1, 0});
    // Too many for the limit: one entry per worker with its smallest clock.
    e = g.entries({50, 150}, 3);
    REQUIRE(e.size() == 2);
    CHECK(e[0] == petrel::clock_entry{50, 150, 0, 0});
    CHECK(e[1] == petrel::clock_entry{50, 150, 1, 0});
    CHECK(g.entries({50, 150}, 1).empty());
}

TEST_CASE("clock_gate: remove_if takes the requests of a closed connection",
          "[consistency][clock_gate]") {
    gate_t g(1);
    g.park({0, 10}, 5, 1);
    g.park({0, 10}, 5, 2);
    g.hold(0, 4, {0, 10}, 3);
    const auto gone = g.remove_if([](int r) { return r != 2; });
    CHECK(gone == std::vector<int>{3, 1});
    CHECK(g.parked() == 1);
    CHECK(g.held() == 0);
}
