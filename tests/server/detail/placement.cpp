#include <petrel/server/detail/placement.hpp>

#include "support/rows.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

using petrel::test::message_keys;
using petrel::test::message_values;

namespace {

using petrel::replication_plan;
namespace wire = petrel::wire;

/// Two servers, 1 and 2: stripes of 4 keys, partitions alternating (stripe % 2).
replication_plan two_server_plan() {
    replication_plan p;
    p.version = 1;
    p.stripe_keys = 4;
    p.partition_of = [](std::uint64_t k) { return static_cast<std::uint32_t>(k / 4 % 2); };
    p.primaries = {1, 2};
    return p;
}

wire::message push_message(const std::vector<std::uint64_t>& keys, bool runs,
                           const std::vector<float>& values = {}) {
    return petrel::test::rows_request(wire::message_kind::push, keys, values, 1, runs);
}

} // namespace

TEST_CASE("placement: a server is the primary of a request's keys, listed or in runs", "[server]") {
    const auto p = two_server_plan();
    using petrel::detail::primary_of_keys;
    CHECK(primary_of_keys(p, push_message({0, 3, 8, 11}, false), 1));
    CHECK_FALSE(primary_of_keys(p, push_message({0, 4}, false), 1));
    CHECK(primary_of_keys(p, push_message({4, 7}, false), 2));
    // Runs [b, e): [8, 12) is server 1's stripe 2, [12, 13) server 2's.
    CHECK(primary_of_keys(p, push_message({8, 12}, true), 1));
    CHECK_FALSE(primary_of_keys(p, push_message({8, 13}, true), 1));
    CHECK(primary_of_keys(p, push_message({5, 5}, true), 1)); // an empty run holds no key
    // A run over more stripes than the budget reaches every partition.
    CHECK_FALSE(primary_of_keys(p, push_message({0, 1000}, true), 1));
    CHECK(primary_of_keys(p, push_message({0, ~std::uint64_t{0}}, true), 1) == false);
    auto one = p;
    one.primaries = {1, 1};
    CHECK(primary_of_keys(one, push_message({0, ~std::uint64_t{0}}, true), 1));
    // Without a plan every key is anyone's.
    CHECK(primary_of_keys(replication_plan{}, push_message({4}, false), 1));
}

TEST_CASE("placement: the keys of a push a filter keeps, with their rows", "[server]") {
    auto m = push_message({1, 5, 6, 9}, false, {10, 50, 60, 90});
    const auto part = petrel::detail::filtered(m, [](std::uint64_t k) { return k % 2 == 1; });
    CHECK(message_keys(part) == std::vector<std::uint64_t>{1, 5, 9});
    CHECK(message_values(part) == std::vector<float>{10, 50, 90});
    CHECK(part.header.key_count == 3);
    CHECK(part.header.range_begin == 1);
    CHECK(part.header.range_end == 10);
    // Runs are expanded into listed keys.
    const auto runs = petrel::detail::filtered(push_message({2, 6}, true),
                                               [](std::uint64_t k) { return k != 3; });
    CHECK((runs.header.flags & wire::flag_key_runs) == 0);
    CHECK(message_keys(runs) == std::vector<std::uint64_t>{2, 4, 5});
    CHECK(runs.values().size() == 0);
    const auto none = petrel::detail::filtered(m, [](std::uint64_t) { return false; });
    CHECK(none.header.key_count == 0);
    CHECK(none.header.range_begin == none.header.range_end);
}

TEST_CASE("placement: a checkpoint keeps the rows a server is the primary of", "[server]") {
    petrel::shard_table t;
    t.key_type = wire::scalar_type::u64;
    t.value_type = wire::scalar_type::f32;
    t.width = 1;
    t.state_width = 1;
    const std::vector<std::uint64_t> keys{1, 4, 9, 13};
    const std::vector<float> values{1, 4, 9, 13};
    const std::vector<float> state{-1, -4, -9, -13};
    t.rows = keys.size();
    auto bytes = [](const auto& v) {
        const auto b = std::as_bytes(std::span(v));
        return std::vector<std::byte>(b.begin(), b.end());
    };
    t.keys = bytes(keys);
    t.values = bytes(values);
    t.state = bytes(state);
    petrel::detail::keep_rows_of(two_server_plan(), 2, t);
    REQUIRE(t.rows == 2);
    std::vector<std::uint64_t> k(2);
    std::vector<float> v(2);
    std::vector<float> s(2);
    std::memcpy(k.data(), t.keys.data(), t.keys.size());
    std::memcpy(v.data(), t.values.data(), t.values.size());
    std::memcpy(s.data(), t.state.data(), t.state.size());
    CHECK(k == std::vector<std::uint64_t>{4, 13});
    CHECK(v == std::vector<float>{4, 13});
    CHECK(s == std::vector<float>{-4, -13});
    auto all = t;
    petrel::detail::keep_rows_of(replication_plan{}, 7, all); // no plan: every row
    CHECK(all.rows == 2);
}
