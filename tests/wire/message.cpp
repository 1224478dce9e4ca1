#include <petrel/wire/message.hpp>

#include "support/bytes.hpp"

#include <petrel/core/error.hpp>
#include <petrel/wire/frame.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <vector>

using namespace petrel;
using namespace petrel::wire;

using petrel::test::bytes_of;

namespace {

message_header request_header() {
    message_header h;
    h.kind = message_kind::pull;
    h.flags = 3;
    h.sender = 11;
    h.receiver = 22;
    h.request_id = 987654321;
    h.table_id = 5;
    h.key_type = scalar_type::u32;
    h.value_type = scalar_type::f64;
    h.width = 4;
    h.status = 0;
    h.range_begin = 100;
    h.range_end = 200;
    h.key_count = 3;
    h.clocks = {{100, 200, 1, 6}};
    h.segment_bytes = {12, 0, 0};
    return h;
}

} // namespace

TEST_CASE("message: a default message has an empty payload", "[wire]") {
    const message m;
    CHECK(m.payload_size() == 0);
    CHECK(m.keys().empty());
    CHECK(m.values().empty());
    CHECK(m.lengths().empty());
    CHECK(m.header.segment_bytes == std::array<std::uint64_t, segment_count>{});
}

TEST_CASE("message: set_segment records each segment's size in the header", "[wire]") {
    message m;
    const std::vector<std::uint64_t> keys{1, 2, 3};
    const std::vector<float> values{1, 2, 3, 4, 5, 6};
    const std::vector<std::uint32_t> lengths{1, 2, 3};
    const auto k = bytes_of(keys);

    m.set_segment(keys_segment, k);
    CHECK(m.header.segment_bytes[keys_segment] == 24);
    CHECK(m.header.segment_bytes[values_segment] == 0);
    CHECK(m.keys().data() == k.data()); // shared, not copied
    CHECK(m.payload_size() == 24);

    m.set_segment(values_segment, bytes_of(values));
    CHECK(m.header.segment_bytes[values_segment] == 24);
    CHECK(m.values().as<float>()[5] == 6.0f);

    m.set_segment(lengths_segment, bytes_of(lengths));
    CHECK(m.header.segment_bytes[lengths_segment] == 12);
    CHECK(m.lengths().as<std::uint32_t>()[2] == 3);
    CHECK(m.payload_size() == 24 + 24 + 12); // unpadded
    CHECK(framed_payload_bytes(m.header) == 24 + 24 + 16);

    SECTION("replacing a segment updates its size") {
        m.set_segment(values_segment, k.subspan(0, 5));
        CHECK(m.header.segment_bytes[values_segment] == 5);
        CHECK(m.payload_size() == 24 + 5 + 12);
    }
    SECTION("an empty segment clears it") {
        m.set_segment(lengths_segment, {});
        CHECK(m.header.segment_bytes[lengths_segment] == 0);
        CHECK(m.lengths().empty());
        CHECK(m.payload_size() == 48);
    }
}

TEST_CASE("message: copies share the payload bytes", "[wire]") {
    message m;
    m.set_segment(keys_segment, bytes_of(std::vector<std::uint64_t>{4, 5}));
    const message copy = m;
    CHECK(copy.keys().data() == m.keys().data());
    CHECK(copy.header == m.header);
}

TEST_CASE("message: make_reply answers the request it is given", "[wire]") {
    const auto req = request_header();
    const auto r = make_reply(req, message_kind::pull_reply);

    CHECK(r.header.kind == message_kind::pull_reply);
    CHECK(r.header.sender == 22);
    CHECK(r.header.receiver == 11);
    CHECK(r.header.request_id == 987654321);
    CHECK(r.header.table_id == 5);
    CHECK(r.header.key_type == scalar_type::u32);
    CHECK(r.header.value_type == scalar_type::f64);
    CHECK(r.header.width == 4);
    CHECK(r.header.range_begin == 100);
    CHECK(r.header.range_end == 200);
    CHECK(r.header.key_count == 3);
    // A fresh header otherwise: valid magic and version, success, no payload yet.
    CHECK(r.header.magic == wire::magic);
    CHECK(r.header.version == protocol_version);
    CHECK(r.header.status == 0);
    CHECK(r.header.flags == 0);
    CHECK(r.header.clocks.empty());
    CHECK(r.header.segment_bytes == std::array<std::uint64_t, segment_count>{});
    CHECK(r.payload_size() == 0);

    const auto pr = make_reply(req, message_kind::push_reply);
    CHECK(pr.header.kind == message_kind::push_reply);
    CHECK(pr.header.request_id == req.request_id);
}

TEST_CASE("message: a reply filled in with set_segment passes validation", "[wire]") {
    auto req = request_header();
    auto r = make_reply(req, message_kind::pull_reply);
    const std::vector<double> rows(3 * 4, 0.5);
    r.set_segment(values_segment, bytes_of(rows));
    CHECK_FALSE(validate(r, wire_limits{}));

    SECTION("a failed reply carries no payload") {
        auto failed = make_reply(req, message_kind::pull_reply);
        failed.header.status = static_cast<std::uint32_t>(errc::width_mismatch);
        CHECK_FALSE(validate(failed, wire_limits{}));
        failed.set_segment(values_segment, bytes_of(rows));
        CHECK(validate(failed, wire_limits{}) == errc::segment_size_mismatch);
    }
    SECTION("a value segment of the wrong size is caught") {
        r.set_segment(values_segment, bytes_of(std::vector<double>(5, 0.0)));
        CHECK(validate(r, wire_limits{}) == errc::value_count_mismatch);
    }
}
