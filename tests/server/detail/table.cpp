#include <petrel/server/detail/table.hpp>

#include <catch2/catch.hpp>

#include <petrel/core/buffer_pool.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace {

namespace wire = petrel::wire;

/// A push of `keys` with one float each (width 1) to table 0.
wire::message push_of(const std::vector<std::uint64_t>& keys, const std::vector<float>& values) {
    wire::message m;
    m.header.kind = wire::message_kind::push;
    m.header.key_type = wire::scalar_type::u64;
    m.header.value_type = wire::scalar_type::f32;
    m.header.width = 1;
    m.header.key_count = keys.size();
    m.header.range_begin = keys.front();
    m.header.range_end = keys.back() + 1;
    m.set_segment(wire::keys_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(wire::values_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

/// Rows of `keys` (width 1, no state) as a checkpoint or a replica's copy holds them.
petrel::shard_table rows_of(const std::vector<std::uint64_t>& keys,
                            const std::vector<float>& values) {
    petrel::shard_table t;
    t.key_type = wire::scalar_type::u64;
    t.value_type = wire::scalar_type::f32;
    t.width = 1;
    t.updater = "sum";
    t.rows = keys.size();
    const auto kb = std::as_bytes(std::span(keys));
    const auto vb = std::as_bytes(std::span(values));
    t.keys.assign(kb.begin(), kb.end());
    t.values.assign(vb.begin(), vb.end());
    return t;
}

std::map<std::uint64_t, float> contents(const petrel::detail::table_base& t) {
    const auto d = t.dump(0);
    std::map<std::uint64_t, float> out;
    const auto* k = reinterpret_cast<const std::uint64_t*>(d.keys.data());
    const auto* v = reinterpret_cast<const float*>(d.values.data());
    for (std::uint64_t r = 0; r < d.rows; ++r) {
        out[k[r]] = v[r];
    }
    return out;
}

} // namespace

TEST_CASE("table: a push reserved, then held while rows are loaded, updates its own keys",
          "[server]") {
    // A server accepts an ordered push (reserving its rows) and holds it for its clock;
    // meanwhile a replica copy of other keys is loaded; then the clock applies the push.
    const auto held = push_of({77, 78}, {1.0F, 2.0F});
    auto table = petrel::detail::make_table(held.header);
    REQUIRE_FALSE(table->check(held.header));
    table->reserve(held);
    table->load(rows_of({40, 41}, {5.0F, 6.0F}), [](std::uint64_t) { return true; });
    const std::array<const wire::message*, 1> clock{&held};
    SECTION("applied alone") {
        table->apply(held);
    }
    SECTION("applied as its clock") {
        table->apply_clock(clock, false);
    }
    const auto rows = contents(*table);
    CHECK(rows.at(77) == 1.0F);
    CHECK(rows.at(78) == 2.0F);
    CHECK(rows.at(40) == 5.0F);
    CHECK(rows.at(41) == 6.0F);
}

TEST_CASE("table: a push reserved right before it is applied finds its rows once", "[server]") {
    auto table = petrel::detail::make_table(push_of({1}, {0.0F}).header);
    const auto first = push_of({5, 9, 12}, {1.0F, 2.0F, 3.0F});
    table->reserve(first);
    table->apply(first);
    const auto second = push_of({9, 12, 30}, {10.0F, 20.0F, 30.0F});
    table->reserve(second);
    table->apply(second);
    const auto rows = contents(*table);
    CHECK(rows == std::map<std::uint64_t, float>{{5, 1.0F}, {9, 12.0F}, {12, 23.0F}, {30, 30.0F}});
}
