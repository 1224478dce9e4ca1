#include <petrel/wire/header.hpp>

#include <petrel/wire/frame.hpp>

#include "support/frames.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <span>
#include <system_error>
#include <vector>

using namespace petrel;
using namespace petrel::wire;

namespace {

/// A reply with every field a reply may carry set to something other than its default.
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
    h.view = 0x0a0b0c0d0e0f1011ULL;
    h.clocks = {{0, 10, 1, 7}, {10, 20, 2, 9}, {20, 0xffffffffffffffffULL, 0xffffffffu, 1u << 31}};
    h.segment_bytes = {12, 3072, 40};
    return h;
}

/// The head of a frame carrying `h`: envelope and header body.
std::vector<std::byte> serialize(const message_header& h) {
    message m;
    m.header = h;
    std::vector<std::byte> out;
    encode_head(m, out);
    return out;
}

/// A push with every field a push may carry set to something other than its default.
message_header full_push() {
    auto h = full_header();
    h.kind = message_kind::push;
    h.status = 0;
    h.clocks.clear();
    h.encoding = encoding_keys_store;
    h.key_list_id = 0x1122334455667788ULL;
    h.key_list_digest = 0x8877665544332211ULL;
    h.update_id = 0x1213141516171819ULL;
    return h;
}

/// Decodes a head as a receiver without a limit on payloads would.
std::error_code decode(const std::vector<std::byte>& bytes, message_header& out) {
    wire_limits roomy;
    roomy.max_frame_bytes = ~std::uint64_t{0};
    frame_envelope e;
    if (auto ec = parse_envelope(bytes, roomy, e)) {
        return ec;
    }
    if (e.size == 0 || bytes.size() - e.size != e.body_bytes) {
        return errc::malformed_header;
    }
    return decode_body(std::span(bytes).subspan(e.size), e, out);
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

TEST_CASE("header: a frame starts with PT, the version and the kind", "[wire]") {
    char text[4];
    std::memcpy(text, &wire::magic, 4);
    CHECK(std::string(text, 4) == "PTRL");
    message_header h;
    h.kind = message_kind::clock_reply;
    const auto bytes = serialize(h);
    REQUIRE(bytes.size() >= wire::detail::envelope_fixed_bytes);
    CHECK(std::memcmp(bytes.data(), "PT", 2) == 0);
    CHECK(std::to_integer<int>(bytes[2]) == protocol_major);
    CHECK(std::to_integer<int>(bytes[3]) == protocol_minor);
    CHECK(std::to_integer<int>(bytes[4]) == static_cast<int>(message_kind::clock_reply));
    STATIC_REQUIRE(protocol_version == (protocol_major << 8 | protocol_minor));
    CHECK(version_text(protocol_version) ==
          std::to_string(protocol_major) + "." + std::to_string(protocol_minor));
}

TEST_CASE("header: every field survives encode_head and decode_head", "[wire]") {
    const auto h = full_header();
    message m;
    m.header = h;
    std::vector<std::byte> out{std::byte{1}, std::byte{2}}; // replaced, not appended to
    encode_head(m, out);
    CHECK(out.size() == head_bytes(h));

    message_header got;
    std::uint64_t payload_bytes = 0;
    REQUIRE_FALSE(decode_head(out, got, &payload_bytes));
    CHECK(payload_bytes == padded(12) + padded(3072) + padded(40));
    CHECK(payload_bytes == framed_payload_bytes(h));
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

    const auto push = full_push();
    REQUIRE_FALSE(decode(serialize(push), got));
    CHECK(got == push);
    CHECK(got.key_list_id == 0x1122334455667788ULL);
    CHECK(got.key_list_digest == 0x8877665544332211ULL);
    CHECK(got.update_id == 0x1213141516171819ULL);
}

TEST_CASE("header: each field round-trips alone, at its extremes", "[wire]") {
    // One field away from its default at a time: the mask and that field's encoding.
    for (unsigned i = 0; i < wire::detail::header_field_count; ++i) {
        const auto f = static_cast<wire::detail::header_field>(i);
        if (f == wire::detail::header_field::clocks) {
            continue;
        }
        for (std::uint64_t v :
             {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{0x7f}, std::uint64_t{0x80},
              std::uint64_t{0xffffffff}, ~std::uint64_t{0}}) {
            message_header h;
            h.kind = message_kind::push;
            if (f == wire::detail::header_field::status) {
                h.kind = message_kind::push_reply;
            }
            if (f == wire::detail::header_field::secret) {
                h.kind = message_kind::replica_update;
            }
            if (!wire::detail::set_field(h, f, v)) {
                continue; // does not fit the field
            }
            INFO("field " << i << " value " << v);
            message_header got;
            REQUIRE_FALSE(decode(serialize(h), got));
            CHECK(got == h);
        }
    }
}

TEST_CASE("header: decoding replaces earlier contents", "[wire]") {
    message_header got = full_header();
    REQUIRE_FALSE(decode(serialize(message_header{}), got));
    CHECK(got == message_header{});
}

TEST_CASE("header: fields at their defaults are left out; sizes come from the encoder", "[wire]") {
    // Envelope (magic, major, minor, kind, body and payload lengths) and an empty mask.
    CHECK(serialize(message_header{}).size() == wire::detail::envelope_fixed_bytes + 3);
    CHECK(head_bytes(message_header{}) == serialize(message_header{}).size());

    // A one-key push as a worker sends it, and the server's reply.
    message_header push;
    push.request_id = 1000;
    push.sender = 3;
    push.receiver = 1;
    push.range_begin = 42;
    push.range_end = 43;
    push.key_count = 1;
    push.worker = 0;
    push.clock = 5;
    push.view = 2;
    push.update_id = 0x9e3779b97f4a7c15ULL;
    push.segment_bytes = {8, 4, 0};
    CHECK(serialize(push).size() == head_bytes(push));
    CHECK(head_bytes(push) <= 40);
    auto reply = make_reply(push, message_kind::push_reply).header;
    reply.clocks = {{42, 43, 0, 5}};
    CHECK(serialize(reply).size() == head_bytes(reply));
    CHECK(head_bytes(reply) <= 24);

    auto h = full_header();
    for (std::size_t clocks : {0, 1, 5}) {
        h.clocks.assign(clocks, clock_entry{1, 2, 3, 4});
        CHECK(serialize(h).size() == head_bytes(h));
    }
}

TEST_CASE("header: the most clock entries allowed round-trip, one more is refused", "[wire]") {
    message_header h;
    h.kind = message_kind::pull_reply;
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

TEST_CASE("header: a newer minor version's fields are skipped, an older one's missing "
          "fields take their defaults",
          "[wire]") {
    const auto h = full_header();
    const auto next_minor = static_cast<std::uint8_t>(protocol_minor + 1);
    for (unsigned bit : {unsigned{wire::detail::header_field_count}, 40u, 63u}) {
        for (std::uint64_t value : {std::uint64_t{0}, std::uint64_t{300}, ~std::uint64_t{0}}) {
            INFO("bit " << bit << " value " << value);
            message_header got;
            REQUIRE_FALSE(decode(test::head_with_newer_field(h, bit, value, next_minor), got));
            CHECK(got.version == (protocol_major << 8 | next_minor));
            got.version = protocol_version;
            CHECK(got == h);
        }
    }
    // A frame of this version, read as an older peer would: every field it sends is one
    // that peer knows, and one it leaves out reads as its default.
    message_header sparse;
    sparse.kind = message_kind::pull;
    sparse.request_id = 9;
    message_header got = full_header();
    REQUIRE_FALSE(decode(serialize(sparse), got));
    CHECK(got == sparse);
    CHECK(got.worker == no_worker);
    CHECK(got.width == 1);
}

TEST_CASE("header: decode_head names what is wrong", "[wire]") {
    const auto good = serialize(full_header());
    message_header out;

    SECTION("bad magic") {
        auto b = good;
        b[0] = std::byte{'X'};
        CHECK(decode(b, out) == errc::bad_magic);
        b = good;
        b[1] = std::byte{'X'};
        CHECK(decode(b, out) == errc::bad_magic);
    }
    SECTION("bad magic is reported even when the rest is missing") {
        std::vector<std::byte> b(4, std::byte{0});
        CHECK(decode(b, out) == errc::bad_magic);
    }
    SECTION("another major version, before or after this one") {
        for (int major : {protocol_major - 1, protocol_major + 1, 0, 255}) {
            auto b = good;
            b[2] = static_cast<std::byte>(major);
            CHECK(decode(b, out) == errc::unsupported_version);
        }
    }
    SECTION("another minor version is read") {
        auto b = good;
        b[3] = static_cast<std::byte>(protocol_minor + 1);
        REQUIRE_FALSE(decode(b, out));
        CHECK(out.version == protocol_version + 1);
    }
    SECTION("an unknown kind") {
        for (int kind : {0, 14, 255}) {
            auto b = good;
            b[4] = static_cast<std::byte>(kind);
            CHECK(decode(b, out) == errc::bad_message_kind);
        }
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
    SECTION("a body length over the limit") {
        auto b = test::envelope_of(message_kind::push, wire_limits{}.max_header_bytes + 1, 0);
        CHECK(decode(b, out) == errc::header_too_large);
    }
    SECTION("an empty body") {
        CHECK(decode(test::envelope_of(message_kind::push, 0, 0), out) == errc::malformed_header);
    }
    SECTION("a number longer than 64 bits") {
        auto b = test::envelope_of(message_kind::push, 11, 0);
        for (int i = 0; i < 10; ++i) {
            b.push_back(std::byte{0xff});
        }
        b.push_back(std::byte{0x01});
        CHECK(decode(b, out) == errc::malformed_header);
    }
    SECTION("a value too large for its field") {
        // sender (bit 6) = 2^32: the field holds 32 bits.
        auto b = test::envelope_of(message_kind::push, 6, 0);
        for (int v : {0x40, 0x80, 0x80, 0x80, 0x80, 0x10}) {
            b.push_back(static_cast<std::byte>(v));
        }
        CHECK(decode(b, out) == errc::malformed_header);
    }
    SECTION("a field the kind may not carry") {
        message_header h;
        h.kind = message_kind::push;
        h.status = 3; // a status is a reply's
        CHECK(decode(serialize(h), out) == errc::malformed_header);
        h = message_header{};
        h.kind = message_kind::pull;
        h.clocks = {{0, 1, 0, 1}}; // clock entries are a reply's
        CHECK(decode(serialize(h), out) == errc::malformed_header);
        h = message_header{};
        h.kind = message_kind::pull;
        h.update_id = 7; // an update id is a push's
        CHECK(decode(serialize(h), out) == errc::malformed_header);
        h = message_header{};
        h.kind = message_kind::clock;
        h.key_list_id = 7; // key lists travel with pushes and pulls
        CHECK(decode(serialize(h), out) == errc::malformed_header);
        h = message_header{};
        h.kind = message_kind::push;
        h.secret = 7; // the server secret travels with servers' updates only
        CHECK(decode(serialize(h), out) == errc::malformed_header);
        h.kind = message_kind::row_transfer;
        REQUIRE_FALSE(decode(serialize(h), out));
        CHECK(out.secret == 7);
        h.update_id = 8; // rows replace, whoever pushed them: no update id
        CHECK(decode(serialize(h), out) == errc::malformed_header);
        h.kind = message_kind::replica_update;
        REQUIRE_FALSE(decode(serialize(h), out));
        CHECK(out.update_id == 8);
        h.key_list_id = 9; // a server's update carries its keys
        CHECK(decode(serialize(h), out) == errc::malformed_header);
    }
    SECTION("a clock count larger than the bytes that follow") {
        // clocks (bit 10): a count of 100 and no entries.
        auto b = test::envelope_of(message_kind::pull_reply, 3, 0);
        for (int v : {0x80, 0x08, 100}) {
            b.push_back(static_cast<std::byte>(v));
        }
        CHECK(decode(b, out) == errc::malformed_header);
        CHECK(out.clocks.empty());
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
    STATIC_REQUIRE(static_cast<int>(message_kind::replica_update) == 11);
    STATIC_REQUIRE(static_cast<int>(message_kind::row_transfer) == 12);
    STATIC_REQUIRE(static_cast<int>(message_kind::hand_over) == 13);
    CHECK(is_known(message_kind::hand_over));
    CHECK_FALSE(is_known(static_cast<message_kind>(14)));
    CHECK_FALSE(is_known(static_cast<message_kind>(255)));
    // Only servers send servers' updates; each changes rows, as a worker's push does.
    for (int k = 1; k <= 13; ++k) {
        const auto kind = static_cast<message_kind>(k);
        CHECK(is_server_update(kind) == (k >= 11));
        CHECK(is_push(kind) == (k == 1 || k >= 11));
        CHECK_FALSE((is_reply(kind) && is_push(kind)));
        // Every request has a reply kind; a reply answers itself.
        CHECK(is_reply(reply_kind_of(kind)));
        CHECK((reply_kind_of(kind) == kind) == is_reply(kind));
        CHECK((reply_kind_of(kind) == message_kind::push_reply) ==
              (is_push(kind) || kind == message_kind::push_reply));
    }
    CHECK(reply_kind_of(message_kind::pull) == message_kind::pull_reply);
    CHECK(reply_kind_of(message_kind::control) == message_kind::control_reply);
    CHECK(reply_kind_of(message_kind::clock) == message_kind::clock_reply);
    CHECK(reply_kind_of(message_kind::call) == message_kind::call_reply);

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

TEST_CASE("header: a read-only peer may send pulls, control messages and replies only",
          "[wire][security]") {
    for (auto k = static_cast<int>(message_kind::push);
         k <= static_cast<int>(message_kind::hand_over); ++k) {
        const auto kind = static_cast<message_kind>(k);
        INFO(k);
        CHECK(read_only_may_send(kind) ==
              (kind == message_kind::pull || kind == message_kind::control || is_reply(kind)));
    }
    CHECK_FALSE(read_only_may_send(message_kind::push));
    CHECK_FALSE(read_only_may_send(message_kind::clock));
    CHECK_FALSE(read_only_may_send(message_kind::call));
    CHECK_FALSE(read_only_may_send(message_kind::replica_update));
    CHECK_FALSE(read_only_may_send(message_kind::row_transfer));
    CHECK_FALSE(read_only_may_send(message_kind::hand_over));
    CHECK(read_only_may_send(message_kind::pull));
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
