#include <petrel/server/detail/hash_index.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>

TEST_CASE("hash_index: finds every key inserted across growths, and no other", "[server]") {
    petrel::detail::hash_index<std::uint64_t> index;
    using index_type = petrel::detail::hash_index<std::uint64_t>;
    CHECK(index.find(5) == index_type::npos); // empty: no slots yet
    std::map<std::uint64_t, std::uint32_t> want;
    for (std::uint32_t row = 0; row < 5000; ++row) {
        const std::uint64_t key = std::uint64_t{row} * 0x10001 + 7;
        index.reserve_more(1);
        index.insert(key, row);
        want[key] = row;
    }
    CHECK(index.size() == 5000);
    for (const auto& [key, row] : want) {
        REQUIRE(index.find(key) == row);
    }
    CHECK(index.find(8) == index_type::npos);
    std::size_t seen = 0;
    index.for_each([&](std::uint64_t key, std::uint32_t row) {
        CHECK(want.at(key) == row);
        ++seen;
    });
    CHECK(seen == want.size());
    CHECK(index.memory_bytes() >= 5000 * (sizeof(std::uint64_t) + sizeof(std::uint32_t)));
}
