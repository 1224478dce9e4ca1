#include <petrel/core/key.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace {

enum class enum_key : std::uint32_t {};
struct wrapped_key {
    std::uint64_t value;
};

template <petrel::key Key>
constexpr bool accepts_key() {
    return true;
}
template <typename T>
constexpr bool accepts_key() {
    return false;
}

} // namespace

TEST_CASE("key: unsigned integral types are keys", "[core][key]") {
    STATIC_REQUIRE(petrel::key<std::uint8_t>);
    STATIC_REQUIRE(petrel::key<std::uint16_t>);
    STATIC_REQUIRE(petrel::key<std::uint32_t>);
    STATIC_REQUIRE(petrel::key<std::uint64_t>);
    STATIC_REQUIRE(petrel::key<unsigned char>);
    STATIC_REQUIRE(petrel::key<unsigned short>);
    STATIC_REQUIRE(petrel::key<unsigned int>);
    STATIC_REQUIRE(petrel::key<unsigned long>);
    STATIC_REQUIRE(petrel::key<unsigned long long>);
    STATIC_REQUIRE(petrel::key<std::size_t>);
    STATIC_REQUIRE(petrel::key<char8_t>);
    STATIC_REQUIRE(petrel::key<char16_t>);
    STATIC_REQUIRE(petrel::key<char32_t>);
    STATIC_REQUIRE(petrel::key<const std::uint64_t>);
}

TEST_CASE("key: signed, bool, floating point and class types are not keys", "[core][key]") {
    STATIC_REQUIRE_FALSE(petrel::key<bool>);
    STATIC_REQUIRE_FALSE(petrel::key<const bool>);
    STATIC_REQUIRE_FALSE(petrel::key<volatile bool>);
    STATIC_REQUIRE_FALSE(petrel::key<signed char>);
    STATIC_REQUIRE_FALSE(petrel::key<short>);
    STATIC_REQUIRE_FALSE(petrel::key<int>);
    STATIC_REQUIRE_FALSE(petrel::key<long>);
    STATIC_REQUIRE_FALSE(petrel::key<long long>);
    STATIC_REQUIRE_FALSE(petrel::key<std::int32_t>);
    STATIC_REQUIRE_FALSE(petrel::key<std::int64_t>);
    STATIC_REQUIRE_FALSE(petrel::key<float>);
    STATIC_REQUIRE_FALSE(petrel::key<double>);
    STATIC_REQUIRE_FALSE(petrel::key<long double>);
    STATIC_REQUIRE_FALSE(petrel::key<enum_key>);
    STATIC_REQUIRE_FALSE(petrel::key<wrapped_key>);
    STATIC_REQUIRE_FALSE(petrel::key<std::string>);
    STATIC_REQUIRE_FALSE(petrel::key<std::uint64_t*>);
    STATIC_REQUIRE_FALSE(petrel::key<std::uint64_t&>);
    STATIC_REQUIRE_FALSE(petrel::key<std::byte>);
}

TEST_CASE("key: the concept constrains templates", "[core][key]") {
    STATIC_REQUIRE(accepts_key<std::uint32_t>());
    STATIC_REQUIRE(accepts_key<unsigned char>());
    STATIC_REQUIRE_FALSE(accepts_key<int>());
    STATIC_REQUIRE_FALSE(accepts_key<bool>());
    STATIC_REQUIRE_FALSE(accepts_key<double>());
}

TEST_CASE("key: key_space_end is the largest value of the type", "[core][key]") {
    STATIC_REQUIRE(petrel::key_space_end<std::uint8_t> == 255);
    STATIC_REQUIRE(petrel::key_space_end<std::uint16_t> == 65535);
    STATIC_REQUIRE(petrel::key_space_end<std::uint32_t> == 0xffffffffu);
    STATIC_REQUIRE(petrel::key_space_end<std::uint64_t> ==
                   std::numeric_limits<std::uint64_t>::max());
    STATIC_REQUIRE(std::is_same_v<std::remove_cv_t<decltype(petrel::key_space_end<std::uint32_t>)>,
                                  std::uint32_t>);
    // Every other value is a valid key and lies below the end.
    constexpr std::uint32_t largest_key = petrel::key_space_end<std::uint32_t> - 1;
    STATIC_REQUIRE(largest_key < petrel::key_space_end<std::uint32_t>);
    CHECK(petrel::key_space_end<std::uint64_t> == ~std::uint64_t{0});
}
