#include <petrel/server/detail/request_split.hpp>

#include "support/rows.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

using petrel::test::message_keys;
using petrel::test::message_values;

namespace wire = petrel::wire;

TEST_CASE("split_request: listed keys in parts of even counts that share the request's bytes",
          "[server]") {
    std::vector<std::uint64_t> keys;
    std::vector<float> values;
    for (std::uint64_t k = 0; k < 10; ++k) {
        keys.push_back(k * 7);
        values.push_back(static_cast<float>(k));
        values.push_back(static_cast<float>(k) + 0.5F);
    }
    const auto m = petrel::test::rows_request(wire::message_kind::push, keys, values, 2);
    const auto parts = petrel::detail::split_request(m, 3);
    REQUIRE(parts.size() == 3);
    std::vector<std::uint64_t> all_keys;
    std::vector<float> all_values;
    std::size_t next = 0;
    for (const auto& p : parts) {
        CHECK(p.first == next);
        CHECK(p.message.header.key_count * 8 == p.message.keys().size());
        CHECK(p.message.header.segment_bytes[wire::keys_segment] == p.message.keys().size());
        CHECK(p.message.header.segment_bytes[wire::values_segment] == p.message.values().size());
        CHECK(p.message.values().size() == p.message.header.key_count * 2 * sizeof(float));
        CHECK(p.message.keys().owner() == m.keys().owner()); // shared, not copied
        next += p.message.header.key_count;
        for (auto k : message_keys(p.message)) {
            all_keys.push_back(k);
        }
        for (auto v : message_values(p.message)) {
            all_values.push_back(v);
        }
    }
    CHECK(parts[0].message.header.key_count == 3);
    CHECK(parts[2].message.header.key_count == 4);
    CHECK(all_keys == keys);
    CHECK(all_values == values);

    // A pull has no values; its parts have none either. More parts than keys: one a key.
    const auto pull = petrel::test::rows_request(wire::message_kind::pull, {4, 9}, {});
    const auto pulls = petrel::detail::split_request(pull, 5);
    REQUIRE(pulls.size() == 2);
    CHECK(pulls[1].first == 1);
    CHECK(message_keys(pulls[1].message) == std::vector<std::uint64_t>{9});
    CHECK(pulls[1].message.values().empty());
}

TEST_CASE("split_request: key runs cut where a part ends, inside a run or between runs",
          "[server]") {
    // Runs [10, 16) and [100, 104): 10 keys, width 1.
    std::vector<float> values(10);
    for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<float>(i);
    }
    auto m =
        petrel::test::rows_request(wire::message_kind::push, {10, 16, 100, 104}, values, 1, true);
    m.header.key_count = 10;
    const auto parts = petrel::detail::split_request(m, 3);
    REQUIRE(parts.size() == 3);
    CHECK(message_keys(parts[0].message) == std::vector<std::uint64_t>{10, 13});
    CHECK(message_keys(parts[1].message) == std::vector<std::uint64_t>{13, 16});
    CHECK(message_keys(parts[2].message) == std::vector<std::uint64_t>{100, 104});
    CHECK(parts[1].first == 3);
    CHECK(parts[2].first == 6);
    CHECK(parts[2].message.header.key_count == 4);
    CHECK((parts[2].message.header.flags & wire::flag_key_runs) != 0);
    CHECK(message_values(parts[2].message) == std::vector<float>{6, 7, 8, 9});

    const auto four = petrel::detail::split_request(m, 4); // 2, 3, 2, 3 keys
    REQUIRE(four.size() == 4);
    CHECK(message_keys(four[1].message) == std::vector<std::uint64_t>{12, 15});
    CHECK(message_keys(four[2].message) == std::vector<std::uint64_t>{15, 16, 100, 101});
    CHECK(message_keys(four[3].message) == std::vector<std::uint64_t>{101, 104});
}

TEST_CASE("part_count: as many parts as fit the least bytes, at most the threads", "[server]") {
    using petrel::detail::part_count;
    CHECK(part_count(1000, 64, 8, 64 * 100) == 8);   // 10 would fit
    CHECK(part_count(1000, 64, 16, 64 * 400) == 2);  // 2.5 fit
    CHECK(part_count(1000, 64, 16, 64 * 1000) == 1); // one fits
    CHECK(part_count(10, 64, 16, 64 * 1000) == 1);   // not even one: the request whole
    CHECK(part_count(1000, 64, 1, 64) == 1);         // no other thread
    CHECK(part_count(1000, 64, 8, 0) == 1);
}
