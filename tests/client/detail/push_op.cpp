#include <petrel/client/detail/push_op.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/store_cores.hpp"

#include <petrel/consistency/worker_clock.hpp>
#include <petrel/core/error.hpp>

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::test::core_over_two;
using petrel::test::run_op;
namespace detail = petrel::detail;
namespace wire = petrel::wire;

namespace {

std::vector<std::uint64_t> keys_upto(std::uint64_t n) {
    std::vector<std::uint64_t> k(n);
    for (std::uint64_t i = 0; i < n; ++i) {
        k[i] = i * 7;
    }
    return k;
}

} // namespace

TEST_CASE("push_op: one request per owning server, with the push's clock and fresh update ids",
          "[client]") {
    core_over_two t;
    const auto keys = keys_upto(200);
    auto [ec] = run_op<>(detail::initiate_push{&t.core},
                         t.request(keys, std::vector<float>(keys.size() * 2, 1.0f)));
    CHECK_FALSE(ec);
    const auto seen = t.seen();
    REQUIRE(seen.size() == 2); // 200 keys over a balanced ring of two servers: both hold some
    std::set<std::uint64_t> ids;
    for (const auto& s : seen) {
        CHECK(s.kind == wire::message_kind::push);
        CHECK(s.clock == 0);
        CHECK((s.flags & wire::flag_ordered) != 0); // sequential: ordered pushes
        CHECK(s.update_id != 0);
        ids.insert(s.update_id);
    }
    CHECK(ids.size() == 2);
    // The next tick waits for the push: it has settled, so a clock goes at once.
    auto tick = t.core.gate().clock();
    auto done = std::make_shared<std::promise<std::error_code>>();
    auto f = done->get_future();
    tick.on_complete([done](std::error_code e) { done->set_value(e); });
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK_FALSE(f.get());
}

TEST_CASE("push_op: an eventual push is not ordered", "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::eventual>);
    auto [ec] =
        run_op<>(detail::initiate_push{&t.core}, t.request({1, 2, 3}, std::vector<float>(6, 1.0f)));
    CHECK_FALSE(ec);
    for (const auto& s : t.seen()) {
        CHECK((s.flags & wire::flag_ordered) == 0);
    }
}

TEST_CASE("push_op: a refused or empty push completes at once and sends nothing", "[client]") {
    core_over_two t;
    auto refused = t.request({3, 1});
    refused.error = errc::keys_not_sorted;
    CHECK(std::get<0>(run_op<>(detail::initiate_push{&t.core}, refused)) == errc::keys_not_sorted);
    CHECK_FALSE(std::get<0>(run_op<>(detail::initiate_push{&t.core}, t.request({}))));
    std::vector<detail::slice> slices;
    CHECK_FALSE(detail::push_op::cut(t.core, t.request({}), slices));
    CHECK(slices.empty());
    CHECK(t.seen().empty());
}

TEST_CASE("push_op: a cancelled push completes once, with operation_aborted; its slices still "
          "settle the clock",
          "[client]") {
    // The servers drop every connection: the slices are sent again once (after the
    // resender's grace), then fail. The cancel comes long before that.
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 2, {}, true);
    asio::cancellation_signal cancel;
    std::atomic<int> calls{0};
    auto done = std::make_shared<std::promise<std::error_code>>();
    auto f = done->get_future();
    auto handler = asio::bind_cancellation_slot(cancel.slot(), [&calls, done](std::error_code ec) {
        if (calls.fetch_add(1) == 0) {
            done->set_value(ec);
        }
    });
    asio::async_initiate<decltype(handler), void(std::error_code)>(
        detail::initiate_push{&t.core}, handler,
        t.request(keys_upto(100), std::vector<float>(200, 1.0f)));
    cancel.emit(asio::cancellation_type::terminal);
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    CHECK(f.get() == asio::error::operation_aborted);
    // The next tick waits for the push's slices: it goes once they have failed.
    auto tick = t.core.gate().clock();
    auto ticked = std::make_shared<std::promise<std::error_code>>();
    auto g = ticked->get_future();
    tick.on_complete([ticked](std::error_code e) { ticked->set_value(e); });
    REQUIRE(g.wait_for(10s) == std::future_status::ready);
    CHECK(t.seen().size() >= 4); // each slice twice before the tick
    std::this_thread::sleep_for(50ms);
    CHECK(calls.load() == 1);
}
