#include <petrel/launch/detail/config_values.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using petrel::detail::command_line;
using petrel::detail::config_option;
using petrel::detail::config_parse_amount;
using petrel::detail::config_parse_count;
using petrel::detail::config_parse_duration;
using petrel::detail::config_parse_text;
using petrel::detail::config_pick;

namespace {

const config_option servers_option{"servers", "N", "PETREL_SERVERS", "Server nodes."};
const config_option workers_option{"workers", "N", "PETREL_WORKERS", "Worker nodes."};
const config_option root_option{"root", "host:port", "PETREL_ROOT", "The root."};

petrel::environment env_of(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
        const auto it = vars.find(std::string(name));
        return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
}

/// The `config_error` that `f` throws, or "".
template <typename F>
std::string refusal(F&& f) {
    try {
        f();
    } catch (const petrel::config_error& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("config_values: a setting comes from the program, else the command line, else the "
          "environment, and says where",
          "[launch]") {
    command_line cl;
    cl.values["servers"] = "3";
    std::vector<std::string> overridden;
    const auto env = env_of({{"PETREL_SERVERS", "5"}, {"PETREL_WORKERS", "7"}});

    const auto argv_wins = config_pick(std::optional<std::uint32_t>{}, servers_option, cl, env,
                                       overridden, config_parse_count{});
    REQUIRE(argv_wins);
    CHECK(argv_wins->value == 3);
    CHECK(argv_wins->origin == "--servers");
    REQUIRE(overridden.size() == 1);
    CHECK_THAT(overridden[0], Catch::Contains("PETREL_SERVERS=\"5\""));

    const auto from_env = config_pick(std::optional<std::uint32_t>{}, workers_option, cl, env,
                                      overridden, config_parse_count{});
    REQUIRE(from_env);
    CHECK(from_env->value == 7);
    CHECK(from_env->origin == "PETREL_WORKERS");

    CHECK_FALSE(config_pick(std::optional<std::string>{}, root_option, cl, env, overridden,
                            config_parse_text{}));

    // The program's value is fixed: the same value elsewhere is fine, another refused.
    const auto fixed = config_pick(std::optional<std::uint32_t>{3}, servers_option, cl, env_of({}),
                                   overridden, config_parse_count{});
    CHECK(fixed->origin == "config::servers");
    CHECK_THAT(refusal([&] {
                   (void)config_pick(std::optional<std::uint32_t>{4}, servers_option, cl,
                                     env_of({}), overridden, config_parse_count{});
               }),
               Catch::Contains("config::servers=\"4\"") && Catch::Contains("disagree"));
}

TEST_CASE("config_values: bad text names where it came from", "[launch]") {
    CHECK(config_parse_duration{}("--heartbeat-interval", "250") == 250ms);
    CHECK_THAT(refusal([] { (void)config_parse_duration{}("--heartbeat-interval", "1s"); }),
               Catch::Contains("--heartbeat-interval=\"1s\""));
    CHECK_THAT(refusal([] { (void)config_parse_count{}("PETREL_SERVERS", "-2"); }),
               Catch::Contains("PETREL_SERVERS=\"-2\""));
    CHECK(config_parse_text{}("--root", "h:1") == "h:1");
}

TEST_CASE("config_values: amounts are whole numbers, with K, M, G or T for powers of 1024",
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
