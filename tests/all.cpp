#include <petrel/all.hpp>

#include "support/complete.hpp"

#include <type_traits>

// Checked before any other header is included: all.hpp alone defines these (fwd.hpp only
// declares them). petrel.hpp's own names: tests/petrel.cpp.
namespace all_hpp {

using petrel::test::complete;

static_assert(complete<petrel::manager_node>);
static_assert(complete<petrel::member>);
static_assert(complete<petrel::server_node>);
static_assert(complete<petrel::server_agent>);
static_assert(complete<petrel::attachment>);
static_assert(complete<petrel::buffer_pool>);
static_assert(complete<petrel::wire::frame_decoder>);
static_assert(std::is_abstract_v<petrel::connection>);
static_assert(petrel::transport<petrel::tcp_transport>);
static_assert(petrel::transport<petrel::inproc_transport>);
static_assert(petrel::transport<petrel::any_transport>);

} // namespace all_hpp

#include "support/cluster.hpp"

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;

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
