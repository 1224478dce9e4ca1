#include <petrel/server/detail/table_set.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <system_error>

using petrel::detail::table_set;

TEST_CASE("table_set: a table is made on first mention, declared ones with their storage and "
          "spec",
          "[server]") {
    auto declared = std::make_shared<petrel::table_registry>();
    declared->add<std::uint64_t, float>(
        1, {.width = 4, .aggregate = petrel::aggregation::mean, .replicas = 0});
    table_set tables(3, 8, declared);
    CHECK(tables.size() == 0);
    CHECK(tables.workers() == 3);
    std::error_code ec;
    auto* one = tables.slot(1, ec);
    REQUIRE(one);
    CHECK_FALSE(ec);
    REQUIRE(one->table);
    CHECK(one->table->width() == 4);
    CHECK(one->mean);
    CHECK(one->replicas == 0);
    CHECK(one->gate.workers() == 3);
    CHECK(tables.slot(1, ec) == one); // the same table again
    auto* two = tables.slot(2, ec);   // not declared: storage comes with its first push
    REQUIRE(two);
    CHECK_FALSE(two->table);
    CHECK_FALSE(two->mean);
    CHECK(two->replicas == 7);
    CHECK(tables.size() == 2);
    CHECK(tables.find(2) != tables.end());
    CHECK(tables.find(3) == tables.end());
}

TEST_CASE("table_set: no more tables than its limit", "[server]") {
    table_set tables(1, 2, nullptr);
    std::error_code ec;
    CHECK(tables.slot(5, ec));
    CHECK(tables.slot(6, ec));
    CHECK_FALSE(ec);
    CHECK_FALSE(tables.slot(7, ec));
    CHECK(ec == petrel::errc::too_many_tables);
    ec.clear();
    CHECK(tables.slot(5, ec)); // one it holds is still found
    CHECK_FALSE(ec);
}

TEST_CASE("table_set: a connection creates at most its share of the tables; the server's own "
          "are not counted, and a connection forgotten starts afresh",
          "[server][security]") {
    table_set tables(1, 6, nullptr, 2);
    const auto* a = reinterpret_cast<const petrel::connection*>(std::uintptr_t{0x1000});
    const auto* b = reinterpret_cast<const petrel::connection*>(std::uintptr_t{0x2000});
    std::error_code ec;
    CHECK(tables.slot(1, ec, a));
    CHECK(tables.slot(2, ec, a));
    CHECK(tables.created_by(a) == 2);
    CHECK_FALSE(tables.slot(3, ec, a));
    CHECK(ec == petrel::errc::too_many_tables);
    ec.clear();
    CHECK(tables.slot(2, ec, a)); // one it holds is still found, and not counted again
    CHECK(tables.slot(2, ec, b));
    CHECK(tables.created_by(a) == 2);
    CHECK(tables.created_by(b) == 0);
    CHECK(tables.slot(3, ec, b));
    CHECK(tables.slot(4, ec)); // the server's own: not a connection's
    CHECK_FALSE(ec);
    tables.forget(a);
    CHECK(tables.created_by(a) == 0);
    CHECK(tables.slot(5, ec, a));
    CHECK(tables.slot(6, ec, a));
    CHECK_FALSE(tables.slot(7, ec, b)); // the whole limit
    CHECK(ec == petrel::errc::too_many_tables);
    CHECK(tables.size() == 6);
}

TEST_CASE("table_set: workers that join or leave do so in every table, also the ones made later",
          "[server]") {
    table_set tables(2, 8, nullptr);
    std::error_code ec;
    auto* before = tables.slot(1, ec);
    REQUIRE(before);
    tables.depart(1);
    tables.depart(9);         // not counted: nothing changes
    tables.add_worker(true);  // worker 2 left before this server learned of it
    tables.add_worker(false); // worker 3 joins
    CHECK(tables.workers() == 4);
    auto* after = tables.slot(2, ec);
    REQUIRE(after);
    for (auto* s : {before, after}) {
        CHECK(s->gate.workers() == 4);
        CHECK_FALSE(s->gate.departed(0));
        CHECK(s->gate.departed(1));
        CHECK(s->gate.departed(2));
        CHECK_FALSE(s->gate.departed(3));
    }
}
