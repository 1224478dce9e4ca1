#include <petrel/client/detail/send_pipeline.hpp>

#include "support/cluster.hpp"
#include "support/recording_server.hpp"
#include "support/requests.hpp"

#include <petrel/core/error.hpp>
#include <petrel/transport/tcp_transport.hpp>
#include <petrel/wire/key_cache.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <system_error>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::test::io_threads;
using petrel::test::recording_server;
namespace wire = petrel::wire;

namespace {

/// A push of `n` u64 keys (one float each) from key `first`.
wire::message pipeline_push(std::size_t n, std::uint64_t first = 0) {
    std::vector<std::uint64_t> keys(n);
    std::iota(keys.begin(), keys.end(), first);
    return petrel::test::push_request(keys, std::vector<float>(n, 1.5F));
}

struct client {
    explicit client(io_threads& io, const std::string& address, bool caching)
        : link(std::make_shared<petrel::detail::request_link>(petrel::tcp_transport(io.executor()),
                                                              address, 10s)),
          pipe(std::make_shared<petrel::detail::send_pipeline>()),
          cache(caching ? std::make_shared<wire::key_cache_sender>(1 << 20) : nullptr) {
        pipe->pool = std::make_shared<petrel::buffer_pool>();
    }
    ~client() { link->close(); }
    client(const client&) = delete;
    client& operator=(const client&) = delete;

    /// Sends `m` and waits for the error its reply carries.
    std::error_code send(wire::message m) {
        auto done = std::make_shared<std::promise<std::error_code>>();
        auto f = done->get_future();
        petrel::detail::send_request(
            pipe, link, cache, std::move(m),
            [done](std::error_code ec, wire::message&&) { done->set_value(ec); },
            std::chrono::steady_clock::now() + 10s);
        REQUIRE(f.wait_for(20s) == std::future_status::ready);
        return f.get();
    }

    std::shared_ptr<petrel::detail::request_link> link;
    std::shared_ptr<petrel::detail::send_pipeline> pipe;
    std::shared_ptr<wire::key_cache_sender> cache;
};

} // namespace

TEST_CASE("send_pipeline: a key list sent again goes as a reference the server resolves",
          "[client][send_pipeline]") {
    io_threads io(2);
    recording_server server(io);
    client c(io, server.address(), true);
    const auto m = pipeline_push(100);
    CHECK_FALSE(c.send(m));
    CHECK_FALSE(c.send(m));
    const auto got = server.requests();
    REQUIRE(got.size() == 2);
    CHECK(got[1].key_bytes == 800); // resolved from the connection's cache
    const auto t = c.pipe->counters.load();
    CHECK(t.requests == 2);
    CHECK(t.replies == 2);
    CHECK(t.key_cache_hits == 1);
    CHECK(t.key_cache_misses == 0);
    CHECK(t.key_cache.in == 1600);
    CHECK(t.key_cache.out == 800);                // the second list went as a reference
    CHECK(t.compression.in == t.compression.out); // compression is off
    CHECK(t.received_bytes > 0);
    // The caller's message is as it built it: a copy it keeps can be sent again.
    CHECK(m.keys().size() == 800);
    CHECK(m.header.encoding == 0);
}

TEST_CASE("send_pipeline: a reference the server does not hold is sent once more with its keys",
          "[client][send_pipeline]") {
    io_threads io(2);
    recording_server server(io, false, 0); // keeps no key list
    client c(io, server.address(), true);
    const auto m = pipeline_push(100);
    CHECK_FALSE(c.send(m));
    CHECK_FALSE(c.send(m)); // a miss, then the keys: the caller sees success
    const auto got = server.requests();
    REQUIRE(got.size() == 3);
    CHECK((got[1].encoding & wire::encoding_keys_cached) != 0);
    CHECK(got[1].key_bytes == 0);
    CHECK((got[2].encoding & wire::encoding_keys_cached) == 0);
    CHECK(got[2].key_bytes == 800);
    const auto t = c.pipe->counters.load();
    CHECK(t.requests == 3);
    CHECK(t.replies == 3); // the miss counts as a reply
    CHECK(t.key_cache_hits == 1);
    CHECK(t.key_cache_misses == 1);
    CHECK(t.key_cache.out == 1600); // the keys went twice after all
}

TEST_CASE("send_pipeline: short key lists, key runs and stores without a cache send their keys",
          "[client][send_pipeline]") {
    io_threads io(2);
    recording_server server(io);
    SECTION("a list under 64 bytes") {
        client c(io, server.address(), true);
        const auto m = pipeline_push(7);
        CHECK_FALSE(c.send(m));
        CHECK_FALSE(c.send(m));
        CHECK(c.pipe->counters.load().key_cache_hits == 0);
        CHECK(server.requests().at(1).key_bytes == 56);
    }
    SECTION("key runs") {
        client c(io, server.address(), true);
        const std::vector<std::uint64_t> runs{0, 16, 100, 102, 200, 202, 300, 302, 400, 402};
        const auto m = petrel::test::push_request(runs, std::vector<float>(24, 1.0F), true);
        CHECK_FALSE(c.send(m));
        CHECK_FALSE(c.send(m));
        CHECK(c.pipe->counters.load().key_cache_hits == 0);
    }
    SECTION("no cache") {
        client c(io, server.address(), false);
        const auto m = pipeline_push(100);
        CHECK_FALSE(c.send(m));
        CHECK_FALSE(c.send(m));
        CHECK(c.pipe->counters.load().key_cache_hits == 0);
        CHECK(server.requests().at(1).key_bytes == 800);
    }
}

TEST_CASE("send_pipeline: with compression on, a pull asks for a compressed reply",
          "[client][send_pipeline]") {
    io_threads io(2);
    recording_server server(io);
    client c(io, server.address(), false);
    c.pipe->compression.mode = wire::compression_mode::always;
    auto m = pipeline_push(100);
    m.header.kind = wire::message_kind::pull;
    m.set_segment(wire::values_segment, {});
    CHECK_FALSE(c.send(m));
    const auto got = server.requests();
    REQUIRE(got.size() == 1);
    CHECK((got[0].flags & wire::flag_compress_reply) != 0);
    // Without compression it does not.
    c.pipe->compression.mode = wire::compression_mode::off;
    CHECK_FALSE(c.send(m));
    CHECK((server.requests().at(1).flags & wire::flag_compress_reply) == 0);
}

TEST_CASE("send_pipeline: a request whose deadline has passed still goes, with 1 ms left",
          "[client][send_pipeline]") {
    const auto now = std::chrono::steady_clock::now();
    CHECK(petrel::detail::time_left(now - 5s) == 1ms);
    const auto left = petrel::detail::time_left(now + 2s);
    CHECK(left > 1900ms);
    CHECK(left <= 2000ms);
}
