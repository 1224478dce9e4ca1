#include <petrel/launch/limits.hpp>

#include <catch2/catch.hpp>

#include <chrono>

using namespace std::chrono_literals;

TEST_CASE("process_limits: none is set by default; limits compare by what they set",
          "[launch][security]") {
    const petrel::process_limits none;
    CHECK_FALSE(none.max_connections);
    CHECK_FALSE(none.max_connections_per_address);
    CHECK_FALSE(none.idle_timeout);
    CHECK_FALSE(none.frame_timeout);
    CHECK_FALSE(none.max_receiving_bytes);
    CHECK_FALSE(none.max_queued_reply_bytes);
    CHECK_FALSE(none.max_cached_key_bytes);
    CHECK_FALSE(none.max_held_bytes);
    CHECK_FALSE(none.max_tables_per_connection);
    CHECK_FALSE(none.max_rows_per_connection);
    CHECK_FALSE(none.max_readers);
    CHECK_FALSE(none.departed_grace);
    petrel::process_limits some;
    some.departed_grace = 0ms; // set to zero is not unset
    CHECK_FALSE(some == none);
    some.departed_grace.reset();
    CHECK(some == none);
}
