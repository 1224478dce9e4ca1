#include <petrel/launch/detail/config_values.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using petrel::detail::command_line;
using petrel::detail::config_parse_count;
using petrel::detail::config_parse_duration;
using petrel::detail::config_parse_text;
using petrel::detail::config_pick;

namespace {

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

    const auto argv_wins = config_pick(std::optional<std::uint32_t>{}, "servers", cl, env,
                                       overridden, config_parse_count{});
    REQUIRE(argv_wins);
    CHECK(argv_wins->value == 3);
    CHECK(argv_wins->origin == "--servers");
    REQUIRE(overridden.size() == 1);
    CHECK_THAT(overridden[0], Catch::Contains("PETREL_SERVERS=\"5\""));

    const auto from_env = config_pick(std::optional<std::uint32_t>{}, "workers", cl, env,
                                      overridden, config_parse_count{});
    REQUIRE(from_env);
    CHECK(from_env->value == 7);
    CHECK(from_env->origin == "PETREL_WORKERS");

    CHECK_FALSE(config_pick(std::optional<std::string>{}, "root", cl, env, overridden,
                            config_parse_text{}));

    // The program's value is fixed: the same value elsewhere is fine, another refused.
    const auto fixed = config_pick(std::optional<std::uint32_t>{3}, "servers", cl, env_of({}),
                                   overridden, config_parse_count{});
    CHECK(fixed->origin == "config::servers");
    CHECK_THAT(refusal([&] {
                   (void)config_pick(std::optional<std::uint32_t>{4}, "servers", cl, env_of({}),
                                     overridden, config_parse_count{});
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
