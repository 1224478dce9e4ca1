#include <petrel/launch/detail/config_options.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

using petrel::detail::config_options;
using petrel::detail::find_config_option;
using petrel::detail::parse_command_line;

namespace {

petrel::detail::command_line parse(std::vector<const char*> argv) {
    return parse_command_line(static_cast<int>(argv.size()), argv.data());
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
