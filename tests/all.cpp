#include <petrel/all.hpp>

#include "support/cluster.hpp"

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <string>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;

TEST_CASE("all.hpp: the public names are reachable", "[umbrella]") {
    using k64 = std::uint64_t;
    STATIC_REQUIRE(petrel::key<k64>);
    STATIC_REQUIRE(std::is_class_v<petrel::key_range<k64>>);
    STATIC_REQUIRE(std::is_class_v<petrel::vector_clock<k64>>);
    STATIC_REQUIRE(std::is_class_v<petrel::kv_pairs<k64, float>>);
    STATIC_REQUIRE(std::is_class_v<petrel::kv_store<k64, float>>);
    STATIC_REQUIRE(std::is_class_v<petrel::kv_store_options<k64>>);
    STATIC_REQUIRE(std::is_class_v<petrel::ring>);
    STATIC_REQUIRE(std::is_class_v<petrel::manager_node>);
    STATIC_REQUIRE(std::is_class_v<petrel::member>);
    STATIC_REQUIRE(std::is_class_v<petrel::worker_node>);
    STATIC_REQUIRE(std::is_class_v<petrel::server_node>);
    STATIC_REQUIRE(std::is_class_v<petrel::buffer_pool>);
    STATIC_REQUIRE(std::is_class_v<petrel::wire::frame_decoder>);
    STATIC_REQUIRE(std::is_abstract_v<petrel::connection>);
    STATIC_REQUIRE(petrel::transport<petrel::tcp_transport>);
    STATIC_REQUIRE(petrel::transport<petrel::inproc_transport>);
    STATIC_REQUIRE(petrel::transport<petrel::any_transport>);
    STATIC_REQUIRE(std::is_error_code_enum_v<petrel::errc>);
    STATIC_REQUIRE(petrel::wire::wire_key<std::uint32_t>);
    STATIC_REQUIRE(petrel::wire::wire_value<double>);

    CHECK(std::string(petrel::error_category().name()) == "petrel");
    CHECK(petrel::to_string(petrel::log_level::warning) == "warning");
    CHECK(petrel::key_range<k64>::all().contains(k64{12345}));
    const std::vector<k64> keys{1, 2};
    const std::vector<float> values{3, 4};
    CHECK(petrel::kv_pairs<k64, float>::copy_of(keys, values).find(2) == 1);
}

TEST_CASE("all.hpp: a worker and a server in one process", "[umbrella]") {
    petrel::test::io_threads io;
    petrel::inproc_hub hub;
    petrel::server_node server(petrel::inproc_transport(io.executor(), hub));
    const auto address = server.listen("");

    petrel::kv_store_options<std::uint64_t> o;
    o.servers = {address};
    o.request_timeout = 10s;
    petrel::kv_store<std::uint64_t, float, petrel::eventual> kv(
        petrel::inproc_transport(io.executor(), hub), o);

    const std::vector<std::uint64_t> keys{4, 8};
    auto pushed = kv.push(keys, xt::xtensor<float, 1>{0.5f, -1.0f}, asio::use_future);
    REQUIRE(pushed.wait_for(10s) == std::future_status::ready);
    pushed.get();
    auto pulled = kv.pull(keys, asio::use_future);
    REQUIRE(pulled.wait_for(10s) == std::future_status::ready);
    const auto got = pulled.get();
    CHECK((got.values() == xt::xtensor<float, 1>{0.5f, -1.0f}));
    CHECK(server.key_count(0) == 2);
}
