#include <petrel/petrel.hpp>

#include "support/complete.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

using petrel::test::complete;

TEST_CASE("petrel.hpp: the version matches the version macros", "[umbrella]") {
    CHECK(petrel::version_string == "0.1.0");
    const std::string from_macros = std::to_string(PETREL_VERSION_MAJOR) + "." +
                                    std::to_string(PETREL_VERSION_MINOR) + "." +
                                    std::to_string(PETREL_VERSION_PATCH);
    CHECK(from_macros == petrel::version_string);
}

TEST_CASE("petrel.hpp: a trainer's names are reachable", "[umbrella]") {
    using k64 = std::uint64_t;
    STATIC_REQUIRE(petrel::key<k64>);
    STATIC_REQUIRE(complete<petrel::key_range<k64>>);
    STATIC_REQUIRE(complete<petrel::vector_clock<k64>>);
    STATIC_REQUIRE(complete<petrel::kv_pairs<k64, float>>);
    STATIC_REQUIRE(complete<petrel::kv_store<k64, float, petrel::bounded_delay<2>>>);
    STATIC_REQUIRE(complete<petrel::kv_store_options<k64>>);
    STATIC_REQUIRE(complete<petrel::worker_node>);
    STATIC_REQUIRE(complete<petrel::membership_view>);
    STATIC_REQUIRE(complete<petrel::ring>);
    STATIC_REQUIRE(complete<petrel::data_set>);
    STATIC_REQUIRE(complete<petrel::table_registry>);
    STATIC_REQUIRE(complete<petrel::function_registry>);
    STATIC_REQUIRE(complete<petrel::initializer>);
    STATIC_REQUIRE(complete<petrel::adam>);
    STATIC_REQUIRE(complete<petrel::config>);
    STATIC_REQUIRE(complete<petrel::checkpoint_manifest>);
    STATIC_REQUIRE(std::is_error_code_enum_v<petrel::errc>);
    using run_from_config = int (*)(const petrel::config&, int, const char* const*,
                                    const petrel::worker_function&, petrel::logger);
    STATIC_REQUIRE(
        std::is_same_v<decltype(static_cast<run_from_config>(&petrel::run)), run_from_config>);
    using read = petrel::checkpoint_manifest (*)(const std::filesystem::path&, std::uint32_t);
    STATIC_REQUIRE(std::is_same_v<decltype(static_cast<read>(&petrel::read_checkpoint)), read>);

    CHECK(std::string(petrel::error_category().name()) == "petrel");
    CHECK(petrel::to_string(petrel::log_level::warning) == "warning");
    CHECK(petrel::key_range<k64>::all().contains(k64{12345}));
    const std::vector<k64> keys{1, 2};
    const std::vector<float> values{3, 4};
    CHECK(petrel::kv_pairs<k64, float>::copy_of(keys, values).find(2) == 1);
    petrel::table_registry tables;
    tables.add<std::uint32_t, double>(7, {.width = 2}, petrel::adam{});
    REQUIRE(tables.find(7) != nullptr);
    CHECK(tables.find(7)->updater == "adam");
}

TEST_CASE("petrel.hpp: against the compiled library a trainer's unit does not compile the "
          "server, the manager or the transports",
          "[umbrella]") {
#if PETREL_HEADER_ONLY
    // Header-only, run's body, and with it every node it may host, is in the unit.
    STATIC_REQUIRE(complete<petrel::server_node>);
#else
    STATIC_REQUIRE_FALSE(complete<petrel::server_node>);
    STATIC_REQUIRE_FALSE(complete<petrel::manager_node>);
    STATIC_REQUIRE_FALSE(complete<petrel::tcp_transport>);
    STATIC_REQUIRE_FALSE(complete<petrel::inproc_transport>);
#endif
}

// The key lists' checksum is xxHash's, whose header defines macros (XXH64 and others).
#if !PETREL_HEADER_ONLY && defined(XXH_VERSION_MAJOR)
constexpr bool xxhash_macros_reach_a_trainer = true;
#else
constexpr bool xxhash_macros_reach_a_trainer = false;
#endif

TEST_CASE("petrel.hpp: against the compiled library xxHash's macros stay out of a trainer's "
          "unit",
          "[umbrella]") {
    STATIC_REQUIRE_FALSE(xxhash_macros_reach_a_trainer);
}
