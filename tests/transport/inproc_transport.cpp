#include <petrel/transport/inproc_transport.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"

#include <asio/post.hpp>
#include <asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::inproc_hub;
using petrel::inproc_transport;
using petrel::test::bytes_of;
using petrel::test::drain;
using petrel::test::events;
using petrel::test::io_threads;
using petrel::test::log_capture;
using petrel::test::ready;
using petrel::test::timeout;
namespace wire = petrel::wire;

namespace {

/// A valid pull of `keys` (u64) with request id `id`.
wire::message make_pull(std::uint64_t id, const std::vector<std::uint64_t>& keys) {
    wire::message m;
    m.header.kind = wire::message_kind::pull;
    m.header.request_id = id;
    m.header.key_count = keys.size();
    m.header.range_begin = 0;
    m.header.range_end = std::numeric_limits<std::uint64_t>::max();
    m.set_segment(wire::keys_segment, bytes_of(keys));
    return m;
}

/// A push whose keys are out of order: valid header, invalid payload.
wire::message make_unsorted_push() {
    wire::message m;
    m.header.kind = wire::message_kind::push;
    m.header.key_count = 2;
    m.header.range_begin = 0;
    m.header.range_end = 100;
    m.set_segment(wire::keys_segment, bytes_of(std::vector<std::uint64_t>{3, 1}));
    m.set_segment(wire::values_segment, bytes_of(std::vector<float>{1, 2}));
    return m;
}

petrel::connection_ptr connect(inproc_transport& t, const std::string& name,
                               petrel::connection_handlers h) {
    auto f = t.async_connect(name, std::move(h), asio::use_future);
    REQUIRE(ready(f));
    auto c = f.get();
    REQUIRE(c);
    return c;
}

} // namespace

TEST_CASE("inproc_transport: listen returns the explicit name or a unique one",
          "[transport][inproc]") {
    io_threads io;
    inproc_hub hub;
    inproc_transport t(io.executor(), hub);
    CHECK(t.listen("server-a", {}) == "server-a");
    const auto auto1 = t.listen("", {});
    const auto auto2 = t.listen("", {});
    CHECK_FALSE(auto1.empty());
    CHECK_FALSE(auto2.empty());
    CHECK(auto1 != auto2);
    CHECK(auto1 != "server-a");

    // The generated names are reachable like explicit ones.
    inproc_transport client(io.executor(), hub);
    CHECK(connect(client, auto2, {})->is_open());
    CHECK(connect(client, "server-a", {})->is_open());
}

TEST_CASE("inproc_transport: a taken name throws", "[transport][inproc]") {
    io_threads io;
    inproc_hub hub;
    inproc_transport a(io.executor(), hub);
    inproc_transport b(io.executor(), hub);
    a.listen("node", {});
    try {
        b.listen("node", {});
        FAIL("listen on a taken name did not throw");
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::invalid_argument);
        CHECK_THAT(e.what(), Catch::Contains("node"));
    }
    CHECK_THROWS_AS(a.listen("node", {}), std::system_error);

    SECTION("the name is free again once its transport closed") {
        a.close();
        CHECK(b.listen("node", {}) == "node");
    }
    SECTION("a closed transport does not listen") {
        a.close();
        CHECK_THROWS_AS(a.listen("other", {}), std::system_error);
    }
}

TEST_CASE("inproc_transport: connecting to an unknown name fails", "[transport][inproc]") {
    io_threads io;
    inproc_hub hub;
    inproc_transport t(io.executor(), hub);
    auto f = t.async_connect("nobody", {}, asio::use_future);
    REQUIRE(ready(f));
    try {
        (void)f.get();
        FAIL("connect to an unknown name succeeded");
    } catch (const std::system_error& e) {
        CHECK(e.code() == std::errc::connection_refused);
    }

    SECTION("the callback form reports the error") {
        std::promise<std::error_code> p;
        auto got = p.get_future();
        t.async_connect("nobody", {}, [&p](std::error_code ec, petrel::connection_ptr c) {
            p.set_value(c ? std::error_code{} : ec);
        });
        REQUIRE(ready(got));
        CHECK(got.get() == std::errc::connection_refused);
    }
    SECTION("a closed transport does not connect") {
        inproc_transport server(io.executor(), hub);
        server.listen("srv", {});
        t.close();
        auto g = t.async_connect("srv", {}, asio::use_future);
        REQUIRE(ready(g));
        CHECK_THROWS_AS(g.get(), std::system_error);
    }
}

TEST_CASE("inproc_transport: messages arrive in the order they were sent", "[transport][inproc]") {
    events got;
    io_threads io(2);
    inproc_hub hub;
    inproc_transport server(io.executor(), hub);
    inproc_transport client(io.executor(), hub);
    constexpr std::uint64_t count = 1000;
    got.expected_messages = count;
    auto all = got.all_messages.get_future();
    const auto name = server.listen("", got.handlers());
    auto c = connect(client, name, {});
    for (std::uint64_t i = 0; i < count; ++i) {
        c->send(make_pull(i, {i, i + 1}));
    }
    REQUIRE(ready(all));
    CHECK(got.first_close() == std::error_code{});
    std::lock_guard lock(got.mutex);
    REQUIRE(got.messages.size() == count);
    for (std::uint64_t i = 0; i < count; ++i) {
        CHECK(got.messages[i].header.request_id == i);
        CHECK(got.messages[i].keys().as<std::uint64_t>()[1] == i + 1);
    }
    // Every message of one connection comes with the same connection object.
    for (const auto* conn : got.senders) {
        CHECK(conn == got.senders.front());
    }
}

TEST_CASE("inproc_transport: payloads are shared, not copied", "[transport][inproc]") {
    events got;
    io_threads io;
    inproc_hub hub;
    inproc_transport server(io.executor(), hub);
    inproc_transport client(io.executor(), hub);
    got.expected_messages = 1;
    auto one = got.all_messages.get_future();
    auto c = connect(client, server.listen("", got.handlers()), {});
    auto m = make_pull(7, {1, 2, 3});
    const auto* sent = m.keys().data();
    c->send(m);
    REQUIRE(ready(one));
    std::lock_guard lock(got.mutex);
    CHECK(got.messages.front().keys().data() == sent);
    CHECK(got.messages.front().header == m.header);
}

TEST_CASE("inproc_transport: replies travel back on the same connection", "[transport][inproc]") {
    events at_server;
    events at_client;
    io_threads io(2);
    inproc_hub hub;
    inproc_transport server(io.executor(), hub);
    inproc_transport client(io.executor(), hub);
    at_server.echo = true;
    at_server.expected_messages = 10;
    at_client.expected_messages = 10;
    auto replies = at_client.all_messages.get_future();
    auto c = connect(client, server.listen("", at_server.handlers()), at_client.handlers());
    for (std::uint64_t i = 0; i < 10; ++i) {
        c->send(make_pull(100 + i, {i}));
    }
    REQUIRE(ready(replies));
    std::lock_guard lock(at_client.mutex);
    for (std::uint64_t i = 0; i < 10; ++i) {
        CHECK(at_client.messages[i].header.kind == wire::message_kind::push_reply);
        CHECK(at_client.messages[i].header.request_id == 100 + i);
    }
}

TEST_CASE("inproc_transport: an invalid message closes the receiver's connection and is logged",
          "[transport][inproc]") {
    log_capture log;
    events at_server;
    events at_client;
    io_threads io;
    inproc_hub hub;
    inproc_transport server(io.executor(), hub, {.log = log.logger()});
    inproc_transport client(io.executor(), hub);
    at_server.expected_messages = 1;
    auto server_closed = at_server.closed.get_future();
    auto client_closed = at_client.closed.get_future();
    auto c = connect(client, server.listen("", at_server.handlers()), at_client.handlers());

    c->send(make_pull(1, {5}));    // valid: delivered
    c->send(make_unsorted_push()); // invalid: the receiver closes
    c->send(make_pull(2, {6}));    // after the invalid one: never delivered
    REQUIRE(ready(server_closed));
    REQUIRE(ready(client_closed));
    drain(io);

    CHECK(at_server.first_close() == errc::keys_not_sorted);
    CHECK(at_client.first_close() == errc::connection_closed);
    CHECK(at_server.close_count() == 1);
    CHECK(at_client.close_count() == 1);
    {
        std::lock_guard lock(at_server.mutex);
        REQUIRE(at_server.messages.size() == 1);
        CHECK(at_server.messages[0].header.request_id == 1);
    }
    CHECK_FALSE(c->is_open());
    REQUIRE(log.size() == 1);
    CHECK_THAT(log.all(), Catch::Contains("invalid message"));
    CHECK_THAT(log.all(),
               Catch::Contains(petrel::make_error_code(errc::keys_not_sorted).message()));
}

TEST_CASE("inproc_transport: messages are checked against the receiver's limits",
          "[transport][inproc]") {
    events at_server;
    io_threads io;
    inproc_hub hub;
    petrel::transport_options small;
    small.limits.max_frame_bytes = 64;
    small.log = {};
    inproc_transport server(io.executor(), hub, small);
    inproc_transport client(io.executor(), hub); // its own limits are the defaults
    at_server.expected_messages = 1;
    auto first = at_server.all_messages.get_future();
    auto closed = at_server.closed.get_future();
    auto c = connect(client, server.listen("", at_server.handlers()), {});
    c->send(make_pull(1, {0, 1, 2, 3, 4, 5, 6, 7})); // 64 bytes of keys: at the limit
    REQUIRE(ready(first));
    c->send(make_pull(2, {0, 1, 2, 3, 4, 5, 6, 7, 8})); // 72 bytes: over it
    REQUIRE(ready(closed));
    CHECK(at_server.first_close() == errc::frame_too_large);
}

TEST_CASE("inproc_transport: close runs on_close exactly once on both ends",
          "[transport][inproc]") {
    events at_server;
    events at_client;
    io_threads io;
    inproc_hub hub;
    inproc_transport server(io.executor(), hub);
    inproc_transport client(io.executor(), hub);
    at_server.expected_messages = 1;
    auto server_closed = at_server.closed.get_future();
    auto client_closed = at_client.closed.get_future();
    auto c = connect(client, server.listen("", at_server.handlers()), at_client.handlers());
    REQUIRE(c->is_open());

    SECTION("the connecting end closes") {
        c->close();
        c->close();
        REQUIRE(ready(client_closed));
        REQUIRE(ready(server_closed));
        CHECK(at_client.first_close() == errc::shut_down);
        CHECK(at_server.first_close() == errc::connection_closed);
    }
    SECTION("the accepting end closes") {
        // The server's end is the connection its on_message handler was given.
        auto first = at_server.all_messages.get_future();
        c->send(make_pull(1, {1}));
        REQUIRE(ready(first));
        petrel::connection_ptr server_end;
        {
            std::lock_guard lock(at_server.mutex);
            server_end = at_server.first_sender.lock();
        }
        REQUIRE(server_end);
        CHECK(server_end->is_open());
        CHECK(server_end->remote_address() == "inproc-peer");
        server_end->close();
        REQUIRE(ready(server_closed));
        REQUIRE(ready(client_closed));
        CHECK(at_server.first_close() == errc::shut_down);
        CHECK(at_client.first_close() == errc::connection_closed);
        server_end->close();
    }
    SECTION("both transports close") {
        server.close();
        client.close();
        server.close();
        REQUIRE(ready(server_closed));
        REQUIRE(ready(client_closed));
    }
    SECTION("both ends close at once") {
        c->close();
        server.close();
        REQUIRE(ready(server_closed));
        REQUIRE(ready(client_closed));
    }
    // Whatever else happens afterwards, neither end hears of it again.
    c->close();
    client.close();
    server.close();
    drain(io);
    CHECK(at_client.close_count() == 1);
    CHECK(at_server.close_count() == 1);
    CHECK_FALSE(c->is_open());
    c->send(make_pull(9, {9})); // dropped
    drain(io);
    std::lock_guard lock(at_server.mutex);
    for (const auto& m : at_server.messages) {
        CHECK(m.header.request_id != 9);
    }
}

TEST_CASE("inproc_transport: the connecting end's remote address is the listener's name",
          "[transport][inproc]") {
    io_threads io;
    inproc_hub hub;
    inproc_transport server(io.executor(), hub);
    inproc_transport client(io.executor(), hub);
    server.listen("named-server", {});
    CHECK(connect(client, "named-server", {})->remote_address() == "named-server");
}

TEST_CASE("inproc_transport: transports in different hubs cannot reach each other",
          "[transport][inproc]") {
    io_threads io;
    inproc_hub hub_a;
    inproc_hub hub_b;
    inproc_transport in_a(io.executor(), hub_a);
    inproc_transport in_b(io.executor(), hub_b);
    CHECK(in_a.listen("same-name", {}) == "same-name");
    CHECK(in_b.listen("same-name", {}) == "same-name"); // separate namespaces

    inproc_transport client_b(io.executor(), hub_b);
    in_a.listen("only-in-a", {});
    auto f = client_b.async_connect("only-in-a", {}, asio::use_future);
    REQUIRE(ready(f));
    CHECK_THROWS_AS(f.get(), std::system_error);

    // A copy of a hub is the same hub.
    inproc_hub copy_of_a = hub_a;
    inproc_transport client_a(io.executor(), copy_of_a);
    CHECK(connect(client_a, "only-in-a", {})->is_open());
}

TEST_CASE("inproc_transport: options and pool", "[transport][inproc]") {
    io_threads io;
    inproc_hub hub;
    inproc_transport t(io.executor(), hub);
    REQUIRE(t.pool());
    CHECK(t.options().pool == t.pool());
    CHECK(t.get_executor() == io.executor());

    auto pool = std::make_shared<petrel::buffer_pool>();
    petrel::transport_options o;
    o.pool = pool;
    o.limits.max_frame_bytes = 1234;
    inproc_transport with(io.executor(), hub, o);
    CHECK(with.pool() == pool);
    CHECK(with.options().limits.max_frame_bytes == 1234);

    inproc_transport moved(std::move(with));
    CHECK(moved.pool() == pool);
}
