#include <petrel/launch/detail/config_options.hpp>

#include <petrel/launch/config.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using petrel::detail::command_line;
using petrel::detail::config_apply;
using petrel::detail::config_index;
using petrel::detail::config_options;
using petrel::detail::config_pick_all;
using petrel::detail::config_table;
using petrel::detail::config_use;
using petrel::detail::find_config_option;
using petrel::detail::parse_command_line;

namespace {

petrel::detail::command_line parse(std::vector<const char*> argv) {
    return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

command_line options_given(std::map<std::string, std::string, std::less<>> values) {
    command_line cl;
    cl.values = std::move(values);
    return cl;
}

/// The limits `config_apply` sets from what `config_pick_all` read.
petrel::process_limits limits_of(const petrel::config& program, const command_line& cl,
                                 const petrel::environment& env,
                                 std::vector<std::string>& overridden) {
    petrel::settings s;
    config_apply(s, config_pick_all(program, cl, env, overridden));
    return s.limits;
}

/// An option set to its default without being given (`config_use::direct`) says which.
template <std::size_t I>
void check_default_in_help() {
    constexpr auto& e = std::get<I>(config_table);
    if constexpr (e.use == config_use::direct) {
        const std::string help(e.option.help);
        INFO("--" << e.option.name << ": " << help);
        if constexpr (std::is_same_v<decltype(e.fallback()), bool>) {
            CHECK(e.option.value.empty()); // a flag, off unless given
            CHECK_FALSE(e.fallback());
        } else if (e.option.name == "threads") {
            CHECK_THAT(help, Catch::Contains("Default: the machine's hardware threads"));
        } else {
            CHECK_THAT(help, Catch::Contains("Default: " +
                                             petrel::detail::config_describe(e.fallback()) + "."));
        }
    }
}

/// One valid value for each option, as text, each different from the others where their
/// types allow.
const std::map<std::string, std::string, std::less<>>& every_option_value() {
    static const std::map<std::string, std::string, std::less<>> values{
        {"servers", "3"},
        {"workers", "4"},
        {"layout", "colocated"},
        {"root", "h:1"},
        {"bind", "10.0.0.1"},
        {"advertise", "10.0.0.2"},
        {"job-id", "j"},
        {"roles", "server"},
        {"threads", "5"},
        {"heartbeat-interval", "6"},
        {"heartbeat-timeout", "70"},
        {"startup-timeout", "8"},
        {"request-timeout", "9"},
        {"restore", "ckpt"},
        {"replicas", "1"},
        {"max-servers", "10"},
        {"max-workers", "11"},
        {"join", "worker"},
        {"standby", "h:2"},
        {"manager-grace", "12"},
        {"worker-failure", "drop"},
        {"secret-file", "s"},
        {"insecure", "1"},
        {"tls-cert", "c"},
        {"tls-key", "k"},
        {"tls-ca", "a"},
        {"tls-ranks", "1"},
        {"checkpoint-root", "r"},
        {"max-connections", "13"},
        {"max-connections-per-address", "14"},
        {"idle-timeout", "15"},
        {"frame-timeout", "16"},
        {"max-receiving-bytes", "17"},
        {"max-queued-reply-bytes", "18"},
        {"max-cached-key-bytes", "19"},
        {"max-held-bytes", "20"},
        {"max-tables-per-connection", "21"},
        {"max-rows-per-connection", "22"},
        {"max-readers", "23"},
        {"departed-grace", "24"}};
    return values;
}

/// Each option was picked, from `origin_of(its name)`, with its text in
/// `every_option_value()`.
template <typename Picked, typename Origin>
void check_every_option(const Picked& picked, Origin origin_of) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        (([&] {
             const auto name = std::string(config_options()[I].name);
             const auto& v = std::get<I>(picked);
             INFO("--" << name);
             REQUIRE(v);
             CHECK(v->origin == origin_of(name));
             CHECK(v->text == every_option_value().at(name));
         }()),
         ...);
    }
    (std::make_index_sequence<petrel::detail::config_option_count>{});
}

} // namespace

TEST_CASE("config_options: each option has one name and one PETREL_ variable, with help",
          "[launch]") {
    std::set<std::string> names;
    std::set<std::string> variables;
    for (const auto& o : config_options()) {
        CHECK(names.insert(std::string(o.name)).second);
        CHECK(variables.insert(std::string(o.variable)).second);
        CHECK(o.variable.starts_with("PETREL_"));
        CHECK_FALSE(o.help.empty());
        CHECK_FALSE(o.name.starts_with("-"));
    }
    CHECK(find_config_option("tls-ca")->variable == "PETREL_TLS_CA");
    CHECK(find_config_option("insecure")->value.empty());  // a flag
    CHECK_FALSE(find_config_option("secret").has_value()); // never on a command line
    CHECK_FALSE(find_config_option("no-such-option").has_value());
}

TEST_CASE("config_options: the command line splits into Petrel's options and the program's "
          "arguments",
          "[launch]") {
    const auto cl = parse({"trainer", "--servers", "3", "data.csv", "--layout=colocated",
                           "--insecure", "--lr", "0.1", "--servers=4", "--", "--workers", "2"});
    CHECK(cl.values.at("servers") == "4"); // the last occurrence counts
    CHECK(cl.values.at("layout") == "colocated");
    CHECK(cl.values.at("insecure") == "1");
    CHECK_FALSE(cl.values.contains("workers")); // after "--": the program's
    CHECK(cl.rest ==
          std::vector<std::string>{"trainer", "data.csv", "--lr", "0.1", "--", "--workers", "2"});
    CHECK_FALSE(cl.error);
    CHECK_FALSE(cl.help);

    CHECK(parse({"trainer", "-h"}).help);
    CHECK(parse({"trainer", "--help", "--servers", "2"}).values.at("servers") == "2");
    CHECK(parse_command_line(0, nullptr).rest.empty());
}

TEST_CASE("config_options: an option without its value, and --secret, are errors that name the "
          "option and keep no secret",
          "[launch][security]") {
    const auto missing = parse({"trainer", "--root", "--servers", "2"});
    REQUIRE(missing.error);
    CHECK_THAT(*missing.error, Catch::Contains("--root needs a value"));
    CHECK(missing.values.at("servers") == "2");

    const auto secret = parse({"trainer", "--secret", "hunter2-hunter2-hunter2", "x"});
    REQUIRE(secret.error);
    CHECK_THAT(*secret.error, Catch::Contains("--secret-file") && !Catch::Contains("hunter2"));
    CHECK(secret.rest == std::vector<std::string>{"trainer", "x"});
}

TEST_CASE("config_options: every option of the table is read, from its own name, into its own "
          "field",
          "[launch]") {
    const auto& values = every_option_value();
    REQUIRE(values.size() == config_options().size());
    std::vector<std::string> overridden;
    const auto picked = config_pick_all(petrel::config{}, options_given(values),
                                        petrel::map_environment({}), overridden);
    check_every_option(picked, [](const std::string& name) { return "--" + name; });

    // From the environment: each option from the variable named after it.
    const auto variable_of = [](std::string name) {
        std::transform(name.begin(), name.end(), name.begin(),
                       [](char c) { return c == '-' ? '_' : static_cast<char>(std::toupper(c)); });
        return "PETREL_" + name;
    };
    std::map<std::string, std::string, std::less<>> env;
    for (const auto& [name, text] : values) {
        env.emplace(variable_of(name), text);
    }
    check_every_option(
        config_pick_all(petrel::config{}, command_line{}, petrel::map_environment(env), overridden),
        variable_of);

    // From the program: each field of `config` reaches its own option.
    petrel::config program;
    program.servers = 3;
    program.workers = 4;
    program.layout = petrel::layout::colocated;
    program.root = "h:1";
    program.bind = "10.0.0.1";
    program.advertise = "10.0.0.2";
    program.job_id = "j";
    program.roles = std::vector<petrel::node_role>{petrel::node_role::server};
    program.threads = 5;
    program.heartbeat_interval = 6ms;
    program.heartbeat_timeout = 70ms;
    program.startup_timeout = 8ms;
    program.request_timeout = 9ms;
    program.restore = "ckpt";
    program.replicas = 1;
    program.max_servers = 10;
    program.max_workers = 11;
    program.join = petrel::node_role::worker;
    program.standby = "h:2";
    program.manager_grace = 12ms;
    program.worker_failure = petrel::worker_failure::drop;
    program.secret_file = "s";
    program.insecure = true;
    program.tls_cert = "c";
    program.tls_key = "k";
    program.tls_ca = "a";
    program.tls_ranks = true;
    program.checkpoint_root = "r";
    program.limits = {.max_connections = 13,
                      .max_connections_per_address = 14,
                      .idle_timeout = 15ms,
                      .frame_timeout = 16ms,
                      .max_receiving_bytes = 17,
                      .max_queued_reply_bytes = 18,
                      .max_cached_key_bytes = 19,
                      .max_held_bytes = 20,
                      .max_tables_per_connection = 21,
                      .max_rows_per_connection = 22,
                      .max_readers = 23,
                      .departed_grace = 24ms};
    check_every_option(
        config_pick_all(program, command_line{}, petrel::map_environment({}), overridden),
        [](std::string name) {
            std::replace(name.begin(), name.end(), '-', '_');
            return "config::" + name;
        });
    CHECK(std::get<config_index("threads")>(picked)->value == 5u);
    CHECK(std::get<config_index("worker-failure")>(picked)->value == petrel::worker_failure::drop);

    // The settings of the same name, and the limits.
    petrel::settings s;
    config_apply(s, picked);
    CHECK(s.threads == 5u);
    CHECK(s.heartbeat_interval == 6ms);
    CHECK(s.heartbeat_timeout == 70ms);
    CHECK(s.startup_timeout == 8ms);
    CHECK(s.request_timeout == 9ms);
    CHECK(s.manager_grace == 12ms);
    CHECK(s.worker_failure == petrel::worker_failure::drop);
    CHECK(s.insecure);
    CHECK(s.limits.max_connections == 13u);
    CHECK(s.limits.departed_grace == 24ms);

    // Given nowhere: unset, and the settings take their defaults.
    const auto none =
        config_pick_all(petrel::config{}, command_line{}, petrel::map_environment({}), overridden);
    std::apply([](const auto&... v) { CHECK((!v && ...)); }, none);
    petrel::settings d;
    config_apply(d, none);
    CHECK(d.threads == petrel::default_io_threads());
    CHECK(d.heartbeat_interval == 200ms);
    CHECK(d.manager_grace == 30000ms);
    CHECK(d.limits == petrel::process_limits{});
}

TEST_CASE("config_options: the help of an option with a default states it", "[launch]") {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        (check_default_in_help<I>(), ...);
    }
    (std::make_index_sequence<petrel::detail::config_option_count>{});
}

TEST_CASE("config_options: each limit from the program, the command line or the environment; "
          "those given nowhere stay unset",
          "[launch][security]") {
    std::vector<std::string> overridden;
    SECTION("none given") {
        CHECK(limits_of({}, {}, petrel::map_environment({}), overridden) ==
              petrel::process_limits{});
    }
    SECTION("every one, from the command line") {
        const auto l = limits_of({},
                                 options_given({{"max-connections", "100"},
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
        petrel::config program;
        program.limits.max_rows_per_connection = 500;
        const auto l = limits_of(program, options_given({{"max-connections", "20"}}),
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
            (void)limits_of(program, options_given({{"max-rows-per-connection", "600"}}),
                            petrel::map_environment({}), overridden),
            Catch::Contains("config::max_rows_per_connection") && Catch::Contains("disagree"));
    }
    SECTION("refused: a limit that would refuse everything, or no number") {
        for (const auto* name :
             {"max-connections", "max-connections-per-address", "max-held-bytes"}) {
            INFO(name);
            CHECK_THROWS_WITH(
                (void)limits_of({}, options_given({{name, "0"}}), petrel::map_environment({}),
                                overridden),
                Catch::Contains("--" + std::string(name) + "=\"0\": must be at least 1"));
        }
        CHECK_THROWS_WITH((void)limits_of({}, {},
                                          petrel::map_environment({{"PETREL_MAX_READERS", "many"}}),
                                          overridden),
                          Catch::Contains("PETREL_MAX_READERS=\"many\": not a number"));
    }
}
