#include <petrel/launch/detail/secret_file.hpp>

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

using petrel::detail::check_secret;
using petrel::detail::read_secret_file;

namespace {

/// The config_error's message of `f`; empty when nothing is thrown.
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const petrel::config_error& e) {
        return e.what();
    }
    return {};
}

} // namespace

TEST_CASE("secret_file: a secret file is read whole, without its final line break",
          "[launch][security]") {
    const petrel::test::temp_dir dir;
    const auto file = [&](const std::string& name, const std::string& content) {
        const auto path = dir.path() / name;
        std::ofstream(path, std::ios::binary) << content;
        return path.string();
    };
    const std::string s16(16, 'k');
    CHECK(read_secret_file(file("plain", s16), "f") == s16);
    CHECK(read_secret_file(file("lf", s16 + "\n"), "f") == s16);
    CHECK(read_secret_file(file("crlf", s16 + "\r\n"), "f") == s16);
    // Only one final line break goes; inner bytes, and a lone CR, stay.
    CHECK(read_secret_file(file("two", s16 + "\n\n"), "f") == s16 + "\n");
    CHECK(read_secret_file(file("cr", s16 + "\r"), "f") == s16 + "\r");
    const std::string longest(4096, 'x');
    CHECK(read_secret_file(file("longest", longest + "\n"), "f") == longest);

    CHECK_THAT(error_of([&] { (void)read_secret_file(file("short", "fifteen-bytes..\n"), "F"); }),
               Catch::Contains("petrel: F: the secret has 15 bytes, expected 16 to 4096"));
    CHECK_THAT(
        error_of([&] { (void)read_secret_file(file("long", std::string(1 << 20, 'y')), "F"); }),
        Catch::Contains("4097 bytes")); // read no further than that
    CHECK_THAT(error_of([&] { (void)read_secret_file((dir.path() / "none").string(), "F"); }),
               Catch::Contains("petrel: F: cannot read the secret file"));
    CHECK_THAT(error_of([&] { (void)read_secret_file(dir.path().string(), "F"); }),
               Catch::Contains("cannot read") || Catch::Contains("0 bytes"));
    CHECK_THAT(error_of([&] { (void)read_secret_file(file("empty", ""), "F"); }),
               Catch::Contains("0 bytes"));
}

TEST_CASE("secret_file: a secret's length is checked, and errors never repeat it",
          "[launch][security]") {
    CHECK(error_of([] { check_secret(std::string(16, 's'), "PETREL_SECRET"); }).empty());
    CHECK(error_of([] { check_secret(std::string(4096, 's'), "PETREL_SECRET"); }).empty());
    const auto short_one = error_of([] { check_secret("hunter2", "PETREL_SECRET"); });
    CHECK_THAT(short_one, Catch::Contains("PETREL_SECRET") && Catch::Contains("7 bytes"));
    CHECK(short_one.find("hunter2") == std::string::npos);
    CHECK_THAT(error_of([] { check_secret(std::string(4097, 's'), "X"); }),
               Catch::Contains("4097 bytes"));
}
