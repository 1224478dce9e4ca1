#include <petrel/client/detail/call_op.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/store_cores.hpp"

#include <petrel/core/error.hpp>
#include <petrel/core/key.hpp>
#include <petrel/wire/remote_call.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

using petrel::errc;
using petrel::test::core_over_two;
using petrel::test::run_op;
namespace detail = petrel::detail;
namespace wire = petrel::wire;

namespace {

/// Answers a call with the function's argument (a u64) plus the view version the server
/// was asked to answer under, or fails it with a message when the argument is 13.
void echo_calls(const wire::message& q, wire::message& r) {
    if (q.header.kind != wire::message_kind::call) {
        return;
    }
    r.header.kind = wire::message_kind::call_reply;
    detail::decoded_call call;
    std::string why;
    std::uint64_t arg = 0;
    if (detail::decode_call(q.values().span(), call, why) ||
        detail::decode_result(call.args, arg)) {
        r.header.status = static_cast<std::uint32_t>(errc::invalid_argument);
        return;
    }
    if (arg == 13) {
        const std::string text = "unlucky argument";
        r.header.status = static_cast<std::uint32_t>(errc::invalid_argument);
        r.set_segment(wire::values_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(text))));
        return;
    }
    const std::uint64_t result = arg + q.header.view;
    r.set_segment(wire::values_segment, petrel::shared_bytes::copy_of(std::span<const std::byte>(
                                            detail::encode_result(result))));
}

detail::prepared_call call_of(std::uint64_t arg, petrel::key_range<std::uint64_t> range) {
    detail::prepared_call c;
    c.range = range;
    c.body = petrel::shared_bytes::copy_of(detail::encode_call("echo", arg));
    return c;
}

} // namespace

TEST_CASE("call_op: each server that owns keys of the range answers once, in slot order",
          "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 1, echo_calls);
    const petrel::key_range<std::uint64_t> all{0, petrel::key_space_end<std::uint64_t>};
    auto [ec, got] = run_op<std::vector<std::uint64_t>>(
        detail::initiate_call<std::uint64_t>{&t.core}, call_of(5, all));
    REQUIRE_FALSE(ec);
    CHECK(got == std::vector<std::uint64_t>{6, 6}); // view 1, under which both answered
    const auto seen = t.seen();
    REQUIRE(seen.size() == 2);
    for (const auto& s : seen) {
        CHECK(s.kind == wire::message_kind::call);
        CHECK(s.view == 1);
    }
}

TEST_CASE("call_op: a failed function fails the call and its message is logged", "[client]") {
    petrel::test::log_capture logs;
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 1, echo_calls, false,
                    logs.logger());
    const petrel::key_range<std::uint64_t> all{0, petrel::key_space_end<std::uint64_t>};
    auto [ec, got] = run_op<std::vector<std::uint64_t>>(
        detail::initiate_call<std::uint64_t>{&t.core}, call_of(13, all));
    CHECK(ec == errc::invalid_argument);
    CHECK(got.empty());
    CHECK_THAT(logs.all(), Catch::Contains("petrel worker 7: remote function: unlucky argument"));
}

TEST_CASE("call_op: a result that does not decode fails the call", "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 1, echo_calls);
    const petrel::key_range<std::uint64_t> all{0, petrel::key_space_end<std::uint64_t>};
    // The servers answer a u64; a caller expecting a string reads garbage.
    auto [ec, got] = run_op<std::vector<std::string>>(detail::initiate_call<std::string>{&t.core},
                                                      call_of(5, all));
    CHECK(ec == errc::invalid_argument);
    CHECK(got.empty());
}

TEST_CASE("call_op: a refused or empty call completes at once and sends nothing", "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 1, echo_calls);
    auto refused = call_of(5, {0, 10});
    refused.error = errc::invalid_argument;
    auto [ec, got] = run_op<std::vector<int>>(detail::initiate_call<int>{&t.core}, refused);
    CHECK(ec == errc::invalid_argument);
    auto [ec2, none] =
        run_op<std::vector<int>>(detail::initiate_call<int>{&t.core}, call_of(5, {4, 4}));
    CHECK_FALSE(ec2);
    CHECK(none.empty());
    CHECK(t.seen().empty());
}
