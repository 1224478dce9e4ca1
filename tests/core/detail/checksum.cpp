#include <petrel/core/detail/checksum.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <random>
#include <span>
#include <string_view>
#include <vector>

TEST_CASE("checksum: XXH64, the same in pieces as in one go", "[checkpoint]") {
    auto bytes_of = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
    // Reference values of XXH64 with seed 0 (as `xxhsum -H1` prints them).
    CHECK(petrel::detail::checksum({}) == 0xEF46DB3751D8E999u);
    CHECK(petrel::detail::checksum(bytes_of("abc")) == 0x44BC2CF5AD770999u);
    CHECK(petrel::detail::checksum(bytes_of("Nobody inspects the spammish repetition")) ==
          0xFBCEA83C8A378BF1u);

    std::vector<std::byte> data(1000);
    std::mt19937_64 rng(5);
    for (auto& b : data) {
        b = static_cast<std::byte>(rng());
    }
    for (std::size_t n : {0, 1, 7, 31, 32, 33, 64, 100, 1000}) {
        const auto all = std::span(data).first(n);
        const auto whole = petrel::detail::checksum(all);
        for (std::size_t step : {1, 3, 8, 31, 32, 45}) {
            petrel::detail::checksum64 h;
            for (std::size_t at = 0; at < n; at += step) {
                h.update(all.subspan(at, std::min(step, n - at)));
            }
            CHECK(h.digest() == whole);
        }
    }
    auto flipped = data;
    flipped[500] ^= std::byte{1};
    CHECK(petrel::detail::checksum(flipped) != petrel::detail::checksum(data));
}
