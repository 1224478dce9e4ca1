#include <petrel/server/detail/row_copy.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace {

namespace wire = petrel::wire;

template <typename T>
std::vector<std::byte> bytes(const std::vector<T>& v) {
    const auto b = std::as_bytes(std::span(v));
    return {b.begin(), b.end()};
}

/// Rows of keys 0, 10, 20, ... with two values (k, k + 0.5) and one state value (-k).
petrel::shard_table table_of(std::uint64_t n) {
    petrel::shard_table t;
    t.table_id = 3;
    t.key_type = wire::scalar_type::u64;
    t.value_type = wire::scalar_type::f64;
    t.width = 2;
    t.state_width = 1;
    t.rows = n;
    std::vector<std::uint64_t> keys;
    std::vector<double> values;
    std::vector<double> state;
    for (std::uint64_t i = 0; i < n; ++i) {
        keys.push_back(i * 10);
        values.push_back(static_cast<double>(i * 10));
        values.push_back(static_cast<double>(i * 10) + 0.5);
        state.push_back(-static_cast<double>(i * 10));
    }
    t.keys = bytes(keys);
    t.values = bytes(values);
    t.state = bytes(state);
    return t;
}

} // namespace

TEST_CASE("row_copy: rows go whole, in pieces, and come back as they were", "[server]") {
    const auto all = table_of(10);
    std::vector<wire::message> sent;
    // 8-byte keys and 3 doubles per row: 32 bytes, so 3 rows fit in 100 bytes.
    const auto n = petrel::detail::copy_rows(
        all, 7, [](std::uint64_t k) { return k != 50; },
        [&](wire::message m) { sent.push_back(std::move(m)); }, 100);
    CHECK(n == 9);
    REQUIRE(sent.size() == 3);
    CHECK(sent[0].header.key_count == 3);
    CHECK(sent[2].header.key_count == 3);
    CHECK(sent[0].header.range_begin == 0);
    CHECK(sent[0].header.range_end == 21);
    CHECK(sent[1].header.range_begin == 30);
    CHECK(sent[1].header.range_end == 61); // 30, 40, 60: 50 is not copied
    for (const auto& m : sent) {
        CHECK(m.header.kind == wire::message_kind::push);
        CHECK(m.header.table_id == 3);
        CHECK(m.header.width == 3);
        CHECK(m.header.clock == 7);
        CHECK(m.header.worker == wire::no_worker);
    }
    // Loaded back: the same rows, values and state apart again.
    petrel::shard_table back;
    REQUIRE_FALSE(petrel::detail::rows_of_copy(sent[1], 2, 1, back));
    CHECK(back.rows == 3);
    CHECK(back.table_id == 3);
    std::vector<std::uint64_t> keys(3);
    std::vector<double> values(6);
    std::vector<double> state(3);
    std::memcpy(keys.data(), back.keys.data(), back.keys.size());
    std::memcpy(values.data(), back.values.data(), back.values.size());
    std::memcpy(state.data(), back.state.data(), back.state.size());
    CHECK(keys == std::vector<std::uint64_t>{30, 40, 60});
    CHECK(values == std::vector<double>{30, 30.5, 40, 40.5, 60, 60.5});
    CHECK(state == std::vector<double>{-30, -40, -60});
}

TEST_CASE("row_copy: a copy of another width or of the wrong size is refused", "[server]") {
    const auto all = table_of(2);
    std::vector<wire::message> sent;
    (void)petrel::detail::copy_rows(
        all, 0, [](std::uint64_t) { return true; },
        [&](wire::message m) { sent.push_back(std::move(m)); });
    REQUIRE(sent.size() == 1);
    petrel::shard_table back;
    CHECK(petrel::detail::rows_of_copy(sent[0], 3, 1, back) == petrel::errc::width_mismatch);
    auto runs = sent[0];
    runs.header.flags |= wire::flag_key_runs;
    CHECK(petrel::detail::rows_of_copy(runs, 2, 1, back) == petrel::errc::invalid_argument);
    auto short_rows = sent[0];
    short_rows.header.key_count = 3; // more rows than it carries
    CHECK(petrel::detail::rows_of_copy(short_rows, 2, 1, back) == petrel::errc::invalid_argument);
    // Nothing kept: no message.
    std::size_t emitted = 0;
    CHECK(petrel::detail::copy_rows(
              all, 0, [](std::uint64_t) { return false; }, [&](wire::message) { ++emitted; }) == 0);
    CHECK(emitted == 0);
}
