#include <petrel/launch/layout.hpp>

#include <catch2/catch.hpp>

using petrel::layout;
using petrel::worker_failure;

TEST_CASE("layout: names", "[launch]") {
    STATIC_REQUIRE(petrel::to_string(layout::dedicated) == "dedicated");
    STATIC_REQUIRE(petrel::to_string(layout::colocated) == "colocated");
    STATIC_REQUIRE(petrel::parse_layout("colocated") == layout::colocated);
    CHECK(petrel::parse_layout("dedicated") == layout::dedicated);
    CHECK_FALSE(petrel::parse_layout("Dedicated").has_value());
    CHECK_FALSE(petrel::parse_layout("").has_value());
}

TEST_CASE("layout: what a failed worker does, by name", "[launch]") {
    STATIC_REQUIRE(petrel::to_string(worker_failure::fail) == "fail");
    STATIC_REQUIRE(petrel::to_string(worker_failure::drop) == "drop");
    CHECK(petrel::parse_worker_failure("drop") == worker_failure::drop);
    CHECK(petrel::parse_worker_failure("fail") == worker_failure::fail);
    CHECK_FALSE(petrel::parse_worker_failure("Drop").has_value());
    CHECK_FALSE(petrel::parse_worker_failure("").has_value());
}
