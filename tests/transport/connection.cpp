#include <petrel/transport/connection.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"

#include <asio/post.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::test::bytes_of;
using petrel::test::drain;
using petrel::test::events;
using petrel::test::io_threads;
using petrel::test::over_inproc;
using petrel::test::over_tcp;
using petrel::test::ready;
using petrel::test::timeout;
using petrel::test::transport_factory;
namespace wire = petrel::wire;

namespace {

/// A valid push of `n` u64 keys from `first` with one float each: value of key k is k / 2.
wire::message make_push(std::uint64_t id, std::uint64_t first, std::size_t n) {
    std::vector<std::uint64_t> keys(n);
    std::iota(keys.begin(), keys.end(), first);
    std::vector<float> values(n);
    for (std::size_t i = 0; i < n; ++i) {
        values[i] = static_cast<float>(keys[i]) / 2;
    }
    wire::message m;
    m.header.kind = wire::message_kind::push;
    m.header.request_id = id;
    m.header.key_count = n;
    m.header.range_begin = 0;
    m.header.range_end = std::numeric_limits<std::uint64_t>::max();
    m.set_segment(wire::keys_segment, bytes_of(keys));
    m.set_segment(wire::values_segment, bytes_of(values));
    return m;
}

/// A listening transport and a connecting one of kind `Kind`, and one connection.
template <typename Kind>
struct channel {
    events at_server;
    events at_client;
    io_threads io;
    transport_factory<Kind> factory;
    petrel::any_transport server;
    petrel::any_transport client;
    petrel::connection_ptr conn;

    explicit channel(int threads, std::size_t expected = 0)
        : io(threads), server(factory.make(io.executor())), client(factory.make(io.executor())) {
        at_server.expected_messages = expected;
        const auto address = server.listen(factory.listen_address(), at_server.handlers());
        auto p = std::make_shared<std::promise<petrel::connection_ptr>>();
        auto f = p->get_future();
        client.async_connect(
            address, at_client.handlers(), [p](std::error_code ec, petrel::connection_ptr c) {
                if (ec) {
                    p->set_exception(std::make_exception_ptr(std::system_error(ec)));
                } else {
                    p->set_value(std::move(c));
                }
            });
        REQUIRE(ready(f));
        conn = f.get();
        REQUIRE(conn);
    }

    /// The server's end, known once a message arrived on it.
    petrel::connection_ptr server_end() {
        auto first = at_server.all_messages.get_future();
        conn->send(make_push(0, 1, 1));
        REQUIRE(ready(first));
        auto c = at_server.first_connection();
        REQUIRE(c);
        return c;
    }
};

} // namespace

TEMPLATE_TEST_CASE("connection: messages with payloads arrive in order", "[transport]", over_tcp,
                   over_inproc) {
    constexpr std::uint64_t count = 200;
    channel<TestType> l(2, count);
    auto all = l.at_server.all_messages.get_future();
    for (std::uint64_t i = 0; i < count; ++i) {
        // Mostly small frames, a few large ones that take another path through a decoder.
        const std::size_t n = i % 50 == 49 ? 50000 : 1 + i % 7;
        l.conn->send(make_push(i, 10 * i, n));
    }
    REQUIRE(ready(all));
    std::lock_guard lock(l.at_server.mutex);
    REQUIRE(l.at_server.messages.size() == count);
    for (std::uint64_t i = 0; i < count; ++i) {
        const wire::message& m = l.at_server.messages[i];
        INFO("message " << i);
        CHECK(m.header.request_id == i);
        const std::size_t n = i % 50 == 49 ? 50000 : 1 + i % 7;
        REQUIRE(m.header.key_count == n);
        const auto keys = m.keys().as<std::uint64_t>();
        const auto values = m.values().as<float>();
        REQUIRE(keys.size() == n);
        REQUIRE(values.size() == n);
        CHECK(keys.front() == 10 * i);
        CHECK(keys.back() == 10 * i + n - 1);
        CHECK(values.back() == static_cast<float>(keys.back()) / 2);
    }
    for (const auto* c : l.at_server.senders) {
        CHECK(c == l.at_server.senders.front());
    }
}

TEMPLATE_TEST_CASE("connection: replies reach the sender through its own handlers", "[transport]",
                   over_tcp, over_inproc) {
    channel<TestType> l(2, 1);
    l.at_client.expected_messages = 3;
    auto replies = l.at_client.all_messages.get_future();
    auto server_end = l.server_end();
    for (std::uint64_t i = 0; i < 3; ++i) {
        wire::message_header h;
        h.request_id = 40 + i;
        server_end->send(wire::make_reply(h, wire::message_kind::push_reply));
    }
    REQUIRE(ready(replies));
    std::lock_guard lock(l.at_client.mutex);
    for (std::uint64_t i = 0; i < 3; ++i) {
        CHECK(l.at_client.messages[i].header.request_id == 40 + i);
        CHECK(l.at_client.messages[i].header.kind == wire::message_kind::push_reply);
        CHECK(l.at_client.senders[i] == l.conn.get());
    }
}

TEMPLATE_TEST_CASE("connection: on_close runs exactly once on each end", "[transport]", over_tcp,
                   over_inproc) {
    channel<TestType> l(1, 1);
    auto server_closed = l.at_server.closed.get_future();
    auto client_closed = l.at_client.closed.get_future();
    REQUIRE(l.conn->is_open());

    SECTION("the connecting end closes") {
        l.conn->close();
        l.conn->close();
        REQUIRE(ready(client_closed));
        REQUIRE(ready(server_closed));
        CHECK(l.at_client.close_codes().front() == errc::shut_down);
        CHECK(l.at_server.close_codes().front() == errc::connection_closed);
    }
    SECTION("the accepting end closes") {
        auto server_end = l.server_end();
        CHECK(server_end->is_open());
        server_end->close();
        REQUIRE(ready(server_closed));
        REQUIRE(ready(client_closed));
        CHECK(l.at_server.close_codes().front() == errc::shut_down);
        CHECK(l.at_client.close_codes().front() == errc::connection_closed);
        CHECK_FALSE(server_end->is_open());
        server_end->close();
    }
    SECTION("the listening transport closes") {
        // Wait until the server adopted the connection: one it accepts after close() is
        // dropped without ever being reported to its handlers.
        auto server_end = l.server_end();
        l.server.close();
        REQUIRE(ready(server_closed));
        REQUIRE(ready(client_closed));
        CHECK(l.at_server.close_codes().front() == errc::shut_down);
    }
    SECTION("both ends close at once") {
        auto server_end = l.server_end();
        server_end->close();
        l.conn->close();
        REQUIRE(ready(server_closed));
        REQUIRE(ready(client_closed));
    }
    // Nothing that happens afterwards is reported again.
    l.conn->close();
    l.client.close();
    l.server.close();
    drain(l.io);
    CHECK(l.at_client.close_codes().size() == 1);
    CHECK(l.at_server.close_codes().size() == 1);
    CHECK_FALSE(l.conn->is_open());
}

TEMPLATE_TEST_CASE("connection: send after close is dropped", "[transport]", over_tcp,
                   over_inproc) {
    channel<TestType> l(1, 1);
    auto server_closed = l.at_server.closed.get_future();
    auto client_closed = l.at_client.closed.get_future();
    auto server_end = l.server_end();
    REQUIRE(l.at_server.message_count() == 1);

    l.conn->close();
    REQUIRE(ready(client_closed));
    REQUIRE(ready(server_closed));
    for (std::uint64_t i = 1; i <= 50; ++i) {
        l.conn->send(make_push(i, i, 3));
        server_end->send(make_push(i, i, 3));
    }
    drain(l.io);
    CHECK_FALSE(l.conn->is_open());
    CHECK_FALSE(server_end->is_open());
    CHECK(l.at_server.message_count() == 1);
    CHECK(l.at_client.message_count() == 0);
    CHECK(l.at_client.close_codes().size() == 1);
    CHECK(l.at_server.close_codes().size() == 1);
}

TEMPLATE_TEST_CASE("connection: both ends know a remote address", "[transport]", over_tcp,
                   over_inproc) {
    channel<TestType> l(1, 1);
    CHECK_FALSE(l.conn->remote_address().empty());
    auto server_end = l.server_end();
    CHECK_FALSE(server_end->remote_address().empty());
    if constexpr (std::is_same_v<TestType, over_tcp>) {
        CHECK(l.conn->remote_address().rfind("127.0.0.1:", 0) == 0);
        CHECK(server_end->remote_address().rfind("127.0.0.1:", 0) == 0);
        CHECK(l.conn->remote_address() != server_end->remote_address());
    }
    l.conn->close();
    CHECK_FALSE(l.conn->remote_address().empty()); // still known after close
}
