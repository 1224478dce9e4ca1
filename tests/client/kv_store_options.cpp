#include <petrel/client/kv_store_options.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>

TEST_CASE("kv_store_options: defaults a store made from a list of servers can use", "[client]") {
    const petrel::kv_store_options<std::uint64_t> o{.servers = {"127.0.0.1:9100"}};
    CHECK(o.servers.size() == 1);
    CHECK(o.table_id == 0);
    CHECK(o.width == 0); // the declared width, or 1
    CHECK(o.node_id == 0);
    CHECK(o.worker == 0);
    CHECK(o.request_timeout == std::chrono::seconds(30));
    CHECK_FALSE(o.key_caching);
    CHECK(o.key_cache_bytes == std::size_t{32} << 20);
    CHECK(o.compression.mode == petrel::wire::compression_mode::off);
}
