#include <petrel/client/detail/resender.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/requests.hpp"
#include "support/route_tables.hpp"

#include <petrel/cluster/ring.hpp>
#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/transport/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::node_id;
using petrel::test::io_threads;
using petrel::test::job;
using petrel::test::recording_server;
namespace wire = petrel::wire;
namespace detail = petrel::detail;

namespace {

std::shared_ptr<detail::resender> make_resender(io_threads& io, petrel::detail::policy_traits p,
                                                std::shared_ptr<detail::worker_clock> clock = {}) {
    auto pipe = std::make_shared<detail::send_pipeline>();
    pipe->pool = std::make_shared<petrel::buffer_pool>();
    pipe->request_timeout = 10s;
    detail::resender_options o;
    o.self = 9;
    o.policy = p;
    o.tick = petrel::test::tick_template();
    o.log = petrel::logger{}; // quiet
    return std::make_shared<detail::resender>(
        io.executor(), std::move(pipe),
        clock ? std::move(clock) : std::make_shared<detail::worker_clock>(), std::move(o));
}

/// A one-key push of key 5 with update id 77.
wire::message push_of_key_5() {
    auto m = petrel::test::push_request(std::vector<std::uint64_t>{5}, {1.0F});
    m.header.update_id = 77;
    m.header.view = 1;
    return m;
}

/// Sends `m` to server `server` of `t` through `r`; the future says how it ended.
std::future<std::error_code> send(detail::resender& r, const detail::route_table& t, node_id server,
                                  wire::message m, std::chrono::milliseconds timeout = 10s) {
    auto done = std::make_shared<std::promise<std::error_code>>();
    auto f = done->get_future();
    auto req = r.make(
        server, std::move(m), [done](std::error_code ec, wire::message&&) { done->set_value(ec); },
        std::chrono::steady_clock::now() + timeout);
    r.send(t.links.at(server - 1), nullptr, std::move(req));
    return f;
}

template <typename Predicate>
bool eventually(Predicate p) {
    for (int i = 0; i < 500; ++i) {
        if (p()) {
            return true;
        }
        std::this_thread::sleep_for(10ms);
    }
    return p();
}

} // namespace

TEST_CASE("resender: a request dropped by a server the view declares failed goes to the new "
          "owner of its keys, marked resent, with its update id",
          "[client][resender]") {
    io_threads io(2);
    recording_server a(io, true);
    recording_server b(io, false);
    job j(io, {a.address(), b.address()});
    auto r = make_resender(io, petrel::detail::policy_traits_of<petrel::eventual>);
    r->install(j.view(1, {1, 2}, {1, 2}, {1}));
    auto f = send(*r, *r->table(), 1, push_of_key_5());
    REQUIRE(eventually([&] { return r->parked() == 1; }));
    CHECK(f.wait_for(0ms) == std::future_status::timeout); // it waits for a view

    r->install(j.view(2, {1, 2}, {2}, {2}));
    r->review_all();
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK_FALSE(f.get());
    CHECK(r->parked() == 0);
    const auto got = b.requests();
    REQUIRE(got.size() == 1);
    CHECK(got[0].kind == wire::message_kind::push);
    CHECK((got[0].flags & wire::flag_resent) != 0);
    CHECK(got[0].receiver == 1);
    CHECK(got[0].update_id == 77);
    CHECK(got[0].view == 2);
}

TEST_CASE("resender: a tick dropped by a server the view declares failed needs no resend",
          "[client][resender]") {
    io_threads io(2);
    recording_server a(io, true);
    recording_server b(io, false);
    job j(io, {a.address(), b.address()});
    auto r = make_resender(io, petrel::detail::policy_traits_of<petrel::eventual>);
    r->install(j.view(1, {1, 2}, {1, 2}, {1, 2}));
    wire::message tick;
    tick.header.kind = wire::message_kind::clock;
    tick.header.range_end = petrel::key_space_end<std::uint64_t>;
    tick.header.clock = 3;
    auto f = send(*r, *r->table(), 1, tick);
    REQUIRE(eventually([&] { return r->parked() == 1; }));
    r->install(j.view(2, {1, 2}, {2}, {2}));
    r->review_all();
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK_FALSE(f.get());
    CHECK(b.requests().empty()); // server 2 gets its own ticks
}

TEST_CASE("resender: without a job a dropped request is tried once more, then fails with why "
          "it was dropped",
          "[client][resender]") {
    io_threads io(2);
    recording_server a(io, true);
    job j(io, {a.address()});
    auto r = make_resender(io, petrel::detail::policy_traits_of<petrel::eventual>);
    r->install(j.view(1, {1}, {1}, {1}));
    const auto start = std::chrono::steady_clock::now();
    auto f = send(*r, *r->table(), 1, push_of_key_5());
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK(f.get() == errc::connection_closed);
    CHECK(std::chrono::steady_clock::now() - start >= detail::resender::drop_grace);
    CHECK(a.requests().size() == 2);
    CHECK(r->parked() == 0);
}

TEST_CASE("resender: a request refused for a worker the server does not know yet is sent again",
          "[client][resender]") {
    // A worker that joined a running job may reach a server before that server has seen
    // the view that admits it: the server refuses its index once, then knows it.
    io_threads io(2);
    std::atomic<int> refusals{1};
    recording_server a(
        io, false, std::size_t{1} << 20, [&refusals](const wire::message&, wire::message& reply) {
            if (refusals.fetch_sub(1) > 0) {
                reply.header.status = static_cast<std::uint32_t>(errc::unknown_worker);
            }
        });
    job j(io, {a.address()});
    auto r = make_resender(io, petrel::detail::policy_traits_of<petrel::eventual>);
    r->install(j.view(1, {1}, {1}, {1}));
    auto f = send(*r, *r->table(), 1, push_of_key_5());
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK_FALSE(f.get());
    CHECK(a.requests().size() == 2);
    CHECK(r->parked() == 0);
    // Refused again after the one more try a client without a job makes: the index is
    // wrong, and the caller hears so.
    refusals = 2;
    auto g = send(*r, *r->table(), 1, push_of_key_5());
    REQUIRE(g.wait_for(10s) == std::future_status::ready);
    CHECK(g.get() == errc::unknown_worker);
}

TEST_CASE("resender: a parked request ends at its deadline, and all end when it closes",
          "[client][resender]") {
    io_threads io(2);
    recording_server a(io, true);
    job j(io, {a.address()});
    auto r = make_resender(io, petrel::detail::policy_traits_of<petrel::eventual>);
    r->install(j.view(1, {1}, {1}, {1}));
    SECTION("the deadline, before the grace ends") {
        auto f = send(*r, *r->table(), 1, push_of_key_5(), 150ms);
        REQUIRE(f.wait_for(10s) == std::future_status::ready);
        // Dropped, or (on a loaded machine) not even dropped by then.
        const auto ec = f.get();
        CHECK((ec == errc::connection_closed || ec == errc::timed_out));
        CHECK(a.requests().size() <= 1); // not sent again: the deadline came first
    }
    SECTION("closing") {
        auto f = send(*r, *r->table(), 1, push_of_key_5());
        REQUIRE(eventually([&] { return r->parked() == 1; }));
        r->close();
        REQUIRE(f.wait_for(10s) == std::future_status::ready);
        CHECK(f.get() == errc::shut_down);
        // A later drop is not waited for.
        auto g = send(*r, *r->table(), 1, push_of_key_5());
        REQUIRE(g.wait_for(10s) == std::future_status::ready);
        CHECK(g.get() == errc::connection_closed);
    }
}

TEST_CASE("resender: a server that joins is told the newest tick, and an ordered client tells "
          "every server when the ring changes",
          "[client][resender]") {
    io_threads io(2);
    recording_server a(io, false);
    recording_server b(io, false);
    job j(io, {a.address(), b.address()});
    auto clock = std::make_shared<detail::worker_clock>();
    SECTION("eventual: only the new server, once") {
        auto r = make_resender(io, petrel::detail::policy_traits_of<petrel::eventual>, clock);
        r->install(j.view(1, {1}, {1}, {1}));
        const auto where = r->note_tick(5);
        REQUIRE(where);
        CHECK(clock->sent == 5);
        r->review_all();
        CHECK(a.requests().empty()); // server 1 hears every tick already
        r->install(j.view(2, {1, 2}, {1, 2}, {1, 2}));
        r->review_all();
        r->review_all();
        REQUIRE(eventually([&] { return b.requests().size() == 1; }));
        const auto got = b.requests();
        CHECK(got[0].kind == wire::message_kind::clock);
        CHECK(got[0].clock == 5);
        CHECK((got[0].flags & wire::flag_resent) == 0);
        CHECK(got[0].view == 2);
        std::this_thread::sleep_for(50ms);
        CHECK(a.requests().empty());
        CHECK(b.requests().size() == 1);
    }
    SECTION("sequential: every live server, marked, on each new ring") {
        auto r = make_resender(io, petrel::detail::policy_traits_of<petrel::sequential>, clock);
        r->install(j.view(1, {1, 2}, {1, 2}, {1, 2}));
        r->review_all(); // a new store announces it has no resends
        REQUIRE(eventually([&] { return a.requests().size() == 1 && b.requests().size() == 1; }));
        CHECK((a.requests()[0].flags & wire::flag_resent) != 0);
        r->review_all(); // the same ring: nothing more
        r->install(j.view(2, {1, 2}, {2}, {2}));
        r->review_all(); // server 1 failed: only server 2
        REQUIRE(eventually([&] { return b.requests().size() == 2; }));
        CHECK((b.requests()[1].flags & wire::flag_resent) != 0);
        std::this_thread::sleep_for(50ms);
        CHECK(a.requests().size() == 1);
    }
}

TEST_CASE("resender: divide cuts a request by the servers of its keys, refusing dead ones",
          "[client][resender]") {
    io_threads io(1);
    job j(io, {"127.0.0.1:1", "127.0.0.1:2"});
    // Key runs [0, 300): two servers hold them (4 partitions, stripes of 64 keys).
    std::vector<float> values(300);
    for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<float>(i);
    }
    const auto m = petrel::test::push_request(std::vector<std::uint32_t>{0, 300}, values, true);
    const auto t = j.view(3, {1, 2}, {1, 2}, {1, 2});
    const auto d = detail::divide(*t, m);
    REQUIRE(d.pieces.size() == 2);
    REQUIRE(d.piece_of_key.size() == 300);
    std::size_t keys = 0;
    for (const auto& [slot, p] : d.pieces) {
        CHECK((p.header.flags & wire::flag_key_runs) == 0); // a key list
        CHECK(p.header.view == 3);
        const auto ks = p.keys().as<std::uint32_t>();
        const auto vs = p.values().as<float>();
        REQUIRE(ks.size() == p.header.key_count);
        REQUIRE(vs.size() == ks.size());
        for (std::size_t i = 0; i < ks.size(); ++i) {
            CHECK(t->view->ring.owner(ks[i]) == t->servers[slot]);
            CHECK(vs[i] == static_cast<float>(ks[i])); // each key keeps its row
            CHECK(d.piece_of_key[ks[i]] == (&p == &d.pieces[0].second ? 0U : 1U));
        }
        CHECK(p.header.range_begin == ks.front());
        CHECK(p.header.range_end == ks.back() + 1U);
        keys += ks.size();
    }
    CHECK(keys == 300);
    // With server 2 failed (and still placed), nobody can take its keys.
    CHECK(detail::divide(*j.view(4, {1, 2}, {1}, {1, 2}), m).pieces.empty());
}
