#include <petrel/client/detail/worker_gate.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/route_tables.hpp"

#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::test::io_threads;
using petrel::test::job;
using petrel::test::recording_server;
namespace detail = petrel::detail;
namespace wire = petrel::wire;

namespace {

/// A worker gate (and its resender) over one recording server.
struct gate_over_one_server {
    io_threads io{2};
    recording_server server{io};
    job j{io, {server.address()}};
    std::shared_ptr<detail::worker_clock> clock = std::make_shared<detail::worker_clock>();
    std::shared_ptr<detail::resender> resends;
    std::shared_ptr<detail::worker_gate> gate;

    explicit gate_over_one_server(detail::policy_traits policy, bool read_only = false) {
        auto pipe = std::make_shared<detail::send_pipeline>();
        pipe->pool = std::make_shared<petrel::buffer_pool>();
        pipe->request_timeout = 10s;
        detail::resender_options r;
        r.policy = policy;
        r.read_only = read_only;
        r.tick = petrel::test::tick_template();
        resends = std::make_shared<detail::resender>(io.executor(), pipe, clock, r);
        resends->install(j.view(1, {1}, {1}, {1}));
        gate = std::make_shared<detail::worker_gate>(
            io.executor(), clock, resends, pipe,
            detail::worker_gate_options{policy, read_only, 3, petrel::test::tick_template(), 10s});
        if (policy.ordered && !read_only) {
            // As an ordered store does when it is made: it tells its servers it has no
            // resends (a tick marked resent), once per ring.
            resends->review_all();
            for (int i = 0; i < 1000 && server.requests().empty(); ++i) {
                std::this_thread::sleep_for(10ms);
            }
            REQUIRE(server.requests().size() == 1);
        }
    }

    std::size_t ticks() const {
        std::size_t n = 0;
        for (const auto& s : server.requests()) {
            n += s.kind == wire::message_kind::clock && s.clock != 0 ? 1 : 0;
        }
        return n;
    }
};

std::error_code wait(petrel::task<void> t) {
    auto done = std::make_shared<std::promise<std::error_code>>();
    auto f = done->get_future();
    t.on_complete([done](std::error_code ec) { done->set_value(ec); });
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    return f.get();
}

} // namespace

TEST_CASE("worker_gate: a tick goes once the pushes of its clock have settled, and a read "
          "waits for the worker's own tick",
          "[client][worker_gate]") {
    gate_over_one_server g(detail::policy_traits_of<petrel::sequential>);
    auto [clock, settle] = g.gate->register_push();
    CHECK(clock == 0);
    auto tick = g.gate->clock();
    CHECK(g.gate->current() == 1);
    // The read of clock 1 waits for tick 1, which waits for the push.
    auto [required, own] = g.gate->read_gate();
    CHECK(required == 1);
    REQUIRE(own.valid());
    CHECK_FALSE(own.ready());
    std::this_thread::sleep_for(50ms);
    CHECK(g.ticks() == 0);
    settle.complete({});
    CHECK_FALSE(wait(tick));
    const auto got = g.server.requests();
    REQUIRE_FALSE(got.empty());
    CHECK(got.back().kind == wire::message_kind::clock);
    CHECK(got.back().clock == 1);
    CHECK(got.back().view == 1);
    CHECK(g.clock->sent == 1);
    // Once it is done, a read has nothing to wait for.
    const auto after = g.gate->read_gate();
    CHECK(after.first == 1);
    CHECK_FALSE(after.second.valid());
}

TEST_CASE("worker_gate: each model's read requirement", "[client][worker_gate]") {
    SECTION("eventual: nothing to wait for, pushes not waited for") {
        gate_over_one_server g(detail::policy_traits_of<petrel::eventual>);
        auto [clock, settle] = g.gate->register_push();
        CHECK_FALSE(wait(g.gate->clock())); // not held by the push
        const auto [required, own] = g.gate->read_gate();
        CHECK(required == 0);
        CHECK_FALSE(own.valid());
        settle.complete({});
    }
    SECTION("bounded delay 2: the tick two clocks back") {
        gate_over_one_server g(detail::policy_traits_of<petrel::bounded_delay<2>>);
        CHECK_FALSE(wait(g.gate->clock()));
        CHECK_FALSE(wait(g.gate->clock()));
        CHECK(g.gate->read_gate().first == 0);
        CHECK_FALSE(wait(g.gate->clock()));
        CHECK(g.gate->read_gate().first == 1);
        CHECK(g.ticks() == 3);
    }
    SECTION("a reader: no ticks, no waiting, no finishing") {
        gate_over_one_server g(detail::policy_traits_of<petrel::sequential>, true);
        CHECK(wait(g.gate->clock()) == errc::read_only);
        CHECK(wait(g.gate->finish()) == errc::read_only);
        const auto [required, own] = g.gate->read_gate();
        CHECK(required == 0);
        CHECK_FALSE(own.valid());
        CHECK(g.server.requests().empty());
    }
}

TEST_CASE("worker_gate: requests held for a tick go when it completes, fail with it, or fail "
          "at their deadline",
          "[client][worker_gate]") {
    gate_over_one_server g(detail::policy_traits_of<petrel::sequential>);
    const std::size_t announced = g.server.requests().size(); // the store's first tick
    auto outgoing_pull = [&](std::shared_ptr<std::promise<std::error_code>> replied) {
        wire::message m = petrel::test::tick_template(); // any request the server answers
        m.header.clock = 0;
        std::vector<detail::outgoing> out;
        out.push_back({g.j.links[0], nullptr, std::move(m),
                       [replied](std::error_code ec, wire::message&&) { replied->set_value(ec); },
                       petrel::no_node});
        return out;
    };
    auto failed = std::make_shared<std::promise<std::error_code>>();
    auto fail = [failed](std::error_code ec) { failed->set_value(ec); };
    auto replied = std::make_shared<std::promise<std::error_code>>();
    auto [own, done] = petrel::make_task<void>();
    SECTION("the tick completes") {
        g.gate->send_when_open(own, outgoing_pull(replied), fail,
                               std::chrono::steady_clock::now() + 10s);
        std::this_thread::sleep_for(30ms);
        CHECK(g.server.requests().size() == announced);
        done.complete({});
        auto f = replied->get_future();
        REQUIRE(f.wait_for(10s) == std::future_status::ready);
        CHECK_FALSE(f.get());
        CHECK(g.server.requests().size() == announced + 1);
    }
    SECTION("the tick fails") {
        g.gate->send_when_open(own, outgoing_pull(replied), fail,
                               std::chrono::steady_clock::now() + 10s);
        done.complete(make_error_code(errc::node_failed));
        auto f = failed->get_future();
        REQUIRE(f.wait_for(10s) == std::future_status::ready);
        CHECK(f.get() == errc::node_failed);
        CHECK(g.server.requests().size() == announced);
    }
    SECTION("the deadline comes first") {
        g.gate->send_when_open(own, outgoing_pull(replied), fail,
                               std::chrono::steady_clock::now() + 50ms);
        auto f = failed->get_future();
        REQUIRE(f.wait_for(10s) == std::future_status::ready);
        CHECK(f.get() == errc::timed_out);
        done.complete({}); // too late: nothing is sent
        std::this_thread::sleep_for(30ms);
        CHECK(g.server.requests().size() == announced);
    }
    SECTION("a task that never completes ends at its deadline") {
        CHECK(wait(g.gate->by_deadline(own, std::chrono::steady_clock::now() + 50ms)) ==
              errc::timed_out);
    }
}

TEST_CASE("worker_gate: finishing tells every live server", "[client][worker_gate]") {
    gate_over_one_server g(detail::policy_traits_of<petrel::sequential>);
    CHECK_FALSE(wait(g.gate->finish()));
    std::size_t finishing = 0;
    for (const auto& r : g.server.requests()) {
        if ((r.flags & wire::flag_finish) != 0) {
            CHECK(r.kind == wire::message_kind::clock);
            ++finishing;
        }
    }
    CHECK(finishing == 1);
}
