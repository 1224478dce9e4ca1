#include <petrel/transport/credential.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

TEST_CASE("reader_credential: 64 hexadecimal digits, fixed for a secret, other for another",
          "[transport][auth][security]") {
    const std::string secret = "s3cret-of-the-job";
    const auto c = petrel::reader_credential(secret);
    CHECK(c.size() == 64);
    CHECK(std::all_of(c.begin(), c.end(), [](char ch) {
        return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
    }));
    CHECK(petrel::reader_credential(secret) == c);
    // HMAC-SHA256(secret, "petrel reader credential 1"): the same in every version.
    CHECK(c == "df59b2eca01ceff679defc4207c528b10727478e83ccd3909cb334cb8b3dbaaa");
    CHECK(petrel::reader_credential(secret + "x") != c);
    CHECK(c.find(secret) == std::string::npos);
    CHECK_THROWS_AS(petrel::reader_credential(""), std::invalid_argument);
}
