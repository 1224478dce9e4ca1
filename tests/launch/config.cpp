#include <petrel/launch/config.hpp>

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

using petrel::config;
using petrel::config_error;
using petrel::layout;
using petrel::node_role;
using petrel::settings;
using namespace std::chrono_literals;

namespace {

using vars = std::map<std::string, std::string, std::less<>>;
using args = std::vector<std::string>;

/// Resolves with argv = {"prog", a...} and only the variables `env`.
settings resolve_with(const config& program, const args& a = {}, vars env = {}) {
    std::vector<const char*> argv{"prog"};
    for (const auto& s : a) {
        argv.push_back(s.c_str());
    }
    argv.push_back(nullptr);
    return petrel::resolve(program, static_cast<int>(argv.size() - 1), argv.data(),
                           petrel::map_environment(std::move(env)));
}

/// The config_error's message; empty when nothing is thrown.
std::string resolve_error(const config& program, const args& a = {}, vars env = {}) {
    try {
        (void)resolve_with(program, a, std::move(env));
    } catch (const config_error& e) {
        return e.what();
    }
    return {};
}

/// Variables for rank `rank` of `size` processes started by the petrel launcher, with the
/// root at 10.0.0.1:7000, plus `more`.
vars launched_plain(std::uint32_t rank, std::uint32_t size, vars more = {}) {
    more.emplace("PETREL_RANK", std::to_string(rank));
    more.emplace("PETREL_SIZE", std::to_string(size));
    more.emplace("PETREL_ROOT", "10.0.0.1:7000");
    return more;
}

/// As `launched_plain`, and an advertised host unless `more` has one.
vars launched(std::uint32_t rank, std::uint32_t size, vars more = {}) {
    more.emplace("PETREL_ADVERTISE", "node-" + std::to_string(rank));
    return launched_plain(rank, size, std::move(more));
}

using roles = std::vector<node_role>;

} // namespace

TEST_CASE("config: embedded defaults", "[launch]") {
    const auto s = resolve_with({});
    CHECK(s.launch.kind == petrel::launcher_kind::embedded);
    CHECK(s.servers == 2);
    CHECK(s.workers == 2);
    CHECK(s.layout == layout::dedicated);
    CHECK(s.root == "127.0.0.1:0");
    CHECK(s.bind == "127.0.0.1");
    CHECK(s.advertise == "127.0.0.1");
    CHECK(s.job_id == "petrel");
    CHECK(s.roles == roles{node_role::manager, node_role::server, node_role::worker});
    CHECK(s.threads == petrel::default_io_threads());
    CHECK(s.heartbeat_interval == 200ms);
    CHECK(s.heartbeat_timeout == 2000ms);
    CHECK(s.startup_timeout == 30000ms);
    CHECK(s.request_timeout == 30000ms);
    CHECK_FALSE(s.help);
    CHECK(s.rest == args{"prog"});
    CHECK(s.managers_here == 1);
    CHECK(s.servers_here == 2);
    CHECK(s.workers_here == 2);
    CHECK(s.first_server == 0);
    CHECK(s.first_worker == 0);
}

TEST_CASE("config: embedded hosts every node it is given", "[launch]") {
    config c;
    c.servers = 3;
    const auto s = resolve_with(c, {"--workers", "5", "--layout=colocated"});
    CHECK(s.servers == 3);
    CHECK(s.workers == 5);
    CHECK(s.layout == layout::colocated);
    CHECK(s.managers_here == 1);
    CHECK(s.servers_here == 3);
    CHECK(s.workers_here == 5);
    CHECK(s.first_server == 0);
    CHECK(s.first_worker == 0);
}

TEST_CASE("config: the program fixes a setting, argv overrides the environment and says so",
          "[launch]") {
    const vars env = {{"PETREL_SERVERS", "7"},
                      {"PETREL_LAYOUT", "colocated"},
                      {"PETREL_ROOT", "env-host:1"},
                      {"PETREL_THREADS", "9"},
                      {"PETREL_HEARTBEAT_INTERVAL", "70"},
                      {"PETREL_JOB_ID", "from-env"},
                      {"PETREL_BIND", "10.9.9.9"}};

    SECTION("each from one place") {
        config c;
        c.servers = 3;
        c.heartbeat_interval = 30ms;
        const auto s = resolve_with(c, {"--threads=6", "--job-id", "from-argv"},
                                    {{"PETREL_LAYOUT", "colocated"}, {"PETREL_BIND", "10.9.9.9"}});
        CHECK(s.servers == 3);
        CHECK(s.heartbeat_interval == 30ms);
        CHECK(s.threads == 6);
        CHECK(s.job_id == "from-argv");
        CHECK(s.layout == layout::colocated);
        CHECK(s.bind == "10.9.9.9");
    }
    SECTION("environment only: its values") {
        const auto s = resolve_with({}, {}, env);
        CHECK(s.servers == 7);
        CHECK(s.layout == layout::colocated);
        CHECK(s.root == "env-host:1");
        CHECK(s.threads == 9);
        CHECK(s.heartbeat_interval == 70ms);
        CHECK(s.job_id == "from-env");
        CHECK(s.bind == "10.9.9.9");
        CHECK(s.advertise == "10.9.9.9");
    }
    SECTION("nothing: the defaults") {
        const auto s = resolve_with({});
        CHECK(s.servers == 2);
        CHECK(s.threads == petrel::default_io_threads());
        CHECK(s.job_id == "petrel");
    }
    SECTION("argv over the environment, each override noted") {
        const args argv = {"--servers",   "5",           "--layout=dedicated",   "--root",
                           "argv-host:2", "--threads=6", "--heartbeat-interval", "50",
                           "--job-id",    "from-argv"};
        const auto s = resolve_with({}, argv, env);
        CHECK(s.servers == 5);
        CHECK(s.layout == layout::dedicated);
        CHECK(s.root == "argv-host:2");
        CHECK(s.threads == 6);
        CHECK(s.heartbeat_interval == 50ms);
        CHECK(s.job_id == "from-argv");
        CHECK(s.bind == "10.9.9.9");
        REQUIRE(s.overridden.size() == 6);
        CHECK(s.overridden[0] == "--servers=\"5\" overrides PETREL_SERVERS=\"7\"");
        // The same value in both places overrides nothing.
        CHECK(resolve_with({}, {"--servers=7"}, env).overridden.empty());
    }
    SECTION("the same value in several places") {
        config c;
        c.servers = 7;
        c.layout = layout::colocated;
        const auto s =
            resolve_with(c, {"--servers", "7", "--layout=colocated", "--threads=9"}, env);
        CHECK(s.servers == 7);
        CHECK(s.layout == layout::colocated);
        CHECK(s.threads == 9);
    }
    SECTION("the program and argv disagree: refused, naming both") {
        // The README's example fixes servers = 2; `--servers 3` is not silently dropped.
        config c;
        c.servers = 2;
        const auto why = resolve_error(c, {"--servers", "3"});
        CHECK_THAT(why, Catch::StartsWith("petrel: config::servers=\"2\" (in the program) and "
                                          "--servers=\"3\" (on the command line) disagree") &&
                            Catch::Contains("leave config::servers unset"));
    }
    SECTION("the program and the environment disagree") {
        config c;
        c.job_id = "from-program";
        CHECK_THAT(resolve_error(c, {}, {{"PETREL_JOB_ID", "from-env"}}),
                   Catch::Contains("config::job_id=\"from-program\"") &&
                       Catch::Contains("PETREL_JOB_ID=\"from-env\" (in the environment)"));
    }
    SECTION("a malformed value is reported wherever it is") {
        config c;
        c.threads = 1;
        CHECK_THAT(resolve_error(c, {}, {{"PETREL_THREADS", "many"}}),
                   Catch::Contains("PETREL_THREADS"));
        CHECK_THAT(resolve_error(c, {"--threads=many"}), Catch::Contains("--threads"));
    }
}

TEST_CASE("config: every option in both forms", "[launch]") {
    const auto check = [](const args& separate, const args& joined) {
        const vars env = launched(0, 4);
        const auto a = resolve_with({}, separate, env);
        const auto b = resolve_with({}, joined, env);
        CHECK(a.servers == 3);
        CHECK(a.workers == 1);
        CHECK(a.layout == layout::dedicated);
        CHECK(a.root == "h:9");
        CHECK(a.bind == "10.0.0.5");
        CHECK(a.advertise == "node-a");
        CHECK(a.job_id == "j1");
        CHECK(a.threads == 8);
        CHECK(a.heartbeat_interval == 10ms);
        CHECK(a.heartbeat_timeout == 20ms);
        CHECK(a.startup_timeout == 30ms);
        CHECK(a.request_timeout == 40ms);
        CHECK(a.rest == args{"prog"});
        CHECK(b.servers == a.servers);
        CHECK(b.workers == a.workers);
        CHECK(b.layout == a.layout);
        CHECK(b.root == a.root);
        CHECK(b.bind == a.bind);
        CHECK(b.advertise == a.advertise);
        CHECK(b.job_id == a.job_id);
        CHECK(b.threads == a.threads);
        CHECK(b.heartbeat_interval == a.heartbeat_interval);
        CHECK(b.heartbeat_timeout == a.heartbeat_timeout);
        CHECK(b.startup_timeout == a.startup_timeout);
        CHECK(b.request_timeout == a.request_timeout);
        CHECK(b.rest == a.rest);
    };
    check({"--servers",
           "3",
           "--workers",
           "1",
           "--layout",
           "dedicated",
           "--root",
           "h:9",
           "--bind",
           "10.0.0.5",
           "--advertise",
           "node-a",
           "--job-id",
           "j1",
           "--threads",
           "8",
           "--heartbeat-interval",
           "10",
           "--heartbeat-timeout",
           "20",
           "--startup-timeout",
           "30",
           "--request-timeout",
           "40"},
          {"--servers=3", "--workers=1", "--layout=dedicated", "--root=h:9", "--bind=10.0.0.5",
           "--advertise=node-a", "--job-id=j1", "--threads=8", "--heartbeat-interval=10",
           "--heartbeat-timeout=20", "--startup-timeout=30", "--request-timeout=40"});

    const auto a =
        resolve_with({}, {"--roles", "server", "--servers", "2", "--workers", "2"}, launched(1, 4));
    const auto b =
        resolve_with({}, {"--roles=server", "--servers=2", "--workers=2"}, launched(1, 4));
    CHECK(a.roles == roles{node_role::server});
    CHECK(b.roles == a.roles);
}

TEST_CASE("config: rest keeps the program's arguments in order", "[launch]") {
    const auto s = resolve_with({}, {"-v", "--lr", "0.1", "--servers", "3", "data.txt", "--other=1",
                                     "--server=4", "-servers", "--", "--workers", "9"});
    CHECK(s.servers == 3);
    CHECK(s.workers == 2);
    CHECK(s.rest == args{"prog", "-v", "--lr", "0.1", "data.txt", "--other=1", "--server=4",
                         "-servers", "--", "--workers", "9"});
}

TEST_CASE("config: the last occurrence of an option counts", "[launch]") {
    const auto s = resolve_with({}, {"--threads=3", "--threads", "5"});
    CHECK(s.threads == 5);
}

TEST_CASE("config: no argv at all", "[launch]") {
    const auto s = petrel::resolve({}, 0, nullptr, petrel::map_environment({}));
    CHECK(s.rest.empty());
    CHECK(s.servers == 2);
}

TEST_CASE("config: --help and -h", "[launch]") {
    for (const std::string flag : {"--help", "-h"}) {
        CAPTURE(flag);
        const auto s = resolve_with({}, {"--servers=3", flag, "input"});
        CHECK(s.help);
        CHECK(s.servers == 3);
        CHECK(s.rest == args{"prog", "input"});
    }
    SECTION("help does not throw when the settings are bad") {
        const auto s = resolve_with({}, {"--threads=x", "--help", "input", "--servers"},
                                    {{"PETREL_RANK", "1"}, {"PETREL_SIZE", "4"}});
        CHECK(s.help);
        CHECK(s.rest == args{"prog", "input"});
        CHECK(s.servers == 2);
    }
    SECTION("after --, -h is the program's") {
        const auto s = resolve_with({}, {"--", "-h"});
        CHECK_FALSE(s.help);
        CHECK(s.rest == args{"prog", "--", "-h"});
    }
}

TEST_CASE("config: usage lists every option and variable", "[launch]") {
    const std::string text = petrel::usage("train");
    CHECK_THAT(text, Catch::Contains("train"));
    for (const char* option :
         {"--servers", "--workers", "--layout", "--root", "--bind", "--advertise", "--job-id",
          "--roles", "--threads", "--heartbeat-interval", "--heartbeat-timeout",
          "--startup-timeout", "--request-timeout", "--help", "-h"}) {
        CHECK_THAT(text, Catch::Contains(option));
    }
    for (const char* variable :
         {"PETREL_SERVERS", "PETREL_WORKERS", "PETREL_LAYOUT", "PETREL_ROOT", "PETREL_BIND",
          "PETREL_ADVERTISE", "PETREL_JOB_ID", "PETREL_ROLES", "PETREL_THREADS",
          "PETREL_HEARTBEAT_INTERVAL", "PETREL_HEARTBEAT_TIMEOUT", "PETREL_STARTUP_TIMEOUT",
          "PETREL_REQUEST_TIMEOUT", "PETREL_RANK", "PETREL_SIZE", "PETREL_LOCAL_RANK",
          "PETREL_LOCAL_SIZE"}) {
        CHECK_THAT(text, Catch::Contains(variable));
    }
    for (const char* launcher : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                                 "JOB_COMPLETION_INDEX", "mpirun", "srun", "Kubernetes"}) {
        CHECK_THAT(text, Catch::Contains(launcher));
    }
    for (const char* default_value : {"127.0.0.1:0", "0.0.0.0", "200", "2000", "30000"}) {
        CHECK_THAT(text, Catch::Contains(default_value));
    }
}

TEST_CASE("config: bad values name the option, variable or field", "[launch]") {
    const auto check = [](const std::string& what, const std::string& name,
                          const std::string& value) {
        CAPTURE(what);
        CHECK_THAT(what, Catch::StartsWith("petrel: " + name + "=\"" + value + "\""));
    };
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"servers", "x"},
        {"servers", "0"},
        {"servers", "-1"},
        {"workers", "two"},
        {"workers", "0"},
        {"layout", "mixed"},
        {"root", "nohost"},
        {"root", ":80"},
        {"root", "h:x"},
        {"root", "h:65536"},
        {"root", "::1:80"},
        {"bind", ""},
        {"bind", "host:80"},
        {"advertise", "host:80"},
        {"job-id", ""},
        {"roles", "server,boss"},
        {"roles", "server,"},
        {"roles", "server,server"},
        {"threads", "0"},
        {"threads", "4294967296"},
        {"heartbeat-interval", "0"},
        {"heartbeat-interval", "1.5"},
        {"heartbeat-timeout", "1s"},
        {"startup-timeout", "0"},
        {"request-timeout", ""},
        {"manager-grace", "0"},
        {"worker-failure", "maybe"},
    };
    for (const auto& [name, value] : bad) {
        // Roles are only accepted with a launcher.
        const vars base = name == "roles"
                              ? launched(1, 4, {{"PETREL_SERVERS", "2"}, {"PETREL_WORKERS", "2"}})
                              : vars{};
        std::string variable = "PETREL_";
        for (const char c : name) {
            variable += c == '-' ? '_' : static_cast<char>(c - 'a' + 'A');
        }
        check(resolve_error({}, {"--" + name + "=" + value}, base), "--" + name, value);
        check(resolve_error({}, {"--" + name, value}, base), "--" + name, value);
        vars env = base;
        env[variable] = value;
        check(resolve_error({}, {}, env), variable, value);
    }
}

TEST_CASE("config: bad fields in the program's config", "[launch]") {
    config c;
    SECTION("servers") {
        c.servers = 0;
        CHECK_THAT(resolve_error(c), Catch::StartsWith("petrel: config::servers=\"0\""));
    }
    SECTION("threads") {
        c.threads = 0;
        CHECK_THAT(resolve_error(c), Catch::StartsWith("petrel: config::threads=\"0\""));
    }
    SECTION("a negative duration") {
        c.request_timeout = -5ms;
        CHECK_THAT(resolve_error(c), Catch::StartsWith("petrel: config::request_timeout=\"-5\""));
    }
    SECTION("duplicate roles") {
        c.roles = roles{node_role::server, node_role::server};
        CHECK_THAT(resolve_error(c, {}, launched(1, 4)),
                   Catch::StartsWith("petrel: config::roles=\"server,server\"") &&
                       Catch::Contains("twice"));
    }
    SECTION("no roles") {
        c.roles = roles{};
        CHECK_THAT(resolve_error(c, {}, launched(1, 4)),
                   Catch::StartsWith("petrel: config::roles=\"\""));
    }
}

TEST_CASE("config: a Petrel option without its value", "[launch]") {
    for (const std::string option :
         {"--servers", "--workers", "--layout", "--root", "--bind", "--advertise", "--job-id",
          "--roles", "--threads", "--heartbeat-interval", "--heartbeat-timeout",
          "--startup-timeout", "--request-timeout"}) {
        CAPTURE(option);
        CHECK_THAT(resolve_error({}, {option}),
                   Catch::StartsWith("petrel: " + option + " needs a value"));
        CHECK_THAT(resolve_error({}, {option, "--verbose"}),
                   Catch::StartsWith("petrel: " + option + " needs a value"));
    }
}

TEST_CASE("config: heartbeat timeout must exceed the interval", "[launch]") {
    CHECK_THAT(resolve_error({}, {"--heartbeat-timeout=200"}),
               Catch::Contains("--heartbeat-timeout") && Catch::Contains("interval"));
    CHECK_THAT(resolve_error({}, {"--heartbeat-interval=3000"}),
               Catch::Contains("--heartbeat-interval") && Catch::Contains("timeout"));
    const auto s = resolve_with({}, {"--heartbeat-interval=100", "--heartbeat-timeout=101"});
    CHECK(s.heartbeat_interval == 100ms);
    CHECK(s.heartbeat_timeout == 101ms);
}

TEST_CASE("config: dedicated layout with 4 processes", "[launch]") {
    struct expected {
        std::uint32_t rank, managers, servers, workers, first_server, first_worker;
        roles hosted;
    };
    const std::vector<expected> plan = {
        {0, 1, 1, 0, 0, 0, {node_role::manager, node_role::server}},
        {1, 0, 1, 0, 1, 0, {node_role::server}},
        {2, 0, 0, 1, 2, 0, {node_role::worker}},
        {3, 0, 0, 1, 2, 1, {node_role::worker}},
    };
    for (const auto& e : plan) {
        CAPTURE(e.rank);
        const auto s = resolve_with({}, {}, launched(e.rank, 4));
        CHECK(s.launch.kind == petrel::launcher_kind::petrel);
        CHECK(s.layout == layout::dedicated);
        CHECK(s.servers == 2);
        CHECK(s.workers == 2);
        CHECK(s.managers_here == e.managers);
        CHECK(s.servers_here == e.servers);
        CHECK(s.workers_here == e.workers);
        CHECK(s.first_server == e.first_server);
        CHECK(s.first_worker == e.first_worker);
        CHECK(s.roles == e.hosted);
    }
}

TEST_CASE("config: dedicated layout totals", "[launch]") {
    SECTION("servers given: workers are the rest") {
        const auto s = resolve_with({}, {"--servers=1"}, launched(1, 4));
        CHECK(s.servers == 1);
        CHECK(s.workers == 3);
        CHECK(s.workers_here == 1);
        CHECK(s.first_server == 1);
        CHECK(s.first_worker == 0);
    }
    SECTION("workers given: servers are the rest") {
        const auto s = resolve_with({}, {"--workers=1"}, launched(3, 4));
        CHECK(s.servers == 3);
        CHECK(s.workers == 1);
        CHECK(s.workers_here == 1);
        CHECK(s.first_server == 3);
        CHECK(s.first_worker == 0);
    }
    SECTION("both given and consistent") {
        const auto s = resolve_with({}, {"--servers=3", "--workers=1"}, launched(2, 4));
        CHECK(s.servers_here == 1);
        CHECK(s.first_server == 2);
    }
    SECTION("two processes") {
        const auto s = resolve_with({}, {}, launched(1, 2));
        CHECK(s.servers == 1);
        CHECK(s.workers == 1);
        CHECK(s.roles == roles{node_role::worker});
    }
    SECTION("three processes: one server") {
        const auto s = resolve_with({}, {}, launched(0, 3));
        CHECK(s.servers == 1);
        CHECK(s.workers == 2);
    }
    SECTION("workers that do not add up") {
        CHECK_THAT(resolve_error({}, {"--servers=2", "--workers=3"}, launched(0, 4)),
                   Catch::Contains("--servers") && Catch::Contains("--workers") &&
                       Catch::Contains("4 processes"));
    }
    SECTION("no room for a worker") {
        CHECK_THAT(resolve_error({}, {"--servers=4"}, launched(0, 4)),
                   Catch::StartsWith("petrel: --servers=\"4\"") && Catch::Contains("at most 3"));
    }
    SECTION("no room for a server") {
        CHECK_THAT(resolve_error({}, {}, launched(0, 4, {{"PETREL_WORKERS", "4"}})),
                   Catch::StartsWith("petrel: PETREL_WORKERS=\"4\""));
    }
    SECTION("one process") {
        CHECK_THAT(resolve_error({}, {}, launched(0, 1)), Catch::Contains("colocated"));
    }
}

TEST_CASE("config: colocated layout with 4 processes", "[launch]") {
    for (const std::uint32_t rank : {0u, 1u, 3u}) {
        CAPTURE(rank);
        config c;
        c.layout = layout::colocated;
        const auto s = resolve_with(c, {}, launched(rank, 4));
        CHECK(s.servers == 4);
        CHECK(s.workers == 4);
        CHECK(s.managers_here == (rank == 0 ? 1u : 0u));
        CHECK(s.servers_here == 1);
        CHECK(s.workers_here == 1);
        CHECK(s.first_server == rank);
        CHECK(s.first_worker == rank);
        if (rank == 0) {
            CHECK(s.roles == roles{node_role::manager, node_role::server, node_role::worker});
        } else {
            CHECK(s.roles == roles{node_role::server, node_role::worker});
        }
    }
    SECTION("one process") {
        const auto s = resolve_with({}, {"--layout=colocated"}, launched(0, 1));
        CHECK(s.servers == 1);
        CHECK(s.workers == 1);
        CHECK(s.managers_here == 1);
    }
    SECTION("matching totals are accepted") {
        const auto s =
            resolve_with({}, {"--layout=colocated", "--servers=4", "--workers=4"}, launched(2, 4));
        CHECK(s.servers == 4);
    }
    SECTION("other totals are an error") {
        CHECK_THAT(resolve_error({}, {"--layout=colocated", "--servers=2"}, launched(2, 4)),
                   Catch::StartsWith("petrel: --servers=\"2\"") && Catch::Contains("colocated"));
        CHECK_THAT(
            resolve_error({}, {"--layout=colocated"}, launched(2, 4, {{"PETREL_WORKERS", "8"}})),
            Catch::StartsWith("petrel: PETREL_WORKERS=\"8\""));
    }
}

TEST_CASE("config: roles override", "[launch]") {
    const args totals = {"--servers=3", "--workers=5"};
    SECTION("a server and a worker on rank 2") {
        auto a = totals;
        a.push_back("--roles=worker,server");
        const auto s = resolve_with({}, a, launched(2, 4));
        CHECK(s.roles == roles{node_role::server, node_role::worker});
        CHECK(s.servers == 3);
        CHECK(s.workers == 5);
        CHECK(s.managers_here == 0);
        CHECK(s.servers_here == 1);
        CHECK(s.workers_here == 1);
        CHECK(s.first_server == 2);
        CHECK(s.first_worker == 2);
    }
    SECTION("the program's roles are fixed: other roles on the command line are refused") {
        config c;
        c.roles = roles{node_role::worker};
        auto a = totals;
        a.push_back("--roles=server");
        CHECK_THAT(resolve_error(c, a, launched(3, 4)),
                   Catch::Contains("config::roles=\"worker\" (in the program) and "
                                   "--roles=\"server\" (on the command line) disagree"));
        const auto s = resolve_with(c, totals, launched(3, 4));
        CHECK(s.roles == roles{node_role::worker});
        CHECK(s.servers_here == 0);
        CHECK(s.workers_here == 1);
    }
    SECTION("rank 0 with the manager only") {
        const auto s = resolve_with({}, totals, launched(0, 4, {{"PETREL_ROLES", "manager"}}));
        CHECK(s.roles == roles{node_role::manager});
        CHECK(s.managers_here == 1);
        CHECK(s.servers_here == 0);
        CHECK(s.workers_here == 0);
    }
    SECTION("rank 0 must host the manager") {
        CHECK_THAT(resolve_error({}, totals, launched(0, 4, {{"PETREL_ROLES", "server"}})),
                   Catch::StartsWith("petrel: PETREL_ROLES=\"server\"") &&
                       Catch::Contains("manager"));
    }
    SECTION("only rank 0 hosts the manager") {
        CHECK_THAT(resolve_error({}, totals, launched(1, 4, {{"PETREL_ROLES", "manager"}})),
                   Catch::Contains("only rank 0"));
    }
    SECTION("the totals are required") {
        CHECK_THAT(resolve_error({}, {"--roles=server", "--servers=2"}, launched(1, 4)),
                   Catch::StartsWith("petrel: --roles=\"server\"") && Catch::Contains("--workers"));
    }
    SECTION("no roles override without a launcher") {
        CHECK_THAT(resolve_error({}, {"--roles=server"}),
                   Catch::Contains("--roles needs a launcher") &&
                       Catch::Contains("PETREL_RANK and PETREL_SIZE"));
        config c;
        c.roles = roles{node_role::server};
        CHECK_THAT(resolve_error(c), Catch::StartsWith("petrel: config::roles=\"server\""));
    }
}

TEST_CASE("config: the root under a launcher", "[launch]") {
    SECTION("required") {
        const auto what = resolve_error({}, {}, {{"PETREL_RANK", "1"}, {"PETREL_SIZE", "4"}});
        CHECK_THAT(what, Catch::Contains("PETREL_ROOT") && Catch::Contains("--root") &&
                             Catch::Contains("rank 0"));
    }
    SECTION("forms that are accepted") {
        CHECK(resolve_with({}, {"--root=[::1]:7000"}, launched_plain(0, 4)).root == "[::1]:7000");
        CHECK(resolve_with({}, {"--root=node-0.svc:65535"}, launched_plain(0, 4)).root ==
              "node-0.svc:65535");
    }
    SECTION("port 0 and wildcard hosts are not") {
        CHECK_THAT(resolve_error({}, {"--root=h:0"}, launched_plain(1, 4)),
                   Catch::StartsWith("petrel: --root=\"h:0\"") && Catch::Contains("1 to 65535"));
        CHECK_THAT(resolve_error({}, {"--root=0.0.0.0:7000"}, launched_plain(1, 4)),
                   Catch::StartsWith("petrel: --root=\"0.0.0.0:7000\""));
    }
    SECTION("port 0 is fine without a launcher") {
        CHECK(resolve_with({}, {"--root=localhost:0"}).root == "localhost:0");
    }
}

TEST_CASE("config: the advertised host", "[launch]") {
    SECTION("given") {
        const auto s =
            resolve_with({}, {}, launched_plain(1, 4, {{"PETREL_ADVERTISE", "[fd00::5]"}}));
        CHECK(s.bind == "0.0.0.0");
        CHECK(s.advertise == "fd00::5");
    }
    SECTION("the bind host when it is not a wildcard") {
        const auto s = resolve_with({}, {"--bind=10.1.2.3"}, launched_plain(1, 4));
        CHECK(s.advertise == "10.1.2.3");
        CHECK(resolve_with({}, {"--bind=[::1]"}).bind == "::1");
    }
    SECTION("the root's host on rank 0") {
        const auto s = resolve_with({}, {}, launched_plain(0, 4));
        CHECK(s.bind == "0.0.0.0");
        CHECK(s.advertise == "10.0.0.1");
        const auto v6 =
            resolve_with({}, {"--root=[fd00::1]:7000", "--bind=::"}, launched_plain(0, 4));
        CHECK(v6.advertise == "fd00::1");
    }
    SECTION("127.0.0.1 when the launcher says all processes share a host") {
        const auto s = resolve_with({}, {}, launched_plain(2, 4, {{"PETREL_LOCAL_SIZE", "4"}}));
        CHECK(s.advertise == "127.0.0.1");
    }
    SECTION("the root's host when it is a loopback address") {
        const auto s = resolve_with({}, {"--root=localhost:7000"}, launched_plain(3, 4));
        CHECK(s.advertise == "localhost");
    }
    SECTION("an error when processes may be on several hosts") {
        const auto what = resolve_error({}, {}, launched_plain(1, 4, {{"PETREL_LOCAL_SIZE", "2"}}));
        CHECK_THAT(what, Catch::Contains("--advertise") && Catch::Contains("PETREL_ADVERTISE") &&
                             Catch::Contains("the address peers on other hosts use to reach "
                                             "this process"));
        CHECK_FALSE(resolve_error({}, {}, launched_plain(1, 4)).empty());
    }
    SECTION("without a launcher and a wildcard bind") {
        const auto s = resolve_with({}, {"--bind=0.0.0.0"});
        CHECK(s.advertise == "127.0.0.1");
    }
}

TEST_CASE("config: the job id", "[launch]") {
    SECTION("the launcher's") {
        const auto s = resolve_with({}, {},
                                    {{"OMPI_COMM_WORLD_RANK", "0"},
                                     {"OMPI_COMM_WORLD_SIZE", "2"},
                                     {"OMPI_MCA_ess_base_jobid", "4711"},
                                     {"PETREL_ROOT", "10.0.0.1:7000"}});
        CHECK(s.launch.kind == petrel::launcher_kind::open_mpi);
        CHECK(s.job_id == "4711");
    }
    SECTION("given wins over the launcher's") {
        const auto s = resolve_with({}, {"--job-id=mine"},
                                    {{"SLURM_PROCID", "0"},
                                     {"SLURM_NTASKS", "2"},
                                     {"SLURM_JOB_ID", "12"},
                                     {"SLURM_STEP_ID", "0"},
                                     {"PETREL_ROOT", "10.0.0.1:7000"}});
        CHECK(s.launch.job_id == "12.0");
        CHECK(s.job_id == "mine");
    }
    SECTION("petrel when nobody gives one") {
        CHECK(resolve_with({}, {}, launched(0, 2)).job_id == "petrel");
    }
}

TEST_CASE("config: launcher errors come through resolve", "[launch]") {
    CHECK_THAT(resolve_error({}, {}, {{"PETREL_RANK", "x"}, {"PETREL_SIZE", "2"}}),
               Catch::StartsWith("petrel: PETREL_RANK=\"x\""));
}

TEST_CASE("config: replicas, by default one copy when there are two servers", "[launch]") {
    CHECK(resolve_with({}).replicas == 1); // embedded: 2 servers
    CHECK(resolve_with({}, {"--servers", "1"}).replicas == 0);
    CHECK(resolve_with({}, {"--servers", "4", "--replicas", "3"}).replicas == 3);
    CHECK(resolve_with({}, {"--replicas=0"}).replicas == 0);
    CHECK(resolve_with({}, {}, {{"PETREL_REPLICAS", "0"}}).replicas == 0);
    config program;
    program.servers = 3;
    program.replicas = 2;
    CHECK(resolve_with(program).replicas == 2);
    CHECK_THAT(resolve_error({}, {"--replicas", "2"}),
               Catch::StartsWith("petrel: --replicas=\"2\": too many: 2 servers hold at most 1"));
    CHECK_THAT(resolve_error({}, {}, {{"PETREL_REPLICAS", "x"}}),
               Catch::StartsWith("petrel: PETREL_REPLICAS=\"x\""));
    CHECK_THAT(resolve_error({}, {"--servers", "12", "--replicas", "8"}),
               Catch::Contains("at most 7"));
    CHECK_THAT(petrel::usage("train"), Catch::Contains("PETREL_REPLICAS"));
}

TEST_CASE("config: a node that joins the running job, and how far the job may grow", "[launch]") {
    // By default nobody may join: the job keeps its size.
    const auto plain = resolve_with({}, {"--servers", "3", "--workers", "2"});
    CHECK(plain.max_servers == 3);
    CHECK(plain.max_workers == 2);
    CHECK_FALSE(plain.join);
    const auto grows = resolve_with({}, {"--max-servers", "5"}, {{"PETREL_MAX_WORKERS", "4"}});
    CHECK(grows.max_servers == 5);
    CHECK(grows.max_workers == 4);
    CHECK_THAT(resolve_error({}, {"--servers", "3", "--max-servers", "2"}),
               Catch::StartsWith("petrel: --max-servers=\"2\": fewer than the job's 3"));
    // One server joins at the root: no manager, no worker here.
    const auto s = resolve_with({}, {"--join", "server", "--root", "127.0.0.1:7000"});
    REQUIRE(s.join);
    CHECK(*s.join == node_role::server);
    CHECK(s.roles == roles{node_role::server});
    CHECK(s.managers_here == 0);
    CHECK(s.servers_here == 1);
    CHECK(s.workers_here == 0);
    CHECK(s.root == "127.0.0.1:7000");
    const auto w = resolve_with({}, {"--root=h:9"}, {{"PETREL_JOIN", "worker"}});
    CHECK(w.roles == roles{node_role::worker});
    CHECK(w.workers_here == 1);
    CHECK(w.servers_here == 0);
    CHECK_THAT(resolve_error({}, {"--join", "server"}), Catch::Contains("needs its root"));
    CHECK_THAT(resolve_error({}, {"--join", "reader", "--root", "h:9"}),
               Catch::Contains("not a role that joins (expected server, worker or manager)"));
    // A manager restarted at the root hosts nothing else.
    const auto m = resolve_with({}, {"--join", "manager", "--root", "127.0.0.1:7000"});
    REQUIRE(m.join);
    CHECK(*m.join == node_role::manager);
    CHECK(m.roles == roles{node_role::manager});
    CHECK(m.managers_here == 1);
    CHECK(m.servers_here == 0);
    CHECK(m.workers_here == 0);
    CHECK_THAT(petrel::usage("train"), Catch::Contains("PETREL_JOIN") &&
                                           Catch::Contains("PETREL_MAX_SERVERS") &&
                                           Catch::Contains("PETREL_MAX_WORKERS"));
}

TEST_CASE("config: a standby manager on rank 1, and how long nodes look for a manager",
          "[launch]") {
    const vars launched{{"PETREL_RANK", "1"},
                        {"PETREL_SIZE", "4"},
                        {"PETREL_ROOT", "h0:9000"},
                        {"PETREL_ADVERTISE", "h1"}};
    const auto plain = resolve_with({}, {}, launched);
    CHECK(plain.standby.empty());
    CHECK_FALSE(plain.standby_here);
    CHECK(plain.manager_grace == std::chrono::milliseconds(30000));
    const auto on1 =
        resolve_with({}, {"--standby", "h1:9001", "--manager-grace", "5000"}, launched);
    CHECK(on1.standby == "h1:9001");
    CHECK(on1.standby_here);
    CHECK(on1.manager_grace == std::chrono::milliseconds(5000));
    auto rank2 = launched;
    rank2["PETREL_RANK"] = "2";
    rank2["PETREL_STANDBY"] = "h1:9001";
    const auto on2 = resolve_with({}, {}, rank2);
    CHECK(on2.standby == "h1:9001");
    CHECK_FALSE(on2.standby_here);
    CHECK_THAT(resolve_error({}, {"--standby", "h0:9000"}, launched),
               Catch::Contains("elsewhere than the root"));
    CHECK_THAT(resolve_error({}, {"--standby", "h1"}, launched), Catch::Contains("no port"));
    CHECK_THAT(resolve_error({}, {"--standby", "h1:9001"}),
               Catch::Contains("needs a launcher that starts 2 processes or more"));
    CHECK_THAT(resolve_error({}, {"--manager-grace", "0"}, launched),
               Catch::Contains("--manager-grace"));
    CHECK_THAT(petrel::usage("train"),
               Catch::Contains("PETREL_STANDBY") && Catch::Contains("PETREL_MANAGER_GRACE"));
    // What a failed worker does to the job.
    CHECK(plain.worker_failure == petrel::worker_failure::fail);
    CHECK(resolve_with({}, {"--worker-failure", "drop"}, launched).worker_failure ==
          petrel::worker_failure::drop);
    CHECK(resolve_with({.worker_failure = petrel::worker_failure::drop}, {}, launched)
              .worker_failure == petrel::worker_failure::drop);
    CHECK_THAT(resolve_error({}, {"--worker-failure", "maybe"}, launched),
               Catch::Contains("expected fail or drop"));
}

TEST_CASE("config: the help says the I/O threads follow the machine", "[launch]") {
    CHECK_THAT(petrel::usage("prog"), Catch::Contains("Default: the machine's hardware threads"));
}

TEST_CASE("config: the job's secret comes from a file or PETREL_SECRET, never shown",
          "[launch][security]") {
    const petrel::test::temp_dir dir;
    const auto write = [&](const std::string& name, const std::string& content) {
        const auto path = dir.path() / name;
        std::ofstream(path, std::ios::binary) << content;
        return path.string();
    };
    const std::string secret = "0123456789abcdef-the-job-secret";
    const auto file = write("secret", secret + "\n");

    CHECK(resolve_with({}).secret.empty());                            // none given
    CHECK(resolve_with({}, {"--secret-file", file}).secret == secret); // final line break off
    CHECK(resolve_with({}, {}, {{"PETREL_SECRET_FILE", file}}).secret == secret);
    config program;
    program.secret_file = file;
    CHECK(resolve_with(program).secret == secret);
    CHECK(resolve_with({}, {}, {{"PETREL_SECRET", secret}}).secret == secret);
    CHECK(resolve_with({}, {"--secret-file=" + write("crlf", secret + "\r\n")}).secret == secret);
    // The file wins over PETREL_SECRET.
    CHECK(resolve_with({}, {"--secret-file", file}, {{"PETREL_SECRET", "another secret, long"}})
              .secret == secret);

    // Refusals name where the secret came from, never the secret.
    const auto missing = resolve_error({}, {"--secret-file", (dir.path() / "none").string()});
    CHECK_THAT(missing, Catch::Contains("--secret-file") && Catch::Contains("cannot read"));
    const auto short_file = resolve_error({}, {"--secret-file", write("short", "tiny-secret\n")});
    CHECK_THAT(short_file, Catch::Contains("11 bytes") && Catch::Contains("16 to 4096"));
    CHECK_THAT(short_file, !Catch::Contains("tiny-secret\""));
    const auto short_env = resolve_error({}, {}, {{"PETREL_SECRET", "tiny-secret"}});
    CHECK_THAT(short_env, Catch::Contains("PETREL_SECRET") && !Catch::Contains("tiny-secret"));
    // On the command line it is refused, and not repeated.
    for (const args& a : {args{"--secret", secret}, args{"--secret=" + secret}}) {
        const auto refused = resolve_error({}, a);
        CHECK_THAT(refused, Catch::Contains("--secret-file") && !Catch::Contains(secret));
    }
}

TEST_CASE("config: --tls-cert, --tls-key and --tls-ca come together, from the command line, the "
          "environment or the program",
          "[launch][security][tls]") {
    CHECK_FALSE(resolve_with({}).tls.enabled());
    const auto s =
        resolve_with({}, {"--tls-cert", "n.pem", "--tls-key=n.key", "--tls-ca", "ca.pem"});
    CHECK(s.tls.certificate == "n.pem");
    CHECK(s.tls.private_key == "n.key");
    CHECK(s.tls.authority == "ca.pem");
    const auto e = resolve_with(
        {}, {},
        {{"PETREL_TLS_CERT", "a.pem"}, {"PETREL_TLS_KEY", "a.key"}, {"PETREL_TLS_CA", "c"}});
    CHECK(e.tls.certificate == "a.pem");
    CHECK(e.tls.authority == "c");
    config program;
    program.tls_cert = "p.pem";
    program.tls_key = "p.key";
    program.tls_ca = "p-ca.pem";
    CHECK_THAT(resolve_error(program, {"--tls-cert", "cl.pem"}), Catch::Contains("disagree"));
    CHECK(resolve_with(program).tls.private_key == "p.key");

    CHECK_THAT(resolve_error({}, {"--tls-cert", "n.pem"}), Catch::Contains("--tls-cert") &&
                                                               Catch::Contains("--tls-key") &&
                                                               Catch::Contains("--tls-ca"));
    CHECK_THAT(resolve_error({}, {}, {{"PETREL_TLS_CA", "ca.pem"}, {"PETREL_TLS_KEY", "k"}}),
               Catch::Contains("given alone"));
    CHECK_THAT(resolve_error({}, {"--tls-cert=", "--tls-key", "k", "--tls-ca", "c"}),
               Catch::Contains("empty"));
    CHECK_THAT(petrel::usage("train"), Catch::Contains("--tls-cert FILE") &&
                                           Catch::Contains("PETREL_TLS_KEY") &&
                                           Catch::Contains("PETREL_TLS_CA"));
}

TEST_CASE("config: --insecure is a flag, from the command line, the environment or the program",
          "[launch][security]") {
    CHECK_FALSE(resolve_with({}).insecure);
    CHECK_FALSE(resolve_with({}, {}, launched(0, 2)).insecure);
    CHECK(resolve_with({}, {"--insecure"}).insecure);
    const auto s = resolve_with({}, {"--insecure", "--servers", "3"});
    CHECK(s.insecure);
    CHECK(s.servers == 3); // a flag takes no value: the next option is read as one
    CHECK(resolve_with({}, {"--insecure", "train.csv"}).rest == args{"prog", "train.csv"});
    CHECK(resolve_with({}, {}, {{"PETREL_INSECURE", "1"}}).insecure);
    CHECK_FALSE(resolve_with({}, {}, {{"PETREL_INSECURE", "0"}}).insecure);
    CHECK_FALSE(resolve_with({}, {"--insecure=no"}).insecure);
    config program;
    program.insecure = true;
    CHECK(resolve_with(program).insecure);
    CHECK_THAT(resolve_error({}, {}, {{"PETREL_INSECURE", "maybe"}}),
               Catch::Contains("PETREL_INSECURE=\"maybe\"") && Catch::Contains("1 or 0"));
    CHECK_THAT(petrel::usage("train"), Catch::Contains("  --insecure   (PETREL_INSECURE)") &&
                                           Catch::Contains("refuses to start"));
}

TEST_CASE("config: the checkpoint root is absolute; the working directory under a launcher, "
          "none without one",
          "[launch][security][checkpoint]") {
    CHECK(resolve_with({}).checkpoint_root.empty());
    CHECK(resolve_with({}, {}, launched(0, 2)).checkpoint_root ==
          std::filesystem::current_path().string());
    CHECK(resolve_with({}, {"--checkpoint-root", "/shared/ckpt/"}).checkpoint_root ==
          "/shared/ckpt/");
    CHECK(resolve_with({}, {}, launched(1, 2, {{"PETREL_CHECKPOINT_ROOT", "/a/./b/../c"}}))
              .checkpoint_root == "/a/c");
    CHECK(resolve_with({}, {"--checkpoint-root=runs"}).checkpoint_root ==
          (std::filesystem::current_path() / "runs").string());
    CHECK_THAT(resolve_error({}, {"--checkpoint-root="}),
               Catch::Contains("--checkpoint-root") && Catch::Contains("empty"));
    CHECK_THAT(petrel::usage("train"), Catch::Contains("PETREL_CHECKPOINT_ROOT"));
}

TEST_CASE("config: the limits a process keeps for its peers, from the program, the command line "
          "or the environment, each in --help",
          "[launch][security]") {
    CHECK(resolve_with({}).limits == petrel::process_limits{});
    config c;
    c.limits.max_readers = 4;
    const auto s = resolve_with(c, {"--max-rows-per-connection", "1M", "--idle-timeout=120000"},
                                {{"PETREL_MAX_QUEUED_REPLY_BYTES", "512M"}});
    CHECK(s.limits == petrel::process_limits{.idle_timeout = std::chrono::milliseconds(120000),
                                             .max_queued_reply_bytes = 512u << 20,
                                             .max_rows_per_connection = 1u << 20,
                                             .max_readers = 4});
    CHECK_THAT(resolve_error({}, {"--max-connections", "0"}),
               Catch::Contains("--max-connections=\"0\": must be at least 1"));
    for (const auto* name : {"max-connections", "max-connections-per-address", "idle-timeout",
                             "frame-timeout", "max-receiving-bytes", "max-queued-reply-bytes",
                             "max-cached-key-bytes", "max-held-bytes", "max-tables-per-connection",
                             "max-rows-per-connection", "max-readers", "departed-grace"}) {
        INFO(name);
        CHECK_THAT(petrel::usage("train"), Catch::Contains("--" + std::string(name) + " "));
    }
}

TEST_CASE("config: --tls-ranks needs the TLS files", "[launch][security][tls]") {
    CHECK_FALSE(resolve_with({}).tls_ranks);
    const args tls{"--tls-cert", "r.pem", "--tls-key", "r.key", "--tls-ca", "ca.pem"};
    auto with = tls;
    with.push_back("--tls-ranks");
    CHECK(resolve_with({}, with).tls_ranks);
    CHECK(resolve_with({}, tls, {{"PETREL_TLS_RANKS", "1"}}).tls_ranks);
    CHECK_FALSE(resolve_with({}, tls, {{"PETREL_TLS_RANKS", "0"}}).tls_ranks);
    CHECK_THAT(resolve_error({}, {"--tls-ranks"}),
               Catch::Contains("--tls-ranks") && Catch::Contains("needs TLS"));
    CHECK_THAT(petrel::usage("train"),
               Catch::Contains("--tls-ranks") && Catch::Contains("PETREL_TLS_RANKS"));
}
