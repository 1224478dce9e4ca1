#include <petrel/client/detail/pull_op.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/store_cores.hpp"

#include <petrel/core/error.hpp>
#include <petrel/core/kv_pairs.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <system_error>
#include <vector>

using petrel::errc;
using petrel::test::core_over_two;
using petrel::test::rows_of_keys;
using petrel::test::run_op;
namespace detail = petrel::detail;
namespace wire = petrel::wire;
using pairs = petrel::kv_pairs<std::uint64_t, float>;

namespace {

std::vector<std::uint64_t> spread_keys() {
    std::vector<std::uint64_t> k(300);
    for (std::uint64_t i = 0; i < k.size(); ++i) {
        k[i] = i * 11 + 5;
    }
    return k;
}

} // namespace

TEST_CASE("pull_op: the servers' rows come back in the caller's key order", "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 3, rows_of_keys);
    const auto keys = spread_keys();
    auto [ec, got] =
        run_op<pairs>(detail::initiate_pull<std::uint64_t, float, false>{&t.core}, t.request(keys));
    REQUIRE_FALSE(ec);
    CHECK(t.seen().size() == 2); // both servers hold some of the keys
    REQUIRE(got.size() == keys.size());
    CHECK(got.width() == 3);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        wrong += got.key_span()[i] == keys[i] ? 0 : 1;
        for (std::size_t j = 0; j < 3; ++j) {
            wrong += got.row(i)[j] == static_cast<float>(keys[i]) ? 0 : 1;
        }
    }
    CHECK(wrong == 0);
}

TEST_CASE("pull_op: one server's reply is the result's own buffer", "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 1, rows_of_keys);
    auto [ec, got] =
        run_op<pairs>(detail::initiate_pull<std::uint64_t, float, false>{&t.core}, t.request({42}));
    REQUIRE_FALSE(ec);
    CHECK(t.seen().size() == 1);
    REQUIRE(got.size() == 1);
    CHECK(got.row(0)[0] == 42.0f);
}

TEST_CASE("pull_op: rows copied into the caller's memory", "[client]") {
    core_over_two t(detail::policy_traits_of<petrel::eventual>, 2, rows_of_keys);
    const auto keys = spread_keys();
    std::vector<float> out(keys.size() * 2, -1.0f);
    auto [ec] = run_op<>(detail::initiate_pull<std::uint64_t, float, true>{&t.core},
                         t.request(keys), out.data());
    REQUIRE_FALSE(ec);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        wrong += out[i] == static_cast<float>(keys[i / 2]) ? 0 : 1;
    }
    CHECK(wrong == 0);
}

TEST_CASE("pull_op: a reply with the wrong number of rows fails the pull", "[client]") {
    auto short_rows = [](const wire::message& q, wire::message& r) {
        if (q.header.kind == wire::message_kind::pull) {
            const std::vector<std::byte> rows((q.header.key_count - 1) * q.header.width * 4);
            r.set_segment(wire::values_segment, petrel::shared_bytes::copy_of(rows));
        }
    };
    core_over_two t(detail::policy_traits_of<petrel::sequential>, 2, short_rows);
    auto [ec, got] = run_op<pairs>(detail::initiate_pull<std::uint64_t, float, false>{&t.core},
                                   t.request(spread_keys()));
    CHECK(ec == errc::value_count_mismatch);
    CHECK(got.size() == 0);
}

TEST_CASE("pull_op: a refused or empty pull completes at once and sends nothing", "[client]") {
    core_over_two t;
    auto refused = t.request({9, 9});
    refused.error = errc::keys_not_sorted;
    auto [ec, got] =
        run_op<pairs>(detail::initiate_pull<std::uint64_t, float, false>{&t.core}, refused);
    CHECK(ec == errc::keys_not_sorted);
    auto [ec2, empty] =
        run_op<pairs>(detail::initiate_pull<std::uint64_t, float, false>{&t.core}, t.request({}));
    CHECK_FALSE(ec2);
    CHECK(empty.size() == 0);
    CHECK(empty.width() == 2);
    CHECK(t.seen().empty());
}
