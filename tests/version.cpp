#include <petrel/version.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <type_traits>

// The macros are plain integers, usable by the preprocessor.
#if !defined(PETREL_VERSION_MAJOR) || !defined(PETREL_VERSION_MINOR) ||                            \
    !defined(PETREL_VERSION_PATCH)
#error "petrel/version.hpp must define PETREL_VERSION_MAJOR, _MINOR and _PATCH"
#endif
#if PETREL_VERSION_MAJOR < 0 || PETREL_VERSION_MINOR < 0 || PETREL_VERSION_PATCH < 0
#error "version numbers are not negative"
#endif

TEST_CASE("version: version_string is 0.1.0", "[version]") {
    STATIC_REQUIRE(
        std::is_same_v<std::remove_cv_t<decltype(petrel::version_string)>, std::string_view>);
    STATIC_REQUIRE(petrel::version_string == "0.1.0");
    CHECK(petrel::version_string == "0.1.0");
}

TEST_CASE("version: the macros and the string agree", "[version]") {
    STATIC_REQUIRE(PETREL_VERSION_MAJOR == 0);
    STATIC_REQUIRE(PETREL_VERSION_MINOR == 1);
    STATIC_REQUIRE(PETREL_VERSION_PATCH == 0);
    const std::string from_macros = std::to_string(PETREL_VERSION_MAJOR) + "." +
                                    std::to_string(PETREL_VERSION_MINOR) + "." +
                                    std::to_string(PETREL_VERSION_PATCH);
    CHECK(from_macros == petrel::version_string);
}

TEST_CASE("version: the string is three dot-separated numbers", "[version]") {
    const std::string_view v = petrel::version_string;
    int dots = 0;
    bool digit_before = false;
    for (char c : v) {
        if (c == '.') {
            CHECK(digit_before); // no empty component
            digit_before = false;
            ++dots;
        } else {
            CHECK((c >= '0' && c <= '9'));
            digit_before = true;
        }
    }
    CHECK(digit_before);
    CHECK(dots == 2);
}
