#include <petrel/server/server_node.hpp>

#include "support/cluster.hpp"
#include "support/events.hpp"
#include "support/temp_dir.hpp"
#include "support/threads.hpp"

#include <catch2/catch.hpp>

#include <petrel/kv_store.hpp>
#include <petrel/launch/run.hpp>
#include <petrel/launch/server_agent.hpp>

#include <asio/use_future.hpp>
#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::test::bytes_of;
using petrel::test::io_threads;
using petrel::test::log_capture;
using petrel::test::over_inproc;
using petrel::test::over_tcp;
using petrel::test::timeout;
using petrel::test::transport_factory;
namespace wire = petrel::wire;

namespace {

constexpr std::uint32_t server_id = 7;
constexpr std::uint32_t client_id = 3;

/// A point where a server's thread waits, once armed, until the test lets it go on.
struct stall_point {
    std::atomic<bool> armed{false};
    std::atomic<bool> reached{false};
    std::promise<void> arrived;
    std::promise<void> go;
    std::shared_future<void> going = go.get_future().share();
    /// Waits the first time it is called once armed; returns at once otherwise.
    void stall_once() {
        if (armed && !reached.exchange(true)) {
            arrived.set_value();
            going.wait();
        }
    }
};

/// Fulfils a promise once: when called, or when it goes, so that it never leaves a
/// server's thread waiting (declared after the server, it goes first).
struct releaser {
    std::promise<void>& p;
    bool done = false;
    void operator()() {
        if (!std::exchange(done, true)) {
            p.set_value();
        }
    }
    ~releaser() { (*this)(); }
};

/// A request header for `keys` of type Key on a table of Value rows of `width`.
template <typename Key, typename Value>
wire::message request(wire::message_kind kind, std::uint32_t table, const std::vector<Key>& keys,
                      std::uint32_t width) {
    wire::message m;
    m.header.kind = kind;
    m.header.sender = client_id;
    m.header.receiver = server_id;
    m.header.table_id = table;
    m.header.key_type = wire::scalar_type_of<Key>;
    m.header.value_type = wire::scalar_type_of<Value>;
    m.header.width = width;
    m.header.key_count = keys.size();
    m.header.range_begin = 0;
    m.header.range_end = std::numeric_limits<Key>::max();
    m.set_segment(wire::keys_segment, bytes_of(keys));
    return m;
}

template <typename Key, typename Value>
wire::message push_of(std::uint32_t table, const std::vector<Key>& keys,
                      const std::vector<Value>& values, std::uint32_t width = 1) {
    auto m = request<Key, Value>(wire::message_kind::push, table, keys, width);
    m.set_segment(wire::values_segment, bytes_of(values));
    return m;
}

template <typename Key, typename Value>
wire::message pull_of(std::uint32_t table, const std::vector<Key>& keys, std::uint32_t width = 1) {
    return request<Key, Value>(wire::message_kind::pull, table, keys, width);
}

/// Worker 0's pull of keys 1 and 2 of table 0 that waits until every worker completed
/// `clock` over the whole key range.
wire::message read_after(std::uint64_t clock) {
    const auto all = petrel::key_range<std::uint64_t>::all();
    auto m = pull_of<std::uint64_t, float>(0, {1, 2});
    m.header.worker = 0;
    m.header.clock = clock;
    m.header.range_begin = all.begin;
    m.header.range_end = all.end;
    return m;
}

/// Worker `worker` completes `clock` of table 0 over the whole key range.
wire::message tick_of(std::uint32_t worker, std::uint64_t clock) {
    const auto all = petrel::key_range<std::uint64_t>::all();
    wire::message m;
    m.header.kind = wire::message_kind::clock;
    m.header.sender = client_id;
    m.header.receiver = server_id;
    m.header.table_id = 0;
    m.header.worker = worker;
    m.header.clock = clock;
    m.header.range_begin = all.begin;
    m.header.range_end = all.end;
    return m;
}

template <typename Value>
std::vector<Value> values_of(const wire::message& reply) {
    const auto v = reply.values().as<Value>();
    return {v.begin(), v.end()};
}

/// The worker side, speaking raw messages: replies are matched to requests by id.
/// Declared before the io_threads, so that it outlives every handler that may still run.
struct raw_client {
    std::mutex mutex;
    std::map<std::uint64_t, std::promise<wire::message>> pending;
    std::vector<wire::message> unexpected;
    std::promise<std::error_code> closed;
    int close_count = 0;

    petrel::connection_handlers handlers() {
        petrel::connection_handlers h;
        h.on_message = [this](const petrel::connection_ptr&, wire::message&& m) {
            std::lock_guard lock(mutex);
            auto it = pending.find(m.header.request_id);
            if (it == pending.end()) {
                unexpected.push_back(std::move(m));
                return;
            }
            it->second.set_value(std::move(m));
            pending.erase(it);
        };
        h.on_close = [this](const petrel::connection_ptr&, std::error_code ec) {
            std::lock_guard lock(mutex);
            if (++close_count == 1) {
                closed.set_value(ec);
            }
        };
        return h;
    }

    std::future<wire::message> expect(std::uint64_t id) {
        std::lock_guard lock(mutex);
        return pending[id].get_future();
    }
};

/// A server node and one raw connection to it.
template <typename Kind>
struct fixture {
    log_capture log;
    raw_client client;
    io_threads io{2};
    transport_factory<Kind> factory;
    petrel::server_node server;
    std::string address;
    petrel::any_transport client_transport;
    petrel::connection_ptr conn;
    std::uint64_t next_id = 1;

    explicit fixture(petrel::transport_options opts = {},
                     petrel::server_options so = {.node_id = server_id},
                     petrel::transport_options client_opts = {})
        : server(make_server(opts, std::move(so))),
          address(server.listen(factory.listen_address())),
          client_transport(factory.make(io.executor(), std::move(client_opts))) {
        auto p = std::make_shared<std::promise<petrel::connection_ptr>>();
        auto f = p->get_future();
        client_transport.async_connect(
            address, client.handlers(), [p](std::error_code ec, petrel::connection_ptr c) {
                if (ec) {
                    p->set_exception(std::make_exception_ptr(std::system_error(ec)));
                } else {
                    p->set_value(std::move(c));
                }
            });
        REQUIRE(f.wait_for(timeout) == std::future_status::ready);
        conn = f.get();
        REQUIRE(conn);
    }

    petrel::server_node make_server(petrel::transport_options opts, petrel::server_options so) {
        opts.log = log.logger();
        return petrel::server_node(factory.make(io.executor(), opts), std::move(so));
    }

    /// Another connection to the server, whose messages go to `other`.
    petrel::connection_ptr connect(raw_client& other) {
        auto p = std::make_shared<std::promise<petrel::connection_ptr>>();
        auto fut = p->get_future();
        client_transport.async_connect(
            address, other.handlers(),
            [p](std::error_code, petrel::connection_ptr c) { p->set_value(std::move(c)); });
        REQUIRE(fut.wait_for(timeout) == std::future_status::ready);
        auto c = fut.get();
        REQUIRE(c);
        return c;
    }

    /// Sends `m` with a fresh request id and returns the reply.
    wire::message call(wire::message m) {
        m.header.request_id = next_id++;
        auto reply = client.expect(m.header.request_id);
        conn->send(std::move(m));
        REQUIRE(reply.wait_for(timeout) == std::future_status::ready);
        return reply.get();
    }

    /// Sends `m` with a fresh request id on another connection (`connect`), whose messages
    /// go to `other`, and returns the reply's status.
    std::uint32_t status_on(raw_client& other, const petrel::connection_ptr& conn,
                            wire::message m) {
        m.header.request_id = next_id++;
        auto reply = other.expect(m.header.request_id);
        conn->send(std::move(m));
        REQUIRE(reply.wait_for(timeout) == std::future_status::ready);
        return reply.get().header.status;
    }

    /// Pulls `keys` (u64) from a float table of `width` and checks that it succeeded.
    std::vector<float> pull(std::uint32_t table, const std::vector<std::uint64_t>& keys,
                            std::uint32_t width = 1) {
        const auto r = call(pull_of<std::uint64_t, float>(table, keys, width));
        REQUIRE(r.header.status == 0);
        return values_of<float>(r);
    }
};

} // namespace

TEMPLATE_TEST_CASE("server_node: a push creates the table and adds to it", "[server]", over_tcp,
                   over_inproc) {
    fixture<TestType> f;
    CHECK(f.server.key_count(0) == 0);

    const auto r = f.call(push_of<std::uint64_t, float>(0, {1, 5, 9}, {1, 2, 3}));
    CHECK(r.header.kind == wire::message_kind::push_reply);
    CHECK(r.header.status == 0);
    CHECK(r.header.sender == server_id);
    CHECK(r.header.receiver == client_id);
    CHECK(r.header.table_id == 0);
    CHECK(r.payload_size() == 0);
    CHECK(f.server.key_count(0) == 3);

    REQUIRE(f.call(push_of<std::uint64_t, float>(0, {5, 10}, {10, 20})).header.status == 0);
    CHECK(f.server.key_count(0) == 4);
    CHECK(f.pull(0, {1, 5, 9, 10}) == std::vector<float>{1, 12, 3, 20});

    // Other tables are separate.
    CHECK(f.server.key_count(1) == 0);
    REQUIRE(f.call(push_of<std::uint64_t, float>(1, {5}, {100})).header.status == 0);
    CHECK(f.server.key_count(1) == 1);
    CHECK(f.pull(0, {5}) == std::vector<float>{12});
    CHECK(f.pull(1, {5}) == std::vector<float>{100});
}

TEST_CASE("server_node: a peer with a reader's credential pulls; its pushes, clocks and calls "
          "are refused before they are looked at",
          "[server][security]") {
    const std::string secret = "the job's secret, 32 bytes long.";
    SECTION("the job's secret: a push is applied") {
        fixture<over_tcp> f({.secret = secret}, {.node_id = server_id}, {.secret = secret});
        CHECK(f.conn->peer_access() == petrel::access::full);
        REQUIRE(f.call(push_of<std::uint64_t, float>(0, {1, 5}, {1, 2})).header.status == 0);
        CHECK(f.pull(0, {1, 5}) == std::vector<float>{1, 2});
    }
    SECTION("a reader's credential: reads only") {
        fixture<over_tcp> f(
            {.secret = secret}, {.node_id = server_id},
            {.secret = petrel::reader_credential(secret), .credential = petrel::access::read_only});
        const auto push = f.call(push_of<std::uint64_t, float>(0, {1, 5}, {1, 2}));
        CHECK(push.header.kind == wire::message_kind::push_reply);
        CHECK(push.header.status == static_cast<std::uint32_t>(errc::not_permitted));
        wire::message tick;
        tick.header.kind = wire::message_kind::clock;
        tick.header.worker = 0;
        tick.header.flags = wire::flag_finish | wire::flag_all_tables;
        const auto clock = f.call(std::move(tick));
        CHECK(clock.header.kind == wire::message_kind::clock_reply);
        CHECK(clock.header.status == static_cast<std::uint32_t>(errc::not_permitted));
        wire::message run;
        run.header.kind = wire::message_kind::call;
        const auto call = f.call(std::move(run));
        CHECK(call.header.kind == wire::message_kind::call_reply);
        CHECK(call.header.status == static_cast<std::uint32_t>(errc::not_permitted));
        auto copy = push_of<std::uint64_t, float>(0, {1}, {1});
        copy.header.kind = wire::message_kind::row_transfer;
        CHECK(f.call(std::move(copy)).header.status ==
              static_cast<std::uint32_t>(errc::not_permitted));
        // The first refusal is logged; the next ones within a second are counted.
        CHECK_THAT(f.log.all(), Catch::Contains("a reader's credential reads only"));
        // Nothing was created or changed, and the connection still reads.
        CHECK(f.server.key_count(0) == 0);
        CHECK(f.pull(0, {1, 5}) == std::vector<float>{0, 0});
        CHECK(f.conn->is_open());
    }
}

TEMPLATE_TEST_CASE("server_node: a pull returns rows in key order, zeros for unknown keys",
                   "[server]", over_tcp, over_inproc) {
    fixture<TestType> f;
    REQUIRE(f.call(push_of<std::uint64_t, float>(4, {2, 8}, {1, 2, 3, 4, 5, 6}, 3)).header.status ==
            0);

    const auto r = f.call(pull_of<std::uint64_t, float>(4, {0, 2, 5, 8, 1000}, 3));
    REQUIRE(r.header.status == 0);
    CHECK(r.header.kind == wire::message_kind::pull_reply);
    CHECK(r.header.key_count == 5);
    CHECK(r.header.width == 3);
    CHECK(r.header.sender == server_id);
    CHECK(r.keys().empty()); // the worker knows its keys
    CHECK(values_of<float>(r) == std::vector<float>{0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0, 0});
    CHECK(f.server.key_count(4) == 2); // pulling does not insert

    SECTION("a table that does not exist reads as zeros and is not created") {
        CHECK(f.pull(9, {1, 2}, 2) == std::vector<float>{0, 0, 0, 0});
        CHECK(f.server.key_count(9) == 0);
    }
    SECTION("an empty pull") {
        const auto e = f.call(pull_of<std::uint64_t, float>(4, {}, 3));
        CHECK(e.header.status == 0);
        CHECK(e.values().empty());
    }
}

TEMPLATE_TEST_CASE("server_node: tables of u32 keys and double values", "[server]", over_tcp,
                   over_inproc) {
    fixture<TestType> f;
    using k32 = std::uint32_t;
    REQUIRE(
        f.call(push_of<k32, double>(2, {3, 4000000000u}, {0.5, 1.5, 2.5, 3.5}, 2)).header.status ==
        0);
    REQUIRE(f.call(push_of<k32, double>(2, {4000000000u}, {0.25, 0.25}, 2)).header.status == 0);
    CHECK(f.server.key_count(2) == 2);

    const auto r = f.call(pull_of<k32, double>(2, {1, 3, 4000000000u}, 2));
    REQUIRE(r.header.status == 0);
    CHECK(r.header.key_type == wire::scalar_type::u32);
    CHECK(r.header.value_type == wire::scalar_type::f64);
    CHECK(values_of<double>(r) == std::vector<double>{0, 0, 0.5, 1.5, 2.75, 3.75});
}

TEMPLATE_TEST_CASE("server_node: a request that does not match its table is refused", "[server]",
                   over_tcp, over_inproc) {
    fixture<TestType> f;
    REQUIRE(f.call(push_of<std::uint64_t, float>(0, {1, 2}, {1, 2})).header.status == 0);
    const auto before = f.pull(0, {1, 2, 3});

    SECTION("another width") {
        const auto r = f.call(push_of<std::uint64_t, float>(0, {1, 3}, {9, 9, 9, 9}, 2));
        CHECK(r.header.status == static_cast<std::uint32_t>(errc::width_mismatch));
        CHECK(r.header.kind == wire::message_kind::push_reply);
        const auto p = f.call(pull_of<std::uint64_t, float>(0, {1}, 2));
        CHECK(p.header.status == static_cast<std::uint32_t>(errc::width_mismatch));
        CHECK(p.values().empty());
        CHECK(p.header.key_count == 0);
    }
    SECTION("another value type") {
        const auto r = f.call(push_of<std::uint64_t, double>(0, {1, 3}, {9, 9}));
        CHECK(r.header.status == static_cast<std::uint32_t>(errc::value_type_mismatch));
        const auto p = f.call(pull_of<std::uint64_t, double>(0, {1}));
        CHECK(p.header.status == static_cast<std::uint32_t>(errc::value_type_mismatch));
    }
    SECTION("another key type") {
        const auto r = f.call(push_of<std::uint32_t, float>(0, {1, 3}, {9, 9}));
        CHECK(r.header.status == static_cast<std::uint32_t>(errc::key_type_mismatch));
        const auto p = f.call(pull_of<std::uint32_t, float>(0, {1}));
        CHECK(p.header.status == static_cast<std::uint32_t>(errc::key_type_mismatch));
    }
    SECTION("everything different: the key type is named first") {
        const auto r = f.call(push_of<std::uint32_t, double>(0, {1}, {9, 9}, 2));
        CHECK(r.header.status == static_cast<std::uint32_t>(errc::key_type_mismatch));
    }
    // Nothing changed, and the connection still works.
    CHECK(f.pull(0, {1, 2, 3}) == before);
    CHECK(before == std::vector<float>{1, 2, 0});
    CHECK(f.server.key_count(0) == 2);
    CHECK(f.conn->is_open());
}

TEMPLATE_TEST_CASE("server_node: a push with per-key lengths is refused", "[server]", over_tcp,
                   over_inproc) {
    fixture<TestType> f;
    REQUIRE(f.call(push_of<std::uint64_t, float>(0, {1, 2}, {1, 2})).header.status == 0);

    auto m = push_of<std::uint64_t, float>(0, {1, 2}, {5, 6, 7});
    m.set_segment(wire::lengths_segment, bytes_of(std::vector<std::uint32_t>{1, 2}));
    REQUIRE_FALSE(wire::validate(m, wire::wire_limits{})); // a valid frame: refused by the table
    const auto r = f.call(m);
    CHECK(r.header.status == static_cast<std::uint32_t>(errc::invalid_argument));
    CHECK(f.pull(0, {1, 2}) == std::vector<float>{1, 2});
    CHECK(f.server.key_count(0) == 2);

    // Nor does it create a table.
    auto n = push_of<std::uint64_t, float>(5, {1}, {5, 6});
    n.set_segment(wire::lengths_segment, bytes_of(std::vector<std::uint32_t>{2}));
    CHECK(f.call(n).header.status == static_cast<std::uint32_t>(errc::invalid_argument));
    CHECK(f.server.key_count(5) == 0);
}

TEMPLATE_TEST_CASE("server_node: a pull whose reply exceeds the frame limit is refused", "[server]",
                   over_tcp, over_inproc) {
    petrel::transport_options o;
    o.limits.max_frame_bytes = 4096;
    fixture<TestType> f(o);
    std::vector<float> row(1000, 0.5f);
    REQUIRE(f.call(push_of<std::uint64_t, float>(0, {1}, row, 1000)).header.status == 0);

    // One row (4000 bytes) fits.
    const auto one = f.call(pull_of<std::uint64_t, float>(0, {1}, 1000));
    REQUIRE(one.header.status == 0);
    CHECK(values_of<float>(one) == row);

    // Two rows (8000 bytes) do not.
    const auto two = f.call(pull_of<std::uint64_t, float>(0, {1, 2}, 1000));
    CHECK(two.header.status == static_cast<std::uint32_t>(errc::frame_too_large));
    CHECK(two.values().empty());

    // A small request for a huge reply is refused before anything is allocated: 4 GiB here.
    const auto huge = f.call(pull_of<std::uint64_t, float>(77, {1}, 1u << 30));
    CHECK(huge.header.status == static_cast<std::uint32_t>(errc::frame_too_large));
    CHECK(f.server.key_count(77) == 0);
    CHECK(f.conn->is_open());
}

TEMPLATE_TEST_CASE("server_node: the reply limit counts the padded frame", "[server]", over_tcp,
                   over_inproc) {
    petrel::transport_options o;
    o.limits.max_frame_bytes = 4092;
    fixture<TestType> f(o);
    // 1023 floats of a table never pushed: 4092 bytes of zeros, 4096 on the wire.
    const auto r = f.call(pull_of<std::uint64_t, float>(9, {1}, 1023));
    CHECK(r.header.status == static_cast<std::uint32_t>(errc::frame_too_large));
    // 1022 floats: 4088 bytes, already a multiple of 8.
    const auto ok = f.call(pull_of<std::uint64_t, float>(9, {1}, 1022));
    CHECK(ok.header.status == 0);
    CHECK(values_of<float>(ok) == std::vector<float>(1022, 0.0f));
    CHECK(f.conn->is_open());
}

TEMPLATE_TEST_CASE("server_node: a reply sent to a server closes that connection", "[server]",
                   over_tcp, over_inproc) {
    fixture<TestType> f;
    REQUIRE(f.call(push_of<std::uint64_t, float>(0, {1}, {1})).header.status == 0);
    auto closed = f.client.closed.get_future();

    wire::message_header h;
    h.request_id = 1000;
    auto bogus = wire::make_reply(h, wire::message_kind::pull_reply);
    bogus.header.status = static_cast<std::uint32_t>(errc::remote_error);
    REQUIRE_FALSE(wire::validate(bogus, wire::wire_limits{}));
    f.conn->send(std::move(bogus));

    REQUIRE(closed.wait_for(timeout) == std::future_status::ready);
    CHECK(closed.get() == errc::connection_closed);
    CHECK_THAT(f.log.all(), Catch::Contains("takes only pushes, pulls, clocks and calls"));
    {
        std::lock_guard lock(f.client.mutex);
        CHECK(f.client.unexpected.empty());
    }
    CHECK(f.server.key_count(0) == 1); // the server itself carries on
}

TEMPLATE_TEST_CASE("server_node: key_count counts distinct keys per table", "[server]", over_tcp,
                   over_inproc) {
    fixture<TestType> f;
    CHECK(f.server.key_count(0) == 0);
    CHECK(f.server.key_count(12345) == 0);
    std::vector<std::uint64_t> keys(100);
    std::vector<float> ones(100, 1.0f);
    for (std::uint64_t i = 0; i < 100; ++i) {
        keys[i] = i * 3;
    }
    REQUIRE(f.call(push_of<std::uint64_t, float>(6, keys, ones)).header.status == 0);
    REQUIRE(f.call(push_of<std::uint64_t, float>(6, keys, ones)).header.status == 0);
    CHECK(f.server.key_count(6) == 100);
    REQUIRE(f.call(push_of<std::uint64_t, float>(6, {1, 2}, {1, 1})).header.status == 0);
    CHECK(f.server.key_count(6) == 102);
    CHECK(f.pull(6, {0, 1, 3, 297}) == std::vector<float>{2, 1, 2, 2});
}

TEMPLATE_TEST_CASE("server_node: a full list of parked reads refuses new reads at once and "
                   "still answers the parked ones",
                   "[server][consistency]", over_tcp, over_inproc) {
    constexpr std::size_t max_parked = 8;
    fixture<TestType> f({}, {.node_id = server_id, .workers = 2, .max_parked = max_parked});
    REQUIRE(f.call(push_of<std::uint64_t, float>(0, {1, 2}, {3, 4})).header.status == 0);
    auto send = [&](wire::message m) {
        m.header.request_id = f.next_id++;
        auto reply = f.client.expect(m.header.request_id);
        f.conn->send(std::move(m));
        return reply;
    };
    // Admitted: reads that wait for clock 1 of both workers.
    std::vector<std::future<wire::message>> admitted;
    for (int i = 0; i < 3; ++i) {
        admitted.push_back(send(read_after(1)));
    }
    // The rest of the list: reads that wait for a clock no worker reaches.
    std::vector<std::future<wire::message>> stuck;
    for (std::size_t i = admitted.size(); i < max_parked; ++i) {
        stuck.push_back(send(read_after(1000)));
    }
    // The list is full: a read that would wait is refused at once, one that need not
    // wait is answered.
    const auto refused = f.call(read_after(1));
    CHECK(refused.header.kind == wire::message_kind::pull_reply);
    CHECK(refused.header.status == static_cast<std::uint32_t>(errc::backlog_full));
    CHECK(f.call(read_after(0)).header.status == 0);
    CHECK(f.server.parked(0) == max_parked);
    for (auto& r : admitted) {
        CHECK(r.wait_for(0s) == std::future_status::timeout);
    }
    // Both workers complete clock 1: the admitted reads are answered, the others wait on.
    for (std::uint32_t w = 0; w < 2; ++w) {
        REQUIRE(f.call(tick_of(w, 1)).header.status == 0);
    }
    for (auto& r : admitted) {
        REQUIRE(r.wait_for(timeout) == std::future_status::ready);
        const auto m = r.get();
        CHECK(m.header.status == 0);
        CHECK(values_of<float>(m) == std::vector<float>{3, 4});
    }
    for (auto& r : stuck) {
        CHECK(r.wait_for(0s) == std::future_status::timeout);
    }
    CHECK(f.server.parked(0) == stuck.size());
}

TEMPLATE_TEST_CASE("server_node: one connection parks at most its share of reads; others park "
                   "beside it, and its share comes back as its reads leave",
                   "[server][consistency][security]", over_tcp, over_inproc) {
    raw_client second; // before the fixture's io threads, which may run its handlers
    fixture<TestType> f(
        {}, {.node_id = server_id, .workers = 2, .max_parked = 8, .max_parked_per_connection = 3});
    auto other = f.connect(second);

    std::uint64_t id = 1000;
    auto read = [&](std::uint64_t clock) {
        auto m = read_after(clock);
        m.header.request_id = ++id;
        return m;
    };
    auto send = [&](raw_client& client, const petrel::connection_ptr& conn, wire::message m) {
        auto reply = client.expect(m.header.request_id);
        conn->send(std::move(m));
        return reply;
    };
    // Sends are asynchronous: the server's count, once it reached `n` (at most 2 s).
    auto parked = [&](std::size_t n) {
        for (int i = 0; i < 200 && f.server.parked(0) != n; ++i) {
            std::this_thread::sleep_for(10ms);
        }
        return f.server.parked(0);
    };
    // The first connection parks three reads that wait for clock 1; a fourth is refused.
    std::vector<std::future<wire::message>> waiting;
    for (int i = 0; i < 3; ++i) {
        waiting.push_back(send(f.client, f.conn, read(1)));
    }
    auto refused = send(f.client, f.conn, read(1));
    REQUIRE(refused.wait_for(timeout) == std::future_status::ready);
    CHECK(refused.get().header.status == static_cast<std::uint32_t>(errc::backlog_full));
    // The other connection still parks (the table's list holds 8).
    std::vector<std::future<wire::message>> others;
    for (int i = 0; i < 3; ++i) {
        others.push_back(send(second, other, read(1)));
    }
    CHECK(parked(6) == 6);
    for (auto& r : waiting) {
        CHECK(r.wait_for(0s) == std::future_status::timeout);
    }
    // Clock 1 completes: every parked read is answered, and the first connection may park
    // as many again.
    for (std::uint32_t w = 0; w < 2; ++w) {
        REQUIRE(f.call(tick_of(w, 1)).header.status == 0);
    }
    for (auto* list : {&waiting, &others}) {
        for (auto& r : *list) {
            REQUIRE(r.wait_for(timeout) == std::future_status::ready);
            CHECK(r.get().header.status == 0);
        }
    }
    CHECK(f.server.parked(0) == 0);
    std::vector<std::future<wire::message>> again;
    for (int i = 0; i < 3; ++i) {
        again.push_back(send(f.client, f.conn, read(2)));
    }
    CHECK(parked(3) == 3);
    // A connection that closes takes its reads and its count with it; the other parks on.
    f.conn->close();
    REQUIRE(f.client.closed.get_future().wait_for(timeout) == std::future_status::ready);
    CHECK(parked(0) == 0);
    for (int i = 0; i < 3; ++i) {
        others.push_back(send(second, other, read(2)));
    }
    CHECK(parked(3) == 3);
    other->close();
}

TEMPLATE_TEST_CASE("server_node: one connection creates at most its share of the tables; "
                   "others still create theirs, and tables it created stay when it closes",
                   "[server][security]", over_tcp, over_inproc) {
    raw_client second; // before the fixture's io threads, which may run their handlers
    raw_client third;
    fixture<TestType> f({},
                        {.node_id = server_id, .max_tables = 5, .max_tables_per_connection = 2});
    auto other = f.connect(second);
    constexpr auto refused = static_cast<std::uint32_t>(errc::too_many_tables);
    // The first connection creates tables 1 (a push) and 2 (a pull); a third is refused,
    // whether a push, a pull or a clock names it, and nothing of it is created.
    REQUIRE(f.call(push_of<std::uint64_t, float>(1, {1}, {1})).header.status == 0);
    REQUIRE(f.call(pull_of<std::uint64_t, float>(2, {1})).header.status == 0);
    CHECK(f.call(push_of<std::uint64_t, float>(3, {1}, {1})).header.status == refused);
    CHECK(f.call(pull_of<std::uint64_t, float>(3, {1})).header.status == refused);
    auto tick = tick_of(0, 0);
    tick.header.table_id = 3;
    CHECK(f.call(tick).header.status == refused);
    CHECK(f.server.key_count(3) == 0);
    // Tables it holds already are not counted again.
    REQUIRE(f.call(push_of<std::uint64_t, float>(2, {4}, {4})).header.status == 0);
    REQUIRE(f.call(push_of<std::uint64_t, float>(1, {2}, {2})).header.status == 0);
    // The other connection creates two of its own and uses the first one's tables.
    CHECK(f.status_on(second, other, push_of<std::uint64_t, float>(3, {1}, {3})) == 0);
    CHECK(f.status_on(second, other, push_of<std::uint64_t, float>(4, {1}, {4})) == 0);
    CHECK(f.status_on(second, other, push_of<std::uint64_t, float>(1, {1}, {1})) == 0);
    CHECK(f.status_on(second, other, push_of<std::uint64_t, float>(6, {1}, {6})) == refused);
    // The first connection closes: its tables and their rows stay; a new connection of its
    // peer creates table 5, the last the server holds, and then the server is full.
    f.conn->close();
    REQUIRE(f.client.closed.get_future().wait_for(timeout) == std::future_status::ready);
    auto again = f.connect(third);
    CHECK(f.status_on(third, again, pull_of<std::uint64_t, float>(1, {1, 2})) == 0);
    CHECK(f.status_on(third, again, push_of<std::uint64_t, float>(5, {1}, {5})) == 0);
    CHECK(f.status_on(third, again, push_of<std::uint64_t, float>(7, {1}, {7})) == refused);
    CHECK(f.server.key_count(1) == 2);
    CHECK(f.server.key_count(2) == 1);
    CHECK(f.server.key_count(5) == 1);
    other->close();
    again->close();
}

TEMPLATE_TEST_CASE("server_node: the pushes of one connection create at most its share of rows; "
                   "pushes to rows that exist go on, and others' connections create their own",
                   "[server][security]", over_tcp, over_inproc) {
    raw_client second; // before the fixture's io threads, which may run their handlers
    raw_client third;
    fixture<TestType> f({}, {.node_id = server_id, .workers = 1, .max_rows_per_connection = 100});
    auto other = f.connect(second);
    auto keys_from = [](std::uint64_t first, std::size_t n) {
        std::vector<std::uint64_t> keys(n);
        std::iota(keys.begin(), keys.end(), first);
        return keys;
    };
    auto ones = [](std::size_t n) { return std::vector<float>(n, 1.0f); };
    // A push held for the clock (worker 0, clock 0): its rows are made at admission.
    auto ordered = [&](std::vector<std::uint64_t> keys) {
        auto m = push_of<std::uint64_t, float>(0, keys, ones(keys.size()));
        m.header.flags |= wire::flag_ordered;
        m.header.worker = 0;
        m.header.clock = 0;
        return m;
    };
    constexpr auto refused = static_cast<std::uint32_t>(errc::too_many_rows);
    // 60 rows by a push applied at once, 60 more by a held one: 120, past the share of 100
    // by the second push's own keys.
    REQUIRE(f.call(push_of<std::uint64_t, float>(0, keys_from(0, 60), ones(60))).header.status ==
            0);
    REQUIRE(f.call(ordered(keys_from(100, 60))).header.status == 0);
    CHECK(f.server.key_count(0) == 120);
    // Now a push that would create a row is refused whole, either kind, in any table.
    CHECK(f.call(push_of<std::uint64_t, float>(0, {5, 500}, {1, 1})).header.status == refused);
    CHECK(f.call(ordered({501})).header.status == refused);
    CHECK(f.call(push_of<std::uint64_t, float>(9, {1}, {1})).header.status == refused);
    CHECK(f.server.key_count(0) == 120);
    CHECK(f.server.key_count(9) == 0);
    // A push the table refuses anyway is not looked up as its keys: refused as such.
    CHECK(f.call(push_of<std::uint32_t, float>(0, {5, 500}, {1, 1})).header.status ==
          static_cast<std::uint32_t>(errc::key_type_mismatch));
    // Pushes to rows that exist, and pulls of any key, go on.
    CHECK(f.call(push_of<std::uint64_t, float>(0, {0, 1, 100}, {1, 1, 1})).header.status == 0);
    CHECK(f.call(pull_of<std::uint64_t, float>(0, {0, 777})).header.status == 0);
    CHECK(f.server.key_count(0) == 120);
    // Another connection creates rows of its own.
    CHECK(f.status_on(second, other, push_of<std::uint64_t, float>(0, {700, 701}, {1, 1})) == 0);
    CHECK(f.server.key_count(0) == 122);
    // The first connection closes: its rows stay, and a new connection counts afresh.
    f.conn->close();
    REQUIRE(f.client.closed.get_future().wait_for(timeout) == std::future_status::ready);
    auto again = f.connect(third);
    CHECK(f.status_on(third, again, push_of<std::uint64_t, float>(0, {800}, {1})) == 0);
    CHECK(f.server.key_count(0) == 123);
    other->close();
    again->close();
}

TEMPLATE_TEST_CASE("server_node: one worker holds at most its share of a table's held pushes; "
                   "the others' are still held, and its share comes back with its clock",
                   "[server][consistency][security]", over_tcp, over_inproc) {
    // 4 workers and 1000 bytes: a worker's share is 500. Each push is 10 keys and 10
    // values, 120 bytes.
    fixture<TestType> f({}, {.node_id = server_id, .workers = 4, .max_held_bytes = 1000});
    std::vector<std::uint64_t> keys(10);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const std::vector<float> ones(10, 1.0f);
    // A push of clock `clock`, held until every worker completed it.
    auto held_push = [&](std::uint32_t worker, std::uint64_t clock = 0) {
        auto m = push_of<std::uint64_t, float>(0, keys, ones);
        m.header.flags |= wire::flag_ordered;
        m.header.worker = worker;
        m.header.clock = clock;
        return f.call(std::move(m)).header.status;
    };
    const auto backlog_full = static_cast<std::uint32_t>(errc::backlog_full);
    for (int i = 0; i < 4; ++i) {
        REQUIRE(held_push(0) == 0);
    }
    CHECK(held_push(0) == backlog_full); // 600 of its 500
    for (int i = 0; i < 4; ++i) {
        CHECK(held_push(1) == 0); // the table holds 960 of 1000
    }
    CHECK(held_push(2) == backlog_full); // the table's budget
    CHECK(f.pull(0, {0, 9}) == std::vector<float>{0, 0});
    // Every worker completes clock 0: the held pushes are applied, and worker 0 may hold
    // as many again.
    for (std::uint32_t w = 0; w < 4; ++w) {
        REQUIRE(f.call(tick_of(w, 1)).header.status == 0);
    }
    CHECK(f.pull(0, {0, 9}) == std::vector<float>{8, 8});
    for (int i = 0; i < 4; ++i) {
        CHECK(held_push(0, 1) == 0);
    }
    CHECK(held_push(0, 1) == backlog_full);
}

TEST_CASE("server_node: several connections share the tables", "[server]") {
    raw_client second; // before the fixture's io threads, which may run its handlers
    fixture<over_inproc> f;
    auto other = f.connect(second);

    REQUIRE(f.call(push_of<std::uint64_t, float>(0, {42}, {1.5f})).header.status == 0);
    auto m = pull_of<std::uint64_t, float>(0, {42});
    m.header.request_id = 555;
    auto reply = second.expect(555);
    other->send(std::move(m));
    REQUIRE(reply.wait_for(timeout) == std::future_status::ready);
    CHECK(values_of<float>(reply.get()) == std::vector<float>{1.5f});
    other->close();
    // `second` must outlive the handlers of `other`: wait until its close was reported.
    auto done = second.closed.get_future();
    REQUIRE(done.wait_for(timeout) == std::future_status::ready);
}

TEST_CASE("server_node: pushes and pulls of many workers served on several threads at once "
          "apply every update once",
          "[server]") {
    // Every worker pushes ones to the same keys (and to keys of its own) and pulls them
    // back, each from its own thread and connection, on a server with four I/O threads:
    // the pushes are applied, and the pulls read, while others are applied.
    constexpr int workers = 4;
    constexpr int rounds = 40;
    io_threads io{4};
    petrel::server_node server(petrel::tcp_transport(io.executor()), {.workers = workers});
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    o.width = 8;
    std::vector<std::unique_ptr<petrel::kv_store<std::uint64_t, float, petrel::eventual>>> stores;
    for (int w = 0; w < workers; ++w) {
        stores.push_back(std::make_unique<petrel::kv_store<std::uint64_t, float, petrel::eventual>>(
            petrel::tcp_transport(io.executor()), o));
    }
    std::vector<std::uint64_t> common(3000);
    for (std::size_t i = 0; i < common.size(); ++i) {
        common[i] = i * 7919;
    }
    const int failures = petrel::test::on_threads(workers, [&](int w) {
        auto& kv = *stores[static_cast<std::size_t>(w)];
        std::vector<std::uint64_t> own(500);
        for (std::size_t i = 0; i < own.size(); ++i) {
            own[i] = (std::uint64_t{1} << 40) + static_cast<std::uint64_t>(w) * 100000 + i;
        }
        const xt::xtensor<float, 2> ones = xt::ones<float>({common.size(), std::size_t{8}});
        const xt::xtensor<float, 2> mine = xt::ones<float>({own.size(), std::size_t{8}});
        int failed = 0;
        for (int r = 0; r < rounds; ++r) {
            kv.push(common, ones, asio::use_future).get();
            kv.push(own, mine, asio::use_future).get();
            const auto got = kv.pull(common, asio::use_future).get();
            for (std::size_t i = 0; i < got.value_span().size(); ++i) {
                // Each row whole: the eight values of a key move together.
                if (got.value_span().data()[i] != got.value_span().data()[i - i % 8]) {
                    ++failed;
                }
            }
        }
        const auto got = kv.pull(own, asio::use_future).get();
        for (std::size_t i = 0; i < got.value_span().size(); ++i) {
            if (got.value_span().data()[i] != static_cast<float>(rounds)) {
                ++failed;
            }
        }
        return failed;
    });
    CHECK(failures == 0);
    const auto all = stores[0]->pull(common, asio::use_future).get();
    REQUIRE(all.value_span().size() == common.size() * 8);
    for (std::size_t i = 0; i < all.value_span().size(); ++i) {
        REQUIRE(all.value_span().data()[i] == static_cast<float>(workers * rounds));
    }
    CHECK(server.key_count(0) == common.size() + workers * 500);
}

TEST_CASE("server_node: large pushes and pulls, cut into parts that the server's threads apply "
          "at once, apply every row once",
          "[server]") {
    // Pushes and pulls of 40,000 keys of 16 floats (2.5 MiB) are cut into parts on a server
    // with four I/O threads, while another worker does the same.
    constexpr std::size_t keys = 40000;
    constexpr std::size_t width = 16;
    constexpr int workers = 2;
    constexpr int rounds = 4;
    io_threads io{4};
    petrel::server_node server(petrel::tcp_transport(io.executor()), {.workers = workers});
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    o.width = width;
    std::vector<std::uint64_t> common(keys);
    for (std::size_t i = 0; i < keys; ++i) {
        common[i] = i * 131 + 5;
    }
    const int failures = petrel::test::on_threads(workers, [&](int) {
        petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
            petrel::tcp_transport(io.executor()), o);
        // Each row's values count up along the row, so a part read or applied at another
        // part's offset shows.
        xt::xtensor<float, 2> g({keys, width});
        for (std::size_t i = 0; i < keys; ++i) {
            for (std::size_t j = 0; j < width; ++j) {
                g(i, j) = static_cast<float>(j + 1);
            }
        }
        int failed = 0;
        for (int r = 0; r < rounds; ++r) {
            kv.push(common, g, asio::use_future).get();
            const auto got = kv.pull(common, asio::use_future).get();
            const auto v = got.value_span();
            for (std::size_t i = 0; i < v.size(); ++i) {
                // Whole rows: each value is its row's first times its place.
                if (v.data()[i] != v.data()[i - i % width] * static_cast<float>(i % width + 1)) {
                    ++failed;
                }
            }
        }
        return failed;
    });
    CHECK(failures == 0);
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor()), o);
    const auto all = kv.pull(common, asio::use_future).get();
    REQUIRE(all.value_span().size() == keys * width);
    for (std::size_t i = 0; i < all.value_span().size(); ++i) {
        REQUIRE(all.value_span().data()[i] ==
                static_cast<float>(workers * rounds) * static_cast<float>(i % width + 1));
    }
    CHECK(server.key_count(0) == keys);
}

namespace {

/// Sums, and notes the threads it runs on.
struct thread_noting_sum {
    struct seen {
        std::mutex mutex;
        std::set<std::thread::id> threads;
    };
    std::shared_ptr<seen> notes = std::make_shared<seen>();
    [[nodiscard]] std::size_t state_size(std::size_t) const noexcept { return 0; }
    void update(std::span<float> w, std::span<float>, std::span<const float> g) const {
        for (std::size_t j = 0; j < w.size(); ++j) {
            w[j] += g[j];
        }
        const std::lock_guard lock(notes->mutex);
        notes->threads.insert(std::this_thread::get_id());
    }
};

} // namespace

TEST_CASE("server_node: split_threads = 1 applies a large push on the thread serving it alone",
          "[server]") {
    constexpr std::size_t keys = 40000;
    constexpr std::size_t width = 16;
    const thread_noting_sum rule;
    auto tables = std::make_shared<petrel::table_registry>();
    tables->add<std::uint64_t, float>(0, {.width = width}, rule);
    io_threads io{4};
    petrel::server_node server(petrel::tcp_transport(io.executor()),
                               {.tables = tables, .split_threads = 1});
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    o.width = width;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor()), o);
    std::vector<std::uint64_t> k(keys);
    std::iota(k.begin(), k.end(), std::uint64_t{0});
    const xt::xtensor<float, 2> ones = xt::ones<float>({keys, width});
    for (int round = 1; round <= 3; ++round) {
        {
            const std::lock_guard lock(rule.notes->mutex);
            rule.notes->threads.clear();
        }
        kv.push(k, ones, asio::use_future).get();
        {
            const std::lock_guard lock(rule.notes->mutex);
            CHECK(rule.notes->threads.size() == 1);
        }
        const auto got = kv.pull(k, asio::use_future).get();
        REQUIRE(got.value_span().size() == keys * width);
        CHECK(std::all_of(got.value_span().begin(), got.value_span().end(),
                          [&](float v) { return v == static_cast<float>(round); }));
    }
}

// ---------------------------------------------------------------------------------------
// Checkpoints: restore checks everything before it replaces anything.
// ---------------------------------------------------------------------------------------

namespace {

std::shared_ptr<const petrel::table_registry> adagrad_table() {
    petrel::table_registry t;
    t.add<std::uint64_t, float>(4, {.width = 2}, petrel::adagrad{.eta = 0.5});
    return std::make_shared<const petrel::table_registry>(std::move(t));
}

/// Two servers (ids 1 and 2) with table 4 trained a little, saved to `dir`.
void save_two_servers(const std::filesystem::path& dir, std::vector<std::uint64_t>& keys) {
    io_threads io{2};
    petrel::server_node s1(petrel::tcp_transport(io.executor()),
                           {.node_id = 1, .tables = adagrad_table()});
    petrel::server_node s2(petrel::tcp_transport(io.executor()),
                           {.node_id = 2, .tables = adagrad_table()});
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {s1.listen("127.0.0.1:0"), s2.listen("127.0.0.1:0")};
    o.table_id = 4;
    o.width = 2;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor()), o);
    keys.clear();
    for (std::uint64_t k = 0; k < 5000; k += 3) {
        keys.push_back(k * 977);
    }
    xt::xtensor<float, 2> g = xt::ones<float>({keys.size(), std::size_t{2}});
    kv.push(keys, g, asio::use_future).get();
    kv.push(keys, g, asio::use_future).get();
    kv.save(dir.string(), asio::use_future).get();
}

} // namespace

TEST_CASE("server_node: restore loads a checkpoint onto one server, or refuses it whole",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    std::vector<std::uint64_t> keys;
    save_two_servers(dir.path(), keys);
    const auto manifest = petrel::read_checkpoint(dir.path(), 4);
    REQUIRE(manifest.shards.size() == 2);
    CHECK(manifest.updater == "adagrad");
    CHECK(manifest.state_width == 2);

    io_threads io{2};
    // Onto one server: every row, values and state.
    petrel::server_node one(petrel::tcp_transport(io.executor()), {.tables = adagrad_table()});
    one.restore(dir.path());
    CHECK(one.key_count(4) == keys.size());
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {one.listen("127.0.0.1:0")};
    o.table_id = 4;
    o.width = 2;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor()), o);
    const auto w = kv.pull(keys, asio::use_future).get();
    // Two adagrad steps of g = 1 from 0: -0.5 (1/1) - 0.5 (1/sqrt 2).
    const float expected = -0.5f - 0.5f / std::sqrt(2.0f);
    CHECK(w.values()(0, 0) == Approx(expected));
    CHECK(w.values()(keys.size() - 1, 1) == Approx(expected));
    // The state came along: a third step uses n = 3.
    kv.push(keys, xt::xtensor<float, 2>(xt::ones<float>({keys.size(), std::size_t{2}})),
            asio::use_future)
        .get();
    CHECK(kv.pull(keys, asio::use_future).get().values()(3, 0) ==
          Approx(expected - 0.5f / std::sqrt(3.0f)));

    // A declaration that does not match: refused, naming the manifest; nothing changes.
    petrel::table_registry other;
    other.add<std::uint64_t, float>(4, {.width = 2}, petrel::adam{});
    petrel::server_node mismatched(
        petrel::tcp_transport(io.executor()),
        {.tables = std::make_shared<const petrel::table_registry>(std::move(other))});
    try {
        mismatched.restore(dir.path());
        FAIL("restored a checkpoint its declaration does not match");
    } catch (const petrel::checkpoint_error& e) {
        CHECK(std::string(e.what()).find("manifest.json") != std::string::npos);
        CHECK(std::string(e.what()).find("adagrad") != std::string::npos);
    }
    CHECK(mismatched.key_count(4) == 0);

    // A truncated shard: refused naming that file; the server keeps what it had.
    const auto shard = dir.path() / "table-4" / manifest.shards[1].file;
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
    try {
        one.restore(dir.path());
        FAIL("restored a truncated shard");
    } catch (const petrel::checkpoint_error& e) {
        CHECK(std::string(e.what()).find(shard.string()) != std::string::npos);
    }
    CHECK(one.key_count(4) == keys.size());

    // No manifest: the checkpoint is incomplete.
    std::filesystem::remove(dir.path() / "table-4" / "manifest.json");
    CHECK_THROWS_AS(one.restore(dir.path()), petrel::checkpoint_error);
    CHECK_THROWS_AS(one.restore(dir.path() / "missing"), petrel::checkpoint_error);
}

TEST_CASE("server_node: a save by servers that share an id fails, naming the problem",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    petrel::test::log_capture log; // the servers' and the worker's
    io_threads io{2};
    petrel::transport_options topts;
    topts.log = log.logger();
    petrel::server_node s1(petrel::tcp_transport(io.executor(), topts));
    petrel::server_node s2(petrel::tcp_transport(io.executor(), topts));
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {s1.listen("127.0.0.1:0"), s2.listen("127.0.0.1:0")};
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor(), topts), o);
    const std::vector<std::uint64_t> keys{1, 2, 3, 1000, 100000};
    kv.push(keys, xt::xtensor<float, 1>(xt::ones<float>({keys.size()})), asio::use_future).get();
    try {
        kv.save(dir.path().string(), asio::use_future).get();
        FAIL("saved two shards under one name");
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::checkpoint_failed);
    }
    CHECK(log.all().find("checkpoint failed") != std::string::npos);
    CHECK_THROWS_AS(petrel::read_checkpoint(dir.path(), 0), petrel::checkpoint_error);
}

TEST_CASE("server_node: a save that names a directory outside the checkpoint root is refused, "
          "and nothing is written",
          "[checkpoint][security]") {
    // A client without a root of its own sends whatever directory it likes: the server
    // resolves it under its root or refuses it.
    petrel::test::temp_dir dir;
    const auto root = dir.path() / "root";
    std::filesystem::create_directories(root);
    petrel::test::log_capture log;
    io_threads io{2};
    petrel::transport_options topts;
    topts.log = log.logger();
    petrel::server_node server(petrel::tcp_transport(io.executor(), topts),
                               {.node_id = 1, .checkpoint_root = root});
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {server.listen("127.0.0.1:0")};
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor(), topts), o);
    const std::vector<std::uint64_t> keys{1, 2, 3};
    kv.push(keys, xt::xtensor<float, 1>(xt::ones<float>({keys.size()})), asio::use_future).get();
    const auto outside = dir.path() / "outside";
    for (const auto& target : {std::string("../outside"), outside.string(),
                               std::string("run/../../outside"), std::string("")}) {
        INFO(target);
        try {
            kv.save(target, asio::use_future).get();
            FAIL("a save outside the root was taken");
        } catch (const std::system_error& e) {
            CHECK(e.code() == errc::invalid_argument);
        }
    }
    CHECK_FALSE(std::filesystem::exists(outside));
    CHECK(std::filesystem::is_empty(root));
    // The server goes on serving.
    CHECK(kv.pull(keys, asio::use_future).get().values()(2) == 1.0f);
}

TEST_CASE("server_node: a shard is written with no lock held: pushes and pulls of its "
          "table and of others complete meanwhile, and the shard holds the cut",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    io_threads io{2};
    // A writer that waits, once it has the snapshot, until the test lets it write.
    std::promise<void> writing;
    auto started = writing.get_future();
    std::promise<void> release;
    std::shared_future<void> go = release.get_future().share();
    std::atomic<int> writes{0};
    auto writer = std::make_shared<petrel::checkpoint_writer>(
        [&](const std::filesystem::path& file, std::uint32_t server, const petrel::shard_table& t) {
            if (writes++ == 0) {
                writing.set_value();
            }
            go.wait();
            return petrel::detail::write_shard(file, server, t);
        });
    petrel::server_node s(petrel::tcp_transport(io.executor()),
                          {.node_id = 1, .checkpoints = writer});
    const auto at = s.listen("127.0.0.1:0");
    releaser let_write{release};
    const auto store = [&](std::uint32_t table) {
        petrel::kv_store_options<std::uint64_t> o;
        o.servers = {at};
        o.table_id = table;
        return std::make_unique<petrel::kv_store<std::uint64_t, float, petrel::eventual>>(
            petrel::tcp_transport(io.executor()), o);
    };
    auto saved_table = store(0);
    auto other_table = store(1);
    std::vector<std::uint64_t> keys(20000);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
    saved_table->push(keys, ones, asio::use_future).get();
    other_table->push(keys, ones, asio::use_future).get();

    auto saved = saved_table->save(dir.path().string(), asio::use_future);
    REQUIRE(started.wait_for(10s) == std::future_status::ready);
    // The shard is being written: both tables take pushes and answer pulls.
    auto same = saved_table->push(keys, ones, asio::use_future);
    auto other = other_table->push(keys, ones, asio::use_future);
    REQUIRE(same.wait_for(10s) == std::future_status::ready);
    REQUIRE(other.wait_for(10s) == std::future_status::ready);
    same.get();
    other.get();
    auto pulled = saved_table->pull(keys, asio::use_future);
    REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
    CHECK(xt::all(xt::equal(pulled.get().values(), 2.0F)));
    CHECK(saved.wait_for(0s) == std::future_status::timeout);

    let_write();
    REQUIRE(saved.wait_for(10s) == std::future_status::ready);
    saved.get();
    CHECK(writes == 1);
    // The shard holds the rows as they were at the call, not the push after it.
    petrel::server_node restored(petrel::tcp_transport(io.executor()));
    restored.restore(dir.path());
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {restored.listen("127.0.0.1:0")};
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::tcp_transport(io.executor()), o);
    CHECK(xt::all(xt::equal(kv.pull(keys, asio::use_future).get().values(), 1.0F)));
}

TEST_CASE("server_node: saves taken while the same and another table take pushes on "
          "other threads hold whole rows, and every push completes",
          "[checkpoint]") {
    io_threads io{4};
    petrel::server_node s(petrel::tcp_transport(io.executor()), {.node_id = 1});
    const auto at = s.listen("127.0.0.1:0");
    constexpr std::size_t width = 8;
    const auto store = [&](std::uint32_t table) {
        petrel::kv_store_options<std::uint64_t> o;
        o.servers = {at};
        o.table_id = table;
        o.width = width;
        return std::make_unique<petrel::kv_store<std::uint64_t, float, petrel::eventual>>(
            petrel::tcp_transport(io.executor()), o);
    };
    std::vector<std::uint64_t> keys(4096);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const xt::xtensor<float, 2> ones = xt::ones<float>({keys.size(), width});
    auto saver = store(0);
    saver->push(keys, ones, asio::use_future).get(); // every row exists
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    std::atomic<int> pushed{0};
    std::vector<std::thread> pushers;
    for (const std::uint32_t table : {0U, 0U, 1U}) {
        pushers.emplace_back([&, table] {
            auto kv = store(table);
            while (!stop) {
                try {
                    kv->push(keys, ones, asio::use_future).get();
                    ++pushed;
                } catch (const std::exception&) {
                    ++failures;
                }
            }
        });
    }
    std::vector<petrel::test::temp_dir> dirs(4);
    for (auto& d : dirs) {
        saver->save(d.path().string(), asio::use_future).get();
    }
    stop = true;
    for (auto& t : pushers) {
        t.join();
    }
    CHECK(failures == 0);
    CHECK(pushed > 0);
    // Every push adds 1 to all values of a row: a row copied while a push was half way
    // through it would hold two values.
    for (auto& d : dirs) {
        petrel::server_node restored(petrel::tcp_transport(io.executor()));
        restored.restore(d.path());
        const auto t = restored.rows(0);
        REQUIRE(t.rows == keys.size());
        std::vector<float> v(t.rows * width);
        REQUIRE(t.values.size() == v.size() * sizeof(float));
        std::memcpy(v.data(), t.values.data(), t.values.size());
        std::size_t torn = 0;
        for (std::size_t r = 0; r < t.rows; ++r) {
            for (std::size_t c = 1; c < width; ++c) {
                if (v[r * width + c] != v[r * width]) {
                    ++torn;
                    break;
                }
            }
        }
        CHECK(torn == 0);
    }
}

TEST_CASE("server_node: a checkpoint call released by a clock copies its table after the "
          "server's lock: another table takes pushes and pulls while the copy is taken",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    io_threads io{2};
    petrel::server_node s(petrel::tcp_transport(io.executor()), {.node_id = 1, .workers = 2});
    const auto at = s.listen("127.0.0.1:0");
    // The copy asks the plan which rows are this server's, key by key: at key `stall`,
    // once armed, it waits until the test lets it go on.
    constexpr std::uint64_t stall = 77;
    auto point = std::make_shared<stall_point>();
    auto arrived = point->arrived.get_future();
    releaser let_go{point->go};
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {at};
    o.request_timeout = 10s;
    o.worker = 0;
    petrel::kv_store<std::uint64_t, float, petrel::sequential> a(
        petrel::tcp_transport(io.executor()), o);
    o.worker = 1;
    petrel::kv_store<std::uint64_t, float, petrel::sequential> b(
        petrel::tcp_transport(io.executor()), o);
    o.table_id = 1;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> other(
        petrel::tcp_transport(io.executor()), o);
    auto plan = petrel::replication_plan_of(*a.view());
    plan.partition_of = [point, inner = plan.partition_of](std::uint64_t key) {
        if (key == stall) {
            point->stall_once();
        }
        return inner(key);
    };
    s.replicate(plan);

    std::vector<std::uint64_t> keys(5000);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
    a.push(keys, ones, asio::use_future).get();
    b.push(keys, ones, asio::use_future).get();
    other.push(keys, ones, asio::use_future).get();
    auto ticked = a.clock();
    // Under sequential, at clock 1: parked until worker 1 ends clock 0 too.
    auto saved = a.save(dir.path().string(), asio::use_future);
    CHECK(saved.wait_for(50ms) == std::future_status::timeout);
    point->armed = true;
    auto released = b.clock(); // applies clock 0, then copies table 0 for the call
    REQUIRE(arrived.wait_for(10s) == std::future_status::ready);

    // The copy is being taken, table 0's lock held: table 1 is served meanwhile.
    auto pushed = other.push(keys, ones, asio::use_future);
    REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
    pushed.get();
    auto pulled = other.pull(keys, asio::use_future);
    REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
    CHECK(xt::all(xt::equal(pulled.get().values(), 2.0F)));
    CHECK(saved.wait_for(0s) == std::future_status::timeout);

    let_go();
    REQUIRE(saved.wait_for(10s) == std::future_status::ready);
    saved.get();
    // The shard holds clock 0: both workers' pushes.
    petrel::server_node restored(petrel::tcp_transport(io.executor()));
    restored.restore(dir.path());
    const auto t = restored.rows(0);
    REQUIRE(t.rows == keys.size());
    std::vector<float> v(t.rows);
    REQUIRE(t.values.size() == v.size() * sizeof(float));
    std::memcpy(v.data(), t.values.data(), t.values.size());
    CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 2.0F; }));
}

// ---------------------------------------------------------------------------------------
// Replication along the chains of the ring
// ---------------------------------------------------------------------------------------

namespace {

/// Servers with ids 1..n on loopback TCP, replicating along the chains of a ring with
/// `replicas` copies, and the view a store without a cluster makes of them.
struct replicated_servers {
    io_threads io{2};
    log_capture logs;
    std::vector<std::unique_ptr<petrel::server_node>> servers;
    std::vector<std::string> addresses;
    petrel::ring_options ring{.partitions = 64, .stripe_keys = 4, .replicas = 1};
    static constexpr std::uint64_t secret = 0x5ec2e7f00d;

    replicated_servers(std::uint32_t n, std::uint32_t replicas, std::uint32_t workers = 1,
                       std::shared_ptr<const petrel::table_registry> tables = nullptr,
                       std::uint64_t max_held_bytes = std::uint64_t{1} << 30)
        : replicated_servers(replicas, workers, std::vector(n, tables), max_held_bytes) {}

    /// Server i + 1 with the tables of `tables[i]`.
    replicated_servers(std::uint32_t replicas, std::uint32_t workers,
                       const std::vector<std::shared_ptr<const petrel::table_registry>>& tables,
                       std::uint64_t max_held_bytes = std::uint64_t{1} << 30) {
        ring.replicas = replicas;
        for (std::uint32_t i = 0; i < tables.size(); ++i) {
            petrel::transport_options t;
            t.log = logs.logger();
            servers.push_back(std::make_unique<petrel::server_node>(
                petrel::tcp_transport(io.executor(), t),
                petrel::server_options{.node_id = i + 1,
                                       .workers = workers,
                                       .max_held_bytes = max_held_bytes,
                                       .tables = tables[i],
                                       .replication_timeout = 5s}));
            addresses.push_back(servers.back()->listen("127.0.0.1:0"));
        }
    }

    template <typename Consistency = petrel::eventual>
    std::unique_ptr<petrel::kv_store<std::uint64_t, float, Consistency>>
    store(std::uint32_t worker = 0, std::uint32_t table = 0) {
        petrel::kv_store_options<std::uint64_t> o;
        o.servers = addresses;
        o.ring = ring;
        o.worker = worker;
        o.table_id = table;
        o.request_timeout = 10s;
        auto kv = std::make_unique<petrel::kv_store<std::uint64_t, float, Consistency>>(
            petrel::tcp_transport(io.executor()), o);
        auto plan = petrel::replication_plan_of(*kv->view());
        plan.secret = secret;
        for (auto& s : servers) {
            s->replicate(plan);
        }
        return kv;
    }

    /// Key → value of server `i` (1-based) on table `table` (width 1).
    std::map<std::uint64_t, float> rows(std::uint32_t i, std::uint32_t table = 0) const {
        const auto t = servers[i - 1]->rows(table);
        std::map<std::uint64_t, float> out;
        const auto* k = reinterpret_cast<const std::uint64_t*>(t.keys.data());
        const auto* v = reinterpret_cast<const float*>(t.values.data());
        for (std::uint64_t r = 0; r < t.rows; ++r) {
            out[k[r]] = v[r];
        }
        return out;
    }
};

/// The servers (1-based ids) that must hold `key`: its owner list cut to `copies`.
std::vector<std::uint32_t> holders(const petrel::ring& r, std::uint64_t key, std::size_t copies) {
    const auto owners = r.owners(r.partition_of(key));
    return {owners.begin(), owners.begin() + static_cast<std::ptrdiff_t>(copies)};
}

} // namespace

namespace {

/// A worker's stores (worker 0) on tables 0 and 1 of the server at `address`.
template <class Consistency>
struct two_tables {
    using store = petrel::kv_store<std::uint64_t, float, Consistency>;
    std::unique_ptr<store> first;
    std::unique_ptr<store> second;

    two_tables(io_threads& io, const std::string& address) {
        petrel::kv_store_options<std::uint64_t> o;
        o.servers = {address};
        o.request_timeout = 10s;
        first = std::make_unique<store>(petrel::tcp_transport(io.executor()), o);
        o.table_id = 1;
        second = std::make_unique<store>(petrel::tcp_transport(io.executor()), o);
    }
};

/// Sums; once armed, its first update waits until the test lets it go on.
struct stalling_sum {
    std::shared_ptr<stall_point> at = std::make_shared<stall_point>();
    [[nodiscard]] std::size_t state_size(std::size_t) const noexcept { return 0; }
    void update(std::span<float> w, std::span<float>, std::span<const float> g) const {
        at->stall_once();
        for (std::size_t j = 0; j < w.size(); ++j) {
            w[j] += g[j];
        }
    }
};

} // namespace

TEST_CASE("server_node: a clock's pushes to one sequential table are applied after the "
          "server's lock: another sequential table completes clocks meanwhile",
          "[server]") {
    const stalling_sum rule;
    auto arrived = rule.at->arrived.get_future();
    auto tables = std::make_shared<petrel::table_registry>();
    tables->add<std::uint64_t, float>(0, {}, rule);
    io_threads io{2};
    petrel::server_node s(petrel::tcp_transport(io.executor()), {.tables = tables});
    releaser let_go{rule.at->go};
    two_tables<petrel::sequential> stores(io, s.listen("127.0.0.1:0"));
    auto& slow = *stores.first;
    auto& other = *stores.second;

    std::vector<std::uint64_t> keys(1000);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
    slow.push(keys, ones, asio::use_future).get(); // held for clock 0
    rule.at->armed = true;
    auto ticked = slow.clock(asio::use_future); // applies clock 0: its first row stalls
    REQUIRE(arrived.wait_for(10s) == std::future_status::ready);

    // Table 0's clock is being applied, its lock held: table 1 runs two clocks meanwhile.
    for (int clock = 1; clock <= 2; ++clock) {
        auto pushed = other.push(keys, ones, asio::use_future);
        REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
        pushed.get();
        auto next = other.clock(asio::use_future);
        REQUIRE(next.wait_for(10s) == std::future_status::ready);
        next.get();
        auto pulled = other.pull(keys, asio::use_future); // waits for the clock just ended
        REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
        CHECK(xt::all(xt::equal(pulled.get().values(), static_cast<float>(clock))));
    }
    auto read = slow.pull(keys, asio::use_future);
    CHECK(read.wait_for(50ms) == std::future_status::timeout);

    let_go();
    REQUIRE(read.wait_for(10s) == std::future_status::ready);
    CHECK(xt::all(xt::equal(read.get().values(), 1.0F)));
    REQUIRE(ticked.wait_for(10s) == std::future_status::ready);
    ticked.get();
}

TEST_CASE("server_node: a remote function runs after the server's lock: another table takes "
          "pushes and pulls while it runs",
          "[server][remote_function]") {
    auto point = std::make_shared<stall_point>();
    point->armed = true;
    auto arrived = point->arrived.get_future();
    auto functions = std::make_shared<petrel::function_registry>();
    functions->add<petrel::no_args, std::uint64_t>(
        "count_slowly", [point](auto& rows, const petrel::no_args&) -> std::uint64_t {
            point->stall_once();
            std::uint64_t n = 0;
            rows.for_each([&](auto, auto) { ++n; });
            return n;
        });
    io_threads io{2};
    petrel::server_node s(petrel::tcp_transport(io.executor()), {.functions = functions});
    releaser let_go{point->go};
    two_tables<petrel::eventual> stores(io, s.listen("127.0.0.1:0"));
    auto& called = *stores.first;
    auto& other = *stores.second;
    std::vector<std::uint64_t> keys(1000);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
    called.push(keys, ones, asio::use_future).get();

    auto counted =
        called.call<std::uint64_t>("count_slowly", {0, 1000}, petrel::no_args{}, asio::use_future);
    REQUIRE(arrived.wait_for(10s) == std::future_status::ready);
    for (int round = 1; round <= 2; ++round) {
        auto pushed = other.push(keys, ones, asio::use_future);
        REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
        pushed.get();
        auto pulled = other.pull(keys, asio::use_future);
        REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
        CHECK(xt::all(xt::equal(pulled.get().values(), static_cast<float>(round))));
    }
    CHECK(counted.wait_for(0s) == std::future_status::timeout);

    let_go();
    REQUIRE(counted.wait_for(10s) == std::future_status::ready);
    const auto parts = counted.get();
    CHECK(std::accumulate(parts.begin(), parts.end(), std::uint64_t{0}) == keys.size());
}

TEST_CASE("server_node: a large push applied while another request is being applied is cut "
          "for the threads left: with two threads, it is applied whole on its own",
          "[server]") {
    constexpr std::size_t keys = 40000; // 2.5 MiB of values: cut when threads are free
    constexpr std::size_t width = 16;
    const stalling_sum slow_rule;
    const thread_noting_sum noting;
    auto arrived = slow_rule.at->arrived.get_future();
    auto tables = std::make_shared<petrel::table_registry>();
    tables->add<std::uint64_t, float>(0, {}, slow_rule);
    tables->add<std::uint64_t, float>(1, {.width = width}, noting);
    io_threads io{4};
    petrel::server_node s(petrel::tcp_transport(io.executor()),
                          {.tables = tables, .split_threads = 2});
    releaser let_go{slow_rule.at->go};
    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {s.listen("127.0.0.1:0")};
    o.request_timeout = 10s;
    using store = petrel::kv_store<std::uint64_t, float, petrel::eventual>;
    store slow(petrel::tcp_transport(io.executor()), o);
    o.table_id = 1;
    o.width = width;
    store large(petrel::tcp_transport(io.executor()), o);

    std::vector<std::uint64_t> few(10);
    std::iota(few.begin(), few.end(), std::uint64_t{0});
    const xt::xtensor<float, 1> few_ones = xt::ones<float>({few.size()});
    slow.push(few, few_ones, asio::use_future).get(); // creates table 0 and its rows
    slow_rule.at->armed = true;
    auto stalled = slow.push(few, few_ones, asio::use_future); // its first row stalls
    REQUIRE(arrived.wait_for(10s) == std::future_status::ready);

    // One of the two threads a large request may use is applying the stalled push.
    std::vector<std::uint64_t> k(keys);
    std::iota(k.begin(), k.end(), std::uint64_t{0});
    const xt::xtensor<float, 2> ones = xt::ones<float>({keys, width});
    for (int round = 1; round <= 3; ++round) {
        {
            const std::lock_guard lock(noting.notes->mutex);
            noting.notes->threads.clear();
        }
        auto pushed = large.push(k, ones, asio::use_future);
        REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
        pushed.get();
        {
            const std::lock_guard lock(noting.notes->mutex);
            CHECK(noting.notes->threads.size() == 1);
        }
        auto pulled = large.pull(k, asio::use_future);
        REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
        CHECK(xt::all(xt::equal(pulled.get().values(), static_cast<float>(round))));
    }
    CHECK(stalled.wait_for(0s) == std::future_status::timeout);

    let_go();
    REQUIRE(stalled.wait_for(10s) == std::future_status::ready);
    stalled.get();
    CHECK(xt::all(xt::equal(slow.pull(few, asio::use_future).get().values(), 2.0F)));
}

TEST_CASE("server_node: watchers are told of a new plan on the executor, once per change",
          "[server]") {
    io_threads io;
    petrel::server_node s(petrel::tcp_transport(io.executor()), {.node_id = 1});
    std::mutex mutex;
    std::vector<std::uint64_t> seen; // the plan version each call read
    std::promise<void> first;
    const auto handle = s.watch([&] {
        std::lock_guard lock(mutex);
        seen.push_back(s.plan_version()); // no lock of the server held: it may be read
        if (seen.size() == 1) {
            first.set_value();
        }
    });
    petrel::replication_plan plan;
    plan.version = 3;
    plan.chains[1] = {{1, "127.0.0.1:1"}};
    s.replicate(plan);
    REQUIRE(first.get_future().wait_for(timeout) == std::future_status::ready);
    s.replicate(plan); // not newer: nothing changes, nobody is told
    petrel::test::drain(io);
    {
        std::lock_guard lock(mutex);
        CHECK(seen == std::vector<std::uint64_t>{3});
    }
    s.unwatch(handle);
    plan.version = 4;
    s.replicate(plan);
    petrel::test::drain(io);
    std::lock_guard lock(mutex);
    CHECK(seen == std::vector<std::uint64_t>{3});
}

TEST_CASE("replication: a push is acknowledged once its replicas hold it", "[fault]") {
    const std::uint32_t k = GENERATE(1u, 2u);
    replicated_servers c(3, k);
    auto kv = c.store();
    std::vector<std::uint64_t> keys;
    for (std::uint64_t key = 0; key < 400; key += 3) {
        keys.push_back(key);
    }
    xt::xtensor<float, 1> g = xt::ones<float>({keys.size()});
    for (int round = 1; round <= 3; ++round) {
        kv->push(keys, g, asio::use_future).get();
        // No waiting: the acknowledgement came after the chain applied the push.
        std::vector<std::map<std::uint64_t, float>> rows;
        for (std::uint32_t i = 1; i <= 3; ++i) {
            rows.push_back(c.rows(i));
        }
        for (const auto key : keys) {
            const auto must = holders(kv->view()->ring, key, k + 1);
            for (std::uint32_t i = 1; i <= 3; ++i) {
                const bool holds = std::find(must.begin(), must.end(), i) != must.end();
                INFO("key " << key << " server " << i << " round " << round);
                if (holds) {
                    REQUIRE(rows[i - 1].count(key) == 1);
                    CHECK(rows[i - 1][key] == static_cast<float>(round));
                } else {
                    CHECK(rows[i - 1].count(key) == 0);
                }
            }
        }
    }
    CHECK(c.logs.all().find("did not apply") == std::string::npos);
}

namespace {

/// Two servers, each key on both: server `stalls` applies table 0 with a rule that stalls
/// once armed, the other sums; table 1 sums on both.
struct stalled_pair {
    using store = std::unique_ptr<petrel::kv_store<std::uint64_t, float, petrel::eventual>>;
    stalling_sum rule;
    std::future<void> arrived = rule.at->arrived.get_future();
    replicated_servers c;
    releaser let_go{rule.at->go}; // declared after the servers: goes before them
    store slow = c.store();
    store other = c.store(0, 1);

    explicit stalled_pair(std::uint32_t stalls) : c(1, 1, registries(stalls, rule)) {}

    static std::vector<std::shared_ptr<const petrel::table_registry>>
    registries(std::uint32_t stalls, const stalling_sum& rule) {
        auto slow = std::make_shared<petrel::table_registry>();
        slow->add<std::uint64_t, float>(0, {}, rule);
        auto sums = std::make_shared<petrel::table_registry>();
        sums->add<std::uint64_t, float>(0, {}, petrel::sum{});
        if (stalls == 1) {
            return {slow, sums};
        }
        return {sums, slow};
    }

    /// `n` keys of which server `primary` is the primary.
    [[nodiscard]] std::vector<std::uint64_t> keys_of(std::uint32_t primary, std::size_t n) const {
        std::vector<std::uint64_t> keys;
        for (std::uint64_t key = 0; keys.size() < n; ++key) {
            if (holders(slow->view()->ring, key, 1)[0] == primary) {
                keys.push_back(key);
            }
        }
        return keys;
    }

    /// Arms the rule and pushes ones to `keys` of table 0, until the rule stalls.
    std::future<void> push_until_stalled(const std::vector<std::uint64_t>& keys) {
        rule.at->armed = true;
        auto pushed = slow->push(keys, xt::xtensor<float, 1>(xt::ones<float>({keys.size()})),
                                 asio::use_future);
        REQUIRE(arrived.wait_for(10s) == std::future_status::ready);
        return pushed;
    }

    /// Pushes ones to `keys` of table 1 twice, pulling them back after each.
    void serve_other_table(const std::vector<std::uint64_t>& keys) {
        const xt::xtensor<float, 1> ones = xt::ones<float>({keys.size()});
        for (int round = 1; round <= 2; ++round) {
            auto next = other->push(keys, ones, asio::use_future);
            REQUIRE(next.wait_for(10s) == std::future_status::ready);
            next.get();
            auto pulled = other->pull(keys, asio::use_future);
            REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
            CHECK(xt::all(xt::equal(pulled.get().values(), static_cast<float>(round))));
        }
    }

    /// Both servers hold 1 for each of `keys` in table 0.
    void check_both_hold_one(const std::vector<std::uint64_t>& keys) const {
        const auto primary = c.rows(1);
        const auto replica = c.rows(2);
        for (const auto key : keys) {
            CHECK(primary.at(key) == 1.0F);
            CHECK(replica.at(key) == 1.0F);
        }
    }
};

} // namespace

TEST_CASE("replication: a push that goes down a chain is applied after the server's lock: "
          "another table is served meanwhile",
          "[fault]") {
    stalled_pair p(1); // the primary stalls
    const auto keys = p.keys_of(1, 100);
    auto pushed = p.push_until_stalled(keys);

    // Server 1 applies the push, table 0's lock held: table 1 is served meanwhile.
    p.serve_other_table(keys);
    auto read = p.slow->pull(keys, asio::use_future); // waits for table 0's lock
    CHECK(read.wait_for(50ms) == std::future_status::timeout);

    p.let_go();
    REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
    pushed.get();
    REQUIRE(read.wait_for(10s) == std::future_status::ready);
    CHECK(xt::all(xt::equal(read.get().values(), 1.0F)));
    p.check_both_hold_one(keys);
}

TEST_CASE("replication: a replica update is applied with its table's lock alone: another "
          "table is served meanwhile",
          "[fault]") {
    stalled_pair p(2); // the replica stalls
    const auto replicated = p.keys_of(1, 100);
    auto pushed = p.push_until_stalled(replicated);

    // Server 2 applies the copy, table 0's lock held: its table 1 is served meanwhile.
    // (Updates that server 1 sends it wait on their link, which it reads in order.)
    const auto start = std::chrono::steady_clock::now();
    p.serve_other_table(p.keys_of(2, 100));
    // Acknowledged once copied (or once the replica is given up for slow, after 5 s).
    REQUIRE(std::chrono::steady_clock::now() - start < 4s);
    CHECK(pushed.wait_for(0s) == std::future_status::timeout);

    p.let_go();
    REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
    pushed.get();
    p.check_both_hold_one(replicated);
}

TEST_CASE("replication: a table may keep fewer copies than the job", "[fault]") {
    auto tables = std::make_shared<petrel::table_registry>();
    tables->add<std::uint64_t, float>(5, {.replicas = 0});
    tables->add<std::uint64_t, float>(6, {});
    replicated_servers c(3, 1, 1, tables);
    auto scratch = c.store(0, 5);
    auto kept = c.store(0, 6);
    std::vector<std::uint64_t> keys{1, 2, 3, 50, 51, 99};
    xt::xtensor<float, 1> g = xt::ones<float>({keys.size()});
    scratch->push(keys, g, asio::use_future).get();
    kept->push(keys, g, asio::use_future).get();
    std::size_t scratch_rows = 0;
    std::size_t kept_rows = 0;
    for (std::uint32_t i = 1; i <= 3; ++i) {
        scratch_rows += c.rows(i, 5).size();
        kept_rows += c.rows(i, 6).size();
    }
    CHECK(scratch_rows == keys.size());
    CHECK(kept_rows == 2 * keys.size());
}

TEST_CASE("replication: under sequential, replicas get each clock's combined pushes", "[fault]") {
    auto tables = std::make_shared<petrel::table_registry>();
    tables->add<std::uint64_t, float>(0, {}, petrel::sgd{.eta = 0.5});
    tables->add<std::uint64_t, float>(1, {.aggregate = petrel::aggregation::mean});
    const std::uint32_t table = GENERATE(0u, 1u);
    replicated_servers c(3, 1, 2, tables);
    auto a = c.store<petrel::sequential>(0, table);
    auto b = c.store<petrel::sequential>(1, table);
    // The workers push different key sets: the combined update is their union.
    std::vector<std::uint64_t> ka{0, 1, 2, 3, 40, 41};
    std::vector<std::uint64_t> kb{2, 3, 40, 77, 78};
    const int clocks = 4;
    for (int t = 0; t < clocks; ++t) {
        xt::xtensor<float, 1> ga = xt::ones<float>({ka.size()}) * static_cast<float>(t + 1);
        xt::xtensor<float, 1> gb = xt::ones<float>({kb.size()}) * 2.0f;
        auto pa = a->push(ka, ga, asio::use_future);
        auto pb = b->push(kb, gb, asio::use_future);
        pa.get();
        pb.get();
        a->clock();
        b->clock();
    }
    // A pull at the last clock waits until every clock is applied on the primaries.
    std::vector<std::uint64_t> all{0, 1, 2, 3, 40, 41, 77, 78};
    const auto pulled = a->pull(all, asio::use_future).get();
    const auto primary = pulled.values();
    // Ordered pushes were acknowledged when held; the replicas follow shortly.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::vector<std::map<std::uint64_t, float>> rows;
    for (;;) {
        bool done = true;
        for (const auto key : all) {
            const auto replica = holders(a->view()->ring, key, 2)[1];
            done = done && c.servers[replica - 1]->replicated_clock(table) == clocks;
        }
        if (done || std::chrono::steady_clock::now() > deadline) {
            break;
        }
        std::this_thread::sleep_for(5ms);
    }
    for (std::uint32_t i = 1; i <= 3; ++i) {
        rows.push_back(c.rows(i, table));
    }
    for (std::size_t j = 0; j < all.size(); ++j) {
        const auto must = holders(a->view()->ring, all[j], 2);
        INFO("key " << all[j]);
        for (const auto i : must) {
            REQUIRE(rows[i - 1].count(all[j]) == 1);
            // Bitwise: the primary applied the same combined update as its replica.
            CHECK(rows[i - 1][all[j]] == primary(j));
        }
        CHECK(c.servers[must[1] - 1]->replicated_clock(table) == clocks);
    }
    // sgd (w -= 0.5 g) of the sums: key 2 got (t+1) + 2 per clock; mean: ((t+1) + 2) / 2.
    const float key2 =
        table == 0 ? -0.5f * (1 + 2 + 3 + 4 + 4 * 2) : (1 + 2 + 3 + 4 + 4 * 2) / 2.0f;
    CHECK(primary(2) == Approx(key2));
}

namespace {

/// An update of key 5 (value 1) of kind `kind` from primary `origin`, as a server would
/// send it when it carries `secret`.
wire::message replica_update(std::uint32_t origin, std::uint64_t secret,
                             wire::message_kind kind = wire::message_kind::replica_update,
                             std::uint64_t keys = 1) {
    wire::message m;
    m.header.kind = kind;
    m.header.sender = origin;
    m.header.receiver = origin;
    m.header.secret = secret;
    m.header.view = 1; // the view the servers follow
    m.header.key_count = keys;
    m.header.range_begin = 5;
    m.header.range_end = 6;
    if (keys > 0) {
        const std::uint64_t key = 5;
        const float value = 1;
        m.set_segment(wire::keys_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(&key, 1))));
        m.set_segment(wire::values_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(&value, 1))));
    }
    return m;
}

std::error_code send_to_replica(replicated_servers& c, std::size_t to, wire::message m) {
    auto l = std::make_shared<petrel::detail::request_link>(petrel::tcp_transport(c.io.executor()),
                                                            c.addresses[to], 5s);
    std::promise<std::error_code> got;
    l->request(std::move(m), [&got](std::error_code ec, wire::message&&) { got.set_value(ec); });
    const auto ec = got.get_future().get();
    l->close();
    return ec;
}

} // namespace

TEST_CASE("replication: requests held for a newer view are bounded in bytes", "[fault]") {
    replicated_servers c(1, 0, 1, nullptr, 1024);
    auto kv = c.store(); // the server follows view 1
    // A worker's push claiming view 2: held until that view arrives, but not past the
    // server's byte budget (200 keys and values: 2400 bytes).
    wire::message m;
    m.header.kind = wire::message_kind::push;
    m.header.worker = 0;
    m.header.view = 2;
    m.header.key_count = 200;
    m.header.range_begin = 0;
    m.header.range_end = 200;
    std::vector<std::uint64_t> keys(200);
    std::iota(keys.begin(), keys.end(), std::uint64_t{0});
    const std::vector<float> values(200, 1.0f);
    m.set_segment(wire::keys_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(wire::values_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
    CHECK(send_to_replica(c, 0, std::move(m)) == errc::backlog_full);
    CHECK(c.rows(1).empty());
}

TEST_CASE("replication: a replica update that the view does not place here is refused", "[fault]") {
    replicated_servers c(2, 1);
    auto kv = c.store(); // the servers follow the chains 1 → 2 and 2 → 1
    // Server 1 is primary of its chain, nobody's replica but 2's: an update "from 3" is stale.
    CHECK(send_to_replica(c, 0, replica_update(3, c.secret)) == errc::stale_view);
    CHECK(c.rows(1).empty());
}

TEST_CASE("replication: a server refuses keys its newer view placed elsewhere", "[fault]") {
    replicated_servers c(3, 1);
    auto kv = c.store(); // view 1
    // View 2: server 1 left, its keys moved to their replicas. Every server follows it; a
    // store that still has view 1 sends server 1's keys to server 1.
    auto v = *kv->view();
    ++v.version;
    REQUIRE(v.nodes[0].id == 1);
    v.nodes[0].state = petrel::node_state::left;
    v.ring = v.ring.failover(std::vector<petrel::node_id>{2, 3}).ring;
    auto plan = petrel::replication_plan_of(v);
    plan.secret = c.secret;
    for (auto& s : c.servers) {
        s->replicate(plan);
    }
    std::vector<std::uint64_t> its;
    for (std::uint64_t key = 0; key < 400; ++key) {
        if (kv->view()->ring.owner(key) == 1) {
            its.push_back(key);
        }
    }
    REQUIRE(!its.empty());
    try {
        kv->push(its, xt::xtensor<float, 1>(xt::ones<float>({its.size()})), asio::use_future).get();
        FAIL("server 1 took a push for keys it no longer holds");
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::stale_view);
    }
    try {
        (void)kv->pull(its, asio::use_future).get();
        FAIL("server 1 answered a pull for keys it no longer holds");
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::stale_view);
    }
    CHECK(c.rows(1).empty());
    CHECK(c.rows(2).empty());
    CHECK(c.rows(3).empty());
    // A checkpoint asks the servers view 1 names: their keys changed since, so they
    // refuse rather than write shards that miss keys.
    const auto dir = std::filesystem::temp_directory_path() /
                     ("petrel-stale-save-" + std::to_string(::getpid()));
    try {
        kv->save(dir.string(), asio::use_future).get();
        FAIL("a checkpoint was written under a view whose servers' keys changed");
    } catch (const std::system_error& e) {
        CHECK(e.code() == errc::stale_view);
    }
    CHECK_FALSE(std::filesystem::exists(dir / "table-0" / "manifest.json"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("replication: only servers of the job can send replica updates", "[fault]") {
    replicated_servers c(2, 1);
    auto kv = c.store(); // server 1 is the replica of server 2's keys
    // From "server 2" but without the job's server secret (a worker, a stray peer): an
    // update, a copy and the end of a copy are all refused, and nothing changes.
    CHECK(send_to_replica(c, 0, replica_update(2, 0)) == errc::not_permitted);
    CHECK(send_to_replica(c, 0, replica_update(2, c.secret + 1)) == errc::not_permitted);
    CHECK(send_to_replica(c, 0, replica_update(2, 0, wire::message_kind::row_transfer)) ==
          errc::not_permitted);
    CHECK(send_to_replica(c, 0, replica_update(2, 0, wire::message_kind::row_transfer, 0)) ==
          errc::not_permitted);
    CHECK(send_to_replica(c, 0, replica_update(2, 0, wire::message_kind::hand_over, 0)) ==
          errc::not_permitted);
    CHECK(c.rows(1).empty());
    // With the secret, the same update is applied.
    CHECK_FALSE(send_to_replica(c, 0, replica_update(2, c.secret)));
    CHECK(c.rows(1) == std::map<std::uint64_t, float>{{5, 1.0f}});
}

TEST_CASE("replication: a dead replica does not hold a push back", "[fault]") {
    replicated_servers c(2, 1);
    auto kv = c.store();
    c.servers[1]->close(); // server 2: the replica of server 1's keys, gone
    std::vector<std::uint64_t> keys;
    for (std::uint64_t key = 0; key < 64; ++key) {
        if (kv->view()->ring.owner(key) == 1) {
            keys.push_back(key);
        }
    }
    REQUIRE(!keys.empty());
    xt::xtensor<float, 1> g = xt::ones<float>({keys.size()});
    kv->push(keys, g, asio::use_future).get();
    CHECK(c.rows(1).size() == keys.size());
    CHECK(c.logs.all().find("did not apply a replica update") != std::string::npos);
}
