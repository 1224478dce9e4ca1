#include <petrel/launch/io_threads.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <thread>

TEST_CASE("io_threads: the I/O threads follow the machine, at most 16", "[launch]") {
    const unsigned hardware = std::thread::hardware_concurrency();
    const std::uint32_t expected = hardware == 0 ? 2U : std::min(hardware, 16U);
    CHECK(petrel::default_io_threads() == expected);
    CHECK(petrel::default_io_threads() >= 1);
    CHECK(petrel::default_io_threads() <= 16);
}
