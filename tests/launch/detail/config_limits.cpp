#include <petrel/launch/detail/config_limits.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using petrel::detail::command_line;
using petrel::detail::config_limits;
using petrel::detail::config_parse_amount;

namespace {

command_line command_of(std::map<std::string, std::string, std::less<>> values) {
    command_line cl;
    cl.values = std::move(values);
    return cl;
}

} // namespace

TEST_CASE("config_limits: amounts are whole numbers, with K, M, G or T for powers of 1024",
          "[launch][security]") {
    const config_parse_amount amount;
    CHECK(amount("--x", "0") == 0);
    CHECK(amount("--x", "4096") == 4096);
    CHECK(amount("--x", "64K") == 64u << 10);
    CHECK(amount("--x", "3M") == 3u << 20);
    CHECK(amount("--x", "2G") == std::uint64_t{2} << 30);
    CHECK(amount("--x", "1T") == std::uint64_t{1} << 40);
    CHECK(amount("--x", "18446744073709551615") == ~std::uint64_t{0});
    for (const auto* bad : {"", "K", "-1", "1.5G", "12k", "1KB", " 1", "0x10"}) {
        INFO(bad);
        CHECK_THROWS_WITH((void)amount("--x", bad),
                          Catch::Contains("--x=\"" + std::string(bad) + "\": not a number"));
    }
    CHECK_THROWS_WITH((void)amount("--x", "18446744073709551616"), Catch::Contains("too large"));
    CHECK_THROWS_WITH((void)amount("--x", "16777216T"), Catch::Contains("too large"));
}

TEST_CASE("config_limits: each limit from the program, the command line or the environment; "
          "those given nowhere stay unset",
          "[launch][security]") {
    std::vector<std::string> overridden;
    SECTION("none given") {
        CHECK(config_limits({}, {}, petrel::map_environment({}), overridden) ==
              petrel::process_limits{});
    }
    SECTION("every one, from the command line") {
        const auto l = config_limits({},
                                     command_of({{"max-connections", "100"},
                                                 {"max-connections-per-address", "10"},
                                                 {"idle-timeout", "0"},
                                                 {"frame-timeout", "5000"},
                                                 {"max-receiving-bytes", "256M"},
                                                 {"max-queued-reply-bytes", "1G"},
                                                 {"max-cached-key-bytes", "0"},
                                                 {"max-held-bytes", "64M"},
                                                 {"max-tables-per-connection", "8"},
                                                 {"max-rows-per-connection", "1M"},
                                                 {"max-readers", "0"},
                                                 {"departed-grace", "1000"}}),
                                     petrel::map_environment({}), overridden);
        CHECK(l == petrel::process_limits{.max_connections = 100,
                                          .max_connections_per_address = 10,
                                          .idle_timeout = 0ms,
                                          .frame_timeout = 5000ms,
                                          .max_receiving_bytes = 256u << 20,
                                          .max_queued_reply_bytes = 1u << 30,
                                          .max_cached_key_bytes = 0,
                                          .max_held_bytes = 64u << 20,
                                          .max_tables_per_connection = 8,
                                          .max_rows_per_connection = 1u << 20,
                                          .max_readers = 0,
                                          .departed_grace = 1000ms});
    }
    SECTION("the environment; the command line wins and says so; the program fixes one") {
        const petrel::process_limits program{.max_rows_per_connection = 500};
        const auto l = config_limits(program, command_of({{"max-connections", "20"}}),
                                     petrel::map_environment({{"PETREL_MAX_CONNECTIONS", "30"},
                                                              {"PETREL_IDLE_TIMEOUT", "60000"}}),
                                     overridden);
        CHECK(l.max_connections == 20u);
        CHECK(l.idle_timeout == 60000ms);
        CHECK(l.max_rows_per_connection == 500u);
        CHECK_FALSE(l.max_readers);
        REQUIRE(overridden.size() == 1);
        CHECK_THAT(overridden[0], Catch::Contains("PETREL_MAX_CONNECTIONS=\"30\""));
        CHECK_THROWS_WITH(
            (void)config_limits(program, command_of({{"max-rows-per-connection", "600"}}),
                                petrel::map_environment({}), overridden),
            Catch::Contains("config::max_rows_per_connection") && Catch::Contains("disagree"));
    }
    SECTION("refused: a limit that would refuse everything, or no number") {
        for (const auto* name :
             {"max-connections", "max-connections-per-address", "max-held-bytes"}) {
            INFO(name);
            CHECK_THROWS_WITH(
                (void)config_limits({}, command_of({{name, "0"}}), petrel::map_environment({}),
                                    overridden),
                Catch::Contains("--" + std::string(name) + "=\"0\": must be at least 1"));
        }
        CHECK_THROWS_WITH(
            (void)config_limits({}, {}, petrel::map_environment({{"PETREL_MAX_READERS", "many"}}),
                                overridden),
            Catch::Contains("PETREL_MAX_READERS=\"many\": not a number"));
    }
}
