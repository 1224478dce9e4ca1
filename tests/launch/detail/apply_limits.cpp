#include <petrel/launch/detail/apply_limits.hpp>

#include <catch2/catch.hpp>

#include <chrono>

using namespace std::chrono_literals;
using petrel::detail::apply_limits;

TEST_CASE("apply_limits: what is set replaces the option; what is not keeps it",
          "[launch][security]") {
    const petrel::transport_options td;
    const petrel::server_options sd;
    const petrel::manager_options md;

    SECTION("nothing set: every default kept") {
        const petrel::process_limits none;
        auto t = td;
        auto s = sd;
        auto m = md;
        apply_limits(none, t);
        apply_limits(none, s);
        apply_limits(none, m);
        CHECK(t.max_accepted_connections == td.max_accepted_connections);
        CHECK(t.max_connections_per_address == td.max_connections_per_address);
        CHECK(t.idle_timeout == td.idle_timeout);
        CHECK(t.frame_timeout == td.frame_timeout);
        CHECK(t.max_receiving_bytes == td.max_receiving_bytes);
        CHECK(t.max_queued_reply_bytes == td.max_queued_reply_bytes);
        CHECK(t.max_cached_key_bytes == td.max_cached_key_bytes);
        CHECK(s.max_held_bytes == sd.max_held_bytes);
        CHECK(s.max_tables_per_connection == sd.max_tables_per_connection);
        CHECK(s.max_rows_per_connection == sd.max_rows_per_connection);
        CHECK(m.max_readers == md.max_readers);
        CHECK(m.departed_grace == md.departed_grace);
    }
    SECTION("each set one lands in its option, zero included") {
        const petrel::process_limits l{.max_connections = 7,
                                       .max_connections_per_address = 3,
                                       .idle_timeout = 0ms,
                                       .frame_timeout = 1500ms,
                                       .max_receiving_bytes = 1u << 20,
                                       .max_queued_reply_bytes = 0,
                                       .max_cached_key_bytes = 4096,
                                       .max_held_bytes = 1u << 16,
                                       .max_tables_per_connection = 5,
                                       .max_rows_per_connection = 100,
                                       .max_readers = 2,
                                       .departed_grace = 250ms};
        auto t = td;
        t.idle_timeout = 9ms; // set to 0 by the limits
        auto s = sd;
        auto m = md;
        apply_limits(l, t);
        apply_limits(l, s);
        apply_limits(l, m);
        CHECK(t.max_accepted_connections == 7);
        CHECK(t.max_connections_per_address == 3);
        CHECK(t.idle_timeout == 0ms);
        CHECK(t.frame_timeout == 1500ms);
        CHECK(t.max_receiving_bytes == 1u << 20);
        CHECK(t.max_queued_reply_bytes == 0);
        CHECK(t.max_cached_key_bytes == 4096);
        CHECK(t.max_send_queue_bytes == td.max_send_queue_bytes); // no option: kept
        CHECK(s.max_held_bytes == 1u << 16);
        CHECK(s.max_tables_per_connection == 5);
        CHECK(s.max_rows_per_connection == 100);
        CHECK(s.max_parked == sd.max_parked); // no option: kept
        CHECK(m.max_readers == 2);
        CHECK(m.departed_grace == 250ms);
    }
}
