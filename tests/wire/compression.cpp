#include <petrel/wire/compression.hpp>

#include <petrel/wire/frame_decoder.hpp>

#include "support/frames.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

using namespace petrel;
using namespace petrel::wire;

namespace {

/// A push of `n` u64 keys 0..n-1 with one float each: `zeros_in_ten` of every ten values
/// are zero, the others random.
message sparse_push(std::size_t n, int zeros_in_ten) {
    std::vector<std::uint64_t> keys(n);
    std::vector<float> values(n);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::size_t i = 0; i < n; ++i) {
        keys[i] = i;
        values[i] = static_cast<int>(i % 10) < zeros_in_ten ? 0.0f : u(rng);
    }
    message m;
    m.header.kind = message_kind::push;
    m.header.key_count = n;
    m.header.range_begin = 0;
    m.header.range_end = n;
    m.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

std::vector<std::byte> copy(const shared_bytes& b) {
    return {b.data(), b.data() + b.size()};
}

} // namespace

TEST_CASE("compression: always compresses what shrinks, and decompress restores it",
          "[wire][efficiency]") {
    buffer_pool pool;
    auto m = sparse_push(100000, 9);
    const auto keys = copy(m.keys());
    const auto values = copy(m.values());
    stage_bytes stats;
    compress(m, {.mode = compression_mode::always}, pool, &stats);
    CHECK((m.header.encoding & encoding_values_snappy) != 0);
    CHECK((m.header.encoding & encoding_keys_snappy) != 0); // consecutive keys shrink too
    CHECK(stats.in == keys.size() + values.size());
    CHECK(stats.out == m.keys().size() + m.values().size());
    CHECK(stats.out * 2 < stats.in);
    CHECK(m.header.segment_bytes[values_segment] == m.values().size());
    REQUIRE_FALSE(decompress(m, std::uint64_t{1} << 30, pool));
    CHECK(m.header.encoding == 0);
    CHECK(copy(m.keys()) == keys);
    CHECK(copy(m.values()) == values);
}

TEST_CASE("compression: off, small segments and incompressible data are sent as they are",
          "[wire][efficiency]") {
    buffer_pool pool;
    SECTION("off") {
        auto m = sparse_push(10000, 9);
        compress(m, {}, pool);
        CHECK(m.header.encoding == 0);
    }
    SECTION("below min_bytes") {
        auto m = sparse_push(100, 9);
        compress(m, {.mode = compression_mode::always, .min_bytes = 4096}, pool);
        CHECK(m.header.encoding == 0);
    }
    SECTION("random values do not shrink to max_ratio") {
        auto m = sparse_push(100000, 0);
        const auto values = copy(m.values());
        compress_segment(m, values_segment, {.mode = compression_mode::always}, pool);
        CHECK((m.header.encoding & encoding_values_snappy) == 0);
        CHECK(copy(m.values()) == values);
    }
}

TEST_CASE("compression: adaptive compresses for a slow link, not for a fast one",
          "[wire][efficiency]") {
    buffer_pool pool;
    auto slow = sparse_push(100000, 9);
    compress_segment(slow, values_segment, {.mode = compression_mode::adaptive, .link_gbps = 0.1},
                     pool);
    CHECK((slow.header.encoding & encoding_values_snappy) != 0);
    auto fast = sparse_push(100000, 9);
    compress_segment(fast, values_segment, {.mode = compression_mode::adaptive, .link_gbps = 1e6},
                     pool);
    CHECK((fast.header.encoding & encoding_values_snappy) == 0);
}

TEST_CASE("compression: corrupt or oversized blocks are refused before allocating",
          "[wire][efficiency]") {
    buffer_pool pool;
    auto m = sparse_push(100000, 9);
    compress(m, {.mode = compression_mode::always}, pool);
    SECTION("a raw length over the frame limit") {
        CHECK(decompress(m, 1000, pool) == errc::frame_too_large);
    }
    SECTION("a damaged block") {
        auto bytes = copy(m.values());
        bytes[bytes.size() / 2] ^= std::byte{0xFF};
        bytes.resize(bytes.size() - 3);
        m.set_segment(values_segment, shared_bytes::copy_of(bytes));
        CHECK(decompress(m, std::uint64_t{1} << 30, pool) == errc::malformed_payload);
    }
    SECTION("garbage where a length should be") {
        std::vector<std::byte> junk(16, std::byte{0xFF});
        m.set_segment(values_segment, shared_bytes::copy_of(junk));
        CHECK(decompress(m, std::uint64_t{1} << 30, pool) == errc::malformed_payload);
    }
}

TEST_CASE("compression: a compressed frame decodes to the original message", "[wire][efficiency]") {
    buffer_pool pool;
    auto m = sparse_push(50000, 9);
    const auto values = copy(m.values());
    compress(m, {.mode = compression_mode::always}, pool);
    frame_decoder dec({}, std::make_shared<buffer_pool>());
    std::vector<message> got;
    const auto ec = petrel::test::feed_all(dec, petrel::test::frame_of(m), got);
    REQUIRE_FALSE(ec);
    REQUIRE(got.size() == 1);
    CHECK(got[0].header.encoding == 0);
    CHECK(got[0].header.segment_bytes[values_segment] == values.size());
    CHECK(copy(got[0].values()) == values);
    CHECK(got[0].received_bytes == framed_payload_bytes(m.header));
    CHECK(got[0].received_values_bytes < values.size() / 4);
}

TEST_CASE("compression: encoded headers are checked", "[wire][efficiency]") {
    buffer_pool pool;
    auto m = sparse_push(50000, 9);
    compress(m, {.mode = compression_mode::always}, pool);
    const auto payload = framed_payload_bytes(m.header);
    CHECK_FALSE(check_header(m.header, payload));
    CHECK(check_header(m.header, payload + 8) == errc::segment_size_mismatch);
    auto unknown = m.header;
    unknown.encoding |= 0x40;
    CHECK(check_header(unknown, payload) == errc::malformed_header);
    auto clock = m.header;
    clock.kind = message_kind::clock;
    CHECK(check_header(clock, payload) == errc::malformed_header);
    SECTION("values that decompress to the wrong size fail the second check") {
        m.header.key_count = 49999;
        message_header h = m.header;
        REQUIRE_FALSE(check_header(h, payload));
        CHECK(validate(m, {}, pool, nullptr) == errc::segment_size_mismatch);
    }
    SECTION("a block whose raw size does not fit the header is refused before decoding") {
        m.header.width = 2; // the values block holds one float per key, not two
        message_header h = m.header;
        REQUIRE_FALSE(check_header(h, payload));
        const std::size_t idle = pool.pooled_bytes();
        CHECK(receive(m, {}, pool, nullptr) == errc::value_count_mismatch);
        CHECK(pool.pooled_bytes() == idle); // nothing was taken from the pool
        CHECK((m.header.encoding & encoding_values_snappy) != 0);
    }
    SECTION("the plain validate() refuses encoded messages") {
        CHECK(validate(m, {}) == errc::malformed_header);
    }
}
