#include <petrel/server/checkpoint_loader.hpp>

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <petrel/server/updater.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;

/// Writes table `id` (u64 keys, float values, width 1, summing) as the shards of
/// `servers` servers, server s holding the keys k with k % servers == s, value = k; the
/// manifest records `clock` and `clock_limit`.
petrel::checkpoint_manifest write_table(const fs::path& dir, std::uint32_t id, std::uint64_t keys,
                                        std::uint32_t servers, std::uint64_t clock,
                                        std::uint64_t clock_limit) {
    petrel::checkpoint_manifest m;
    m.table_id = id;
    m.updater = "sum";
    m.clock = clock;
    m.clock_limit = clock_limit;
    const auto table_dir = petrel::detail::table_dir(dir, id);
    for (std::uint32_t s = 0; s < servers; ++s) {
        std::vector<std::uint64_t> k;
        std::vector<float> v;
        for (std::uint64_t key = s; key < keys; key += servers) {
            k.push_back(key);
            v.push_back(static_cast<float>(key));
        }
        petrel::shard_table t;
        t.table_id = id;
        t.key_type = petrel::wire::scalar_type::u64;
        t.value_type = petrel::wire::scalar_type::f32;
        t.width = 1;
        t.updater = "sum";
        t.rows = k.size();
        const auto kb = std::as_bytes(std::span(k));
        const auto vb = std::as_bytes(std::span(v));
        t.keys.assign(kb.begin(), kb.end());
        t.values.assign(vb.begin(), vb.end());
        m.shards.push_back(petrel::detail::write_shard(
            table_dir / petrel::detail::shard_file_name(s + 1), s + 1, t));
    }
    petrel::detail::write_manifest(table_dir, m);
    return m;
}

} // namespace

TEST_CASE("checkpoint_loader: table directory ids", "[checkpoint]") {
    std::uint32_t id = 0;
    CHECK(petrel::detail::parse_table_id("0", id));
    CHECK(id == 0);
    CHECK(petrel::detail::parse_table_id("4294967295", id));
    CHECK(id == 4294967295U);
    CHECK_FALSE(petrel::detail::parse_table_id("4294967296", id));
    CHECK_FALSE(petrel::detail::parse_table_id("", id));
    CHECK_FALSE(petrel::detail::parse_table_id("12a", id));
    CHECK_FALSE(petrel::detail::parse_table_id("-1", id));
    CHECK_FALSE(petrel::detail::parse_table_id("00000000001", id));
}

TEST_CASE("checkpoint_loader: every table of a checkpoint, the rows a server owns, and the "
          "clocks",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    write_table(dir.path(), 2, 1000, 3, 40, 43);
    write_table(dir.path(), 9, 10, 1, 7, 7);
    fs::create_directories(dir.path() / "not-a-table");
    fs::create_directories(dir.path() / "table-x");

    auto all = petrel::detail::load_checkpoint(dir.path(), nullptr, {}, std::uint64_t{1} << 30);
    REQUIRE(all.size() == 2);
    CHECK(all.at(2).table->size() == 1000);
    CHECK(all.at(2).clock == 40);
    CHECK(all.at(2).clock_limit == 43);
    CHECK(all.at(9).table->size() == 10);
    CHECK(all.at(9).clock == 7);

    // Onto another placement: only the keys `owns` gives this server.
    auto even = petrel::detail::load_checkpoint(
        dir.path(), nullptr,
        [](std::uint32_t table, std::uint64_t key) { return table == 9 || key % 2 == 0; },
        std::uint64_t{1} << 30);
    CHECK(even.at(2).table->size() == 500);
    CHECK(even.at(9).table->size() == 10);
}

TEST_CASE("checkpoint_loader: a checkpoint that cannot be loaded is refused, naming why",
          "[checkpoint]") {
    petrel::test::temp_dir dir;
    const auto big = std::uint64_t{1} << 30;
    SECTION("not a directory") {
        CHECK_THROWS_WITH(petrel::detail::load_checkpoint(dir.path() / "none", nullptr, {}, big),
                          Catch::Contains("is not a directory"));
    }
    SECTION("no table") {
        CHECK_THROWS_WITH(petrel::detail::load_checkpoint(dir.path(), nullptr, {}, big),
                          Catch::Contains("holds no table checkpoint"));
    }
    SECTION("a manifest in another table's directory") {
        write_table(dir.path(), 2, 10, 1, 1, 1);
        fs::rename(petrel::detail::table_dir(dir.path(), 2),
                   petrel::detail::table_dir(dir.path(), 5));
        CHECK_THROWS_WITH(petrel::detail::load_checkpoint(dir.path(), nullptr, {}, big),
                          Catch::Contains("records table 2 in the directory of table 5"));
    }
    SECTION("a shard larger than allowed") {
        write_table(dir.path(), 2, 1000, 1, 1, 1);
        CHECK_THROWS_AS(petrel::detail::load_checkpoint(dir.path(), nullptr, {}, 64),
                        petrel::checkpoint_error);
    }
    SECTION("a declaration with another update rule") {
        write_table(dir.path(), 2, 10, 1, 1, 1);
        petrel::table_registry declared;
        declared.add<std::uint64_t, float>(2, {.width = 1}, petrel::adagrad{.eta = 0.1});
        CHECK_THROWS_WITH(petrel::detail::load_checkpoint(dir.path(), &declared, {}, big),
                          Catch::Contains("table 2 was saved with update rule 'sum'") &&
                              Catch::Contains("which its declaration does not match"));
    }
    SECTION("a summing table saved with another rule, undeclared") {
        petrel::checkpoint_manifest m;
        m.table_id = 3;
        m.updater = "adagrad";
        m.state_width = 1;
        CHECK_THROWS_WITH(petrel::detail::table_for_checkpoint(m, dir.path(), nullptr),
                          Catch::Contains("declare it in the table_registry"));
    }
}
