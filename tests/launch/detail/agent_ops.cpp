#include <petrel/launch/detail/agent_ops.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <vector>

using namespace std::chrono_literals;
using petrel::detail::agent_clock;
using petrel::detail::agent_observation;
using petrel::detail::agent_step;

namespace {

const auto t0 = agent_clock::time_point{} + 1h;

/// A view at `version` whose ring holds `servers` (and, when given, plans `next`).
std::shared_ptr<const petrel::membership_view> agent_view(std::uint64_t version,
                                                          std::vector<petrel::node_id> servers,
                                                          std::vector<petrel::node_id> next = {}) {
    auto v = std::make_shared<petrel::membership_view>();
    v->version = version;
    v->ring = petrel::ring::balanced({.partitions = 8}, servers);
    if (!next.empty()) {
        v->next_ring = petrel::ring::balanced({.partitions = 8}, next);
    }
    return v;
}

agent_observation seen(std::shared_ptr<const petrel::membership_view> v,
                       agent_clock::time_point now = t0) {
    agent_observation o;
    o.self = 3;
    o.view = std::move(v);
    o.now = now;
    return o;
}

bool idle(const agent_step& s) {
    return !s.finish && s.ready == 0 && !s.retire;
}

} // namespace

TEST_CASE("take_over_op: reports each ready plan once, until the ring holds the server",
          "[launch]") {
    petrel::detail::take_over_op op(t0 + 10s);
    auto o = seen(agent_view(4, {1, 2}));
    CHECK(idle(op.decide(o))); // nothing copied yet
    o.join_ready = 4;
    CHECK(op.decide(o).ready == 4);
    CHECK(idle(op.decide(o))); // not again while the report is on its way
    CHECK(idle(op.answered_ready(4, {})));
    CHECK(idle(op.decide(o))); // reported
    o.join_ready = 5;          // copied again under a later plan
    CHECK(op.decide(o).ready == 5);
    CHECK(idle(op.answered_ready(5, make_error_code(petrel::errc::timed_out))));
    CHECK(op.decide(o).ready == 5); // not reported: again
    CHECK(idle(op.answered_ready(5, {})));
    o.view = agent_view(6, {1, 2, 3});
    const auto done = op.decide(o);
    REQUIRE(done.finish);
    CHECK_FALSE(*done.finish);
}

TEST_CASE("take_over_op: ends with the member's failure, a closed member, or its patience",
          "[launch]") {
    {
        petrel::detail::take_over_op op(t0 + 10s);
        auto o = seen(agent_view(4, {1, 2}));
        o.failed = true;
        CHECK(op.decide(o).finish == petrel::errc::node_failed);
    }
    {
        petrel::detail::take_over_op op(t0 + 10s);
        auto o = seen(agent_view(4, {1, 2}));
        o.join_ready = 4;
        CHECK(op.decide(o).ready == 4);
        CHECK(op.answered_ready(4, make_error_code(petrel::errc::shut_down)).finish ==
              petrel::errc::shut_down);
    }
    {
        petrel::detail::take_over_op op(t0 + 10s);
        CHECK(op.deadline() == t0 + 10s);
        CHECK(idle(op.decide(seen(agent_view(4, {1, 2}), t0 + 9s))));
        CHECK(op.decide(seen(agent_view(4, {1, 2}), t0 + 10s)).finish == petrel::errc::timed_out);
    }
}

TEST_CASE("settle_op: waits for the view and a whole chain, within its patience", "[launch]") {
    petrel::detail::settle_op op(7, t0 + 1s);
    auto o = seen(agent_view(7, {1, 2, 3}));
    o.plan_version = 6;
    CHECK(idle(op.decide(o)));
    o.plan_version = 7;
    o.chain_whole = false;
    CHECK(idle(op.decide(o)));
    o.now = t0 + 1s;
    CHECK(op.decide(o).finish == petrel::errc::timed_out);
    o.now = t0;
    o.chain_whole = true;
    const auto done = op.decide(o);
    REQUIRE(done.finish);
    CHECK_FALSE(*done.finish);
}

TEST_CASE("retire_op: one answer ends a leave with replicas; an ask not answered in time goes "
          "three times",
          "[launch]") {
    {
        petrel::detail::retire_op op(20s);
        const auto o = seen(agent_view(4, {1, 2, 3}));
        CHECK(op.start(o).retire);
        CHECK(idle(op.decide(o))); // waits for the answer
        const auto done = op.asked({}, o);
        REQUIRE(done.finish);
        CHECK_FALSE(*done.finish);
    }
    {
        petrel::detail::retire_op op(20s);
        const auto o = seen(agent_view(4, {1, 2, 3}));
        CHECK(op.start(o).retire);
        const auto late = make_error_code(petrel::errc::timed_out);
        CHECK(op.asked(late, o).retire);
        CHECK(op.asked(late, o).retire);
        CHECK(op.asked(late, o).finish == petrel::errc::timed_out);
    }
    {
        petrel::detail::retire_op op(20s);
        const auto o = seen(agent_view(4, {3}));
        CHECK(op.start(o).retire);
        // The manager's refusal: the server stays.
        CHECK(op.asked(make_error_code(petrel::errc::invalid_argument), o).finish ==
              petrel::errc::invalid_argument);
    }
}

TEST_CASE("retire_op: a hand-over is reported ready, and asked about again once the others "
          "hold the partitions",
          "[launch]") {
    petrel::detail::retire_op op(20s);
    auto o = seen(agent_view(4, {1, 2, 3}, {1, 2}));
    CHECK(op.start(o).retire);
    CHECK_FALSE(op.deadline());
    CHECK(idle(op.asked(make_error_code(petrel::errc::in_progress), o))); // copies on the way
    REQUIRE(op.deadline());
    CHECK(*op.deadline() == t0 + 20s);
    o.plan_version = 4;
    o.hand_over_ready = 4;
    CHECK(op.decide(o).ready == 4);
    CHECK(idle(op.decide(o))); // one report at a time
    CHECK(idle(op.answered_ready(4, {}, o)));
    CHECK(idle(op.decide(o)));
    // The new owners are the primaries; the server still hands its last updates over.
    o.view = agent_view(5, {1, 2});
    o.plan_version = 5;
    o.handing_over = true;
    CHECK(idle(op.decide(o)));
    o.handing_over = false;
    CHECK(op.decide(o).retire);
    const auto done = op.asked({}, o);
    REQUIRE(done.finish);
    CHECK_FALSE(*done.finish);
}

TEST_CASE("retire_op: a plan dropped or lost is asked for anew; the wait ends on failure or "
          "patience",
          "[launch]") {
    petrel::detail::retire_op op(20s);
    auto o = seen(agent_view(4, {1, 2, 3}, {1, 2}));
    CHECK(op.start(o).retire);
    CHECK(idle(op.asked(make_error_code(petrel::errc::in_progress), o)));
    // A later view that plans nothing (a server failed): asked again, once.
    o.view = agent_view(5, {1, 2, 3});
    CHECK(op.decide(o).retire);
    CHECK(idle(op.asked(make_error_code(petrel::errc::in_progress), o)));
    CHECK(idle(op.decide(o)));
    // A report the manager no longer knows (a new manager): asked again.
    o.view = agent_view(6, {1, 2, 3}, {1, 2});
    o.plan_version = 6;
    o.hand_over_ready = 6;
    CHECK(op.decide(o).ready == 6);
    CHECK(op.answered_ready(6, make_error_code(petrel::errc::invalid_argument), o).retire);
    CHECK(op.asked(make_error_code(petrel::errc::in_progress), o).ready == 6); // reported anew
    CHECK(idle(op.answered_ready(6, {}, o)));
    o.now = t0 + 20s;
    CHECK(op.decide(o).finish == petrel::errc::timed_out);
    o.now = t0;
    o.failed = true;
    CHECK(op.decide(o).finish == petrel::errc::node_failed);
}
