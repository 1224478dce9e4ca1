#include <petrel/wire/header.hpp>

#include <petrel/wire/frame.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <system_error>
#include <vector>

using namespace petrel;
using namespace petrel::wire;

namespace {

/// A header with every field set to something other than its default.
message_header full_header() {
    message_header h;
    h.kind = message_kind::pull_reply;
    h.flags = 0xa5;
    h.sender = 7;
    h.receiver = 0xfffffffe;
    h.request_id = 0x0123456789abcdefULL;
    h.table_id = 31;
    h.key_type = scalar_type::u32;
    h.value_type = scalar_type::f64;
    h.width = 128;
    h.status = static_cast<std::uint32_t>(errc::width_mismatch);
    h.range_begin = 1000;
    h.range_end = 0xfffffffffffffff0ULL;
    h.key_count = 3;
    h.worker = 5;
    h.clock = 0x0102030405060708ULL;
    h.encoding = encoding_values_snappy;
    h.key_list_id = 0x1122334455667788ULL;
    h.key_list_digest = 0x8877665544332211ULL;
    h.view = 0x0a0b0c0d0e0f1011ULL;
    h.update_id = 0x1213141516171819ULL;
    h.clocks = {{0, 10, 1, 7}, {10, 20, 2, 9}, {20, 0xffffffffffffffffULL, 0xffffffffu, 1u << 31}};
    h.segment_bytes = {12, 3072, 40};
    return h;
}

/// The serialized header of `h` (without the frame prefix).
std::vector<std::byte> serialize(const message_header& h) {
    message m;
    m.header = h;
    std::vector<std::byte> out;
    encode_head(m, out);
    return {out.begin() + static_cast<std::ptrdiff_t>(prefix_bytes), out.end()};
}

std::error_code decode(const std::vector<std::byte>& bytes, message_header& out) {
    return decode_header(bytes, out);
}

} // namespace

TEST_CASE("header: defaults describe a valid empty push", "[wire]") {
    const message_header h;
    CHECK(h.magic == wire::magic);
    CHECK(h.version == protocol_version);
    CHECK(h.kind == message_kind::push);
    CHECK(h.key_type == scalar_type::u64);
    CHECK(h.value_type == scalar_type::f32);
    CHECK(h.width == 1);
    CHECK(h.status == 0);
    CHECK(h.key_count == 0);
    CHECK(h.clocks.empty());
    CHECK(h.segment_bytes == std::array<std::uint64_t, segment_count>{});
}

TEST_CASE("header: the magic number reads PTRL on the wire", "[wire]") {
    char text[4];
    std::memcpy(text, &wire::magic, 4);
    CHECK(std::string(text, 4) == "PTRL");
    const auto bytes = serialize(message_header{});
    REQUIRE(bytes.size() >= 6);
    CHECK(std::memcmp(bytes.data(), "PTRL", 4) == 0);
    std::uint16_t version = 0;
    std::memcpy(&version, bytes.data() + 4, 2);
    CHECK(version == protocol_version);
}

TEST_CASE("header: every field survives encode_head and decode_header", "[wire]") {
    const auto h = full_header();
    message m;
    m.header = h;
    std::vector<std::byte> out{std::byte{1}, std::byte{2}}; // replaced, not appended to
    encode_head(m, out);
    REQUIRE(out.size() > prefix_bytes);

    std::uint32_t header_bytes = 0;
    std::uint64_t payload_bytes = 0;
    std::memcpy(&header_bytes, out.data(), 4);
    std::memcpy(&payload_bytes, out.data() + 4, 8);
    CHECK(header_bytes == out.size() - prefix_bytes);
    CHECK(payload_bytes == padded(12) + padded(3072) + padded(40));
    CHECK(payload_bytes == framed_payload_bytes(h));

    message_header got;
    REQUIRE_FALSE(decode_header(std::span(out).subspan(prefix_bytes), got));
    CHECK(got == h);
    CHECK(got.kind == message_kind::pull_reply);
    CHECK(got.flags == 0xa5);
    CHECK(got.sender == 7);
    CHECK(got.receiver == 0xfffffffe);
    CHECK(got.request_id == 0x0123456789abcdefULL);
    CHECK(got.table_id == 31);
    CHECK(got.key_type == scalar_type::u32);
    CHECK(got.value_type == scalar_type::f64);
    CHECK(got.width == 128);
    CHECK(got.status == static_cast<std::uint32_t>(errc::width_mismatch));
    CHECK(got.range_begin == 1000);
    CHECK(got.range_end == 0xfffffffffffffff0ULL);
    CHECK(got.key_count == 3);
    REQUIRE(got.clocks.size() == 3);
    CHECK(got.clocks[1] == clock_entry{10, 20, 2, 9});
    CHECK(got.clocks[2].end == 0xffffffffffffffffULL);
    CHECK(got.clocks[2].worker == 0xffffffffu);
    CHECK(got.clocks[2].clock == 1u << 31);
    CHECK(got.segment_bytes == std::array<std::uint64_t, segment_count>{12, 3072, 40});
}

TEST_CASE("header: decoding replaces earlier contents", "[wire]") {
    message_header got = full_header();
    REQUIRE_FALSE(decode(serialize(message_header{}), got));
    CHECK(got == message_header{});
}

TEST_CASE("header: the serialized layout has a fixed size", "[wire]") {
    // 91 bytes of scalar fields (with the worker index, clock, encoding and key list), a u32
    // clock count, 3 u64 segment sizes; 28 bytes per clock entry.
    CHECK(serialize(message_header{}).size() == 135);
    auto h = message_header{};
    h.clocks.resize(5);
    CHECK(serialize(h).size() == 135 + 5 * 28);
}

TEST_CASE("header: the most clock entries allowed round-trip, one more is refused", "[wire]") {
    message_header h;
    h.clocks.resize(max_clock_entries);
    for (std::uint32_t i = 0; i < max_clock_entries; ++i) {
        h.clocks[i] = {i, i + 1, i % 17, i * 3ULL};
    }
    message_header got;
    REQUIRE_FALSE(decode(serialize(h), got));
    CHECK(got == h);

    h.clocks.emplace_back();
    message_header refused;
    CHECK(decode(serialize(h), refused) == errc::malformed_header);
    CHECK(refused.clocks.size() <= max_clock_entries);
}

TEST_CASE("header: decode_header names what is wrong", "[wire]") {
    const auto good = serialize(full_header());
    message_header out;

    SECTION("bad magic") {
        auto b = good;
        b[0] = std::byte{'X'};
        CHECK(decode(b, out) == errc::bad_magic);
    }
    SECTION("bad magic is reported even when the rest is missing") {
        std::vector<std::byte> b(4, std::byte{0});
        CHECK(decode(b, out) == errc::bad_magic);
    }
    SECTION("another version") {
        auto b = good;
        b[4] = std::byte{1}; // the version before clocks and calls
        CHECK(decode(b, out) == errc::unsupported_version);
    }
    SECTION("cut short") {
        for (std::size_t n : {std::size_t{0}, std::size_t{2}, std::size_t{6}, good.size() - 1}) {
            INFO("bytes: " << n);
            const std::vector<std::byte> b(good.begin(),
                                           good.begin() + static_cast<std::ptrdiff_t>(n));
            CHECK(decode(b, out) == errc::malformed_header);
        }
    }
    SECTION("trailing bytes") {
        auto b = good;
        b.push_back(std::byte{0});
        CHECK(decode(b, out) == errc::malformed_header);
    }
    SECTION("a clock count larger than the bytes that follow") {
        auto b = serialize(message_header{});
        const std::uint32_t n = 100;
        std::memcpy(b.data() + 107, &n, 4);
        CHECK(decode(b, out) == errc::malformed_header);
    }
}

TEST_CASE("header: scalar types and their sizes", "[wire]") {
    STATIC_REQUIRE(scalar_type_of<std::uint32_t> == scalar_type::u32);
    STATIC_REQUIRE(scalar_type_of<std::uint64_t> == scalar_type::u64);
    STATIC_REQUIRE(scalar_type_of<float> == scalar_type::f32);
    STATIC_REQUIRE(scalar_type_of<double> == scalar_type::f64);
    STATIC_REQUIRE(scalar_type_of<int> == scalar_type::none);
    STATIC_REQUIRE(scalar_type_of<std::uint16_t> == scalar_type::none);
    STATIC_REQUIRE(scalar_type_of<long double> == scalar_type::none);

    STATIC_REQUIRE(size_of(scalar_type::u32) == 4);
    STATIC_REQUIRE(size_of(scalar_type::f32) == 4);
    STATIC_REQUIRE(size_of(scalar_type::u64) == 8);
    STATIC_REQUIRE(size_of(scalar_type::f64) == 8);
    STATIC_REQUIRE(size_of(scalar_type::none) == 0);
    CHECK(size_of(static_cast<scalar_type>(99)) == 0);

    // The numbers are on the wire.
    STATIC_REQUIRE(static_cast<int>(scalar_type::none) == 0);
    STATIC_REQUIRE(static_cast<int>(scalar_type::u32) == 1);
    STATIC_REQUIRE(static_cast<int>(scalar_type::u64) == 2);
    STATIC_REQUIRE(static_cast<int>(scalar_type::f32) == 3);
    STATIC_REQUIRE(static_cast<int>(scalar_type::f64) == 4);
}

TEST_CASE("header: message kinds, known and replies", "[wire]") {
    STATIC_REQUIRE(static_cast<int>(message_kind::push) == 1);
    STATIC_REQUIRE(static_cast<int>(message_kind::pull) == 2);
    STATIC_REQUIRE(static_cast<int>(message_kind::push_reply) == 3);
    STATIC_REQUIRE(static_cast<int>(message_kind::pull_reply) == 4);
    STATIC_REQUIRE(static_cast<int>(message_kind::control) == 5);
    STATIC_REQUIRE(static_cast<int>(message_kind::control_reply) == 6);

    CHECK(is_known(message_kind::push));
    CHECK(is_known(message_kind::pull));
    CHECK(is_known(message_kind::push_reply));
    CHECK(is_known(message_kind::pull_reply));
    CHECK_FALSE(is_known(static_cast<message_kind>(0)));
    CHECK(is_known(message_kind::control));
    CHECK(is_known(message_kind::control_reply));
    CHECK(is_known(message_kind::clock));
    CHECK(is_known(message_kind::call_reply));
    STATIC_REQUIRE(static_cast<int>(message_kind::clock) == 7);
    STATIC_REQUIRE(static_cast<int>(message_kind::clock_reply) == 8);
    STATIC_REQUIRE(static_cast<int>(message_kind::call) == 9);
    STATIC_REQUIRE(static_cast<int>(message_kind::call_reply) == 10);
    CHECK_FALSE(is_known(static_cast<message_kind>(11)));
    CHECK_FALSE(is_known(static_cast<message_kind>(255)));

    CHECK_FALSE(is_reply(message_kind::push));
    CHECK_FALSE(is_reply(message_kind::pull));
    CHECK(is_reply(message_kind::push_reply));
    CHECK(is_reply(message_kind::pull_reply));
    CHECK_FALSE(is_reply(message_kind::control));
    CHECK(is_reply(message_kind::control_reply));
    CHECK_FALSE(is_reply(message_kind::clock));
    CHECK(is_reply(message_kind::clock_reply));
    CHECK_FALSE(is_reply(message_kind::call));
    CHECK(is_reply(message_kind::call_reply));
    CHECK_FALSE(is_reply(static_cast<message_kind>(0)));
}

TEST_CASE("header: wire_key and wire_value accept exactly the wire's types", "[wire]") {
    STATIC_REQUIRE(wire_key<std::uint32_t>);
    STATIC_REQUIRE(wire_key<std::uint64_t>);
    STATIC_REQUIRE_FALSE(wire_key<std::uint8_t>);
    STATIC_REQUIRE_FALSE(wire_key<std::uint16_t>);
    STATIC_REQUIRE_FALSE(wire_key<std::int32_t>);
    STATIC_REQUIRE_FALSE(wire_key<std::int64_t>);
    STATIC_REQUIRE_FALSE(wire_key<bool>);
    STATIC_REQUIRE_FALSE(wire_key<float>);

    STATIC_REQUIRE(wire_value<float>);
    STATIC_REQUIRE(wire_value<double>);
    STATIC_REQUIRE_FALSE(wire_value<long double>);
    STATIC_REQUIRE_FALSE(wire_value<int>);
    STATIC_REQUIRE_FALSE(wire_value<std::uint32_t>);
    STATIC_REQUIRE_FALSE(wire_value<const float>);

    // Every wire type has a scalar_type.
    STATIC_REQUIRE(scalar_type_of<std::uint32_t> != scalar_type::none);
    STATIC_REQUIRE(scalar_type_of<std::uint64_t> != scalar_type::none);
}

TEST_CASE("header: segments, padding and clock entries", "[wire]") {
    STATIC_REQUIRE(keys_segment == 0);
    STATIC_REQUIRE(values_segment == 1);
    STATIC_REQUIRE(lengths_segment == 2);
    STATIC_REQUIRE(segment_count == 3);
    STATIC_REQUIRE(padded(0) == 0);
    STATIC_REQUIRE(padded(1) == 8);
    STATIC_REQUIRE(padded(8) == 8);
    STATIC_REQUIRE(padded(9) == 16);
    STATIC_REQUIRE(padded(100) == 104);

    const clock_entry a{1, 2, 3, 4};
    CHECK(a == clock_entry{1, 2, 3, 4});
    CHECK_FALSE(a == clock_entry{1, 2, 3, 5});
    CHECK_FALSE(a == clock_entry{1, 2, 4, 4});
    auto h = full_header();
    auto other = h;
    CHECK(h == other);
    other.clocks[0].clock += 1;
    CHECK_FALSE(h == other);
}
