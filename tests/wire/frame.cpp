#include <petrel/wire/frame.hpp>

#include "support/frames.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace petrel;
using namespace petrel::wire;
using petrel::test::feed_in_pieces;
using petrel::test::frame_of;
using petrel::test::numbered_push;

namespace {

std::vector<std::byte> raw_bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    return {b, b + n};
}

} // namespace

TEST_CASE("frame: a message survives encoding and decoding", "[wire]") {
    const auto m = numbered_push(100, 3);
    const auto stream = frame_of(m);
    for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, stream.size()}) {
        auto r = feed_in_pieces(stream, chunk);
        REQUIRE_FALSE(r.error);
        REQUIRE(r.messages.size() == 1);
        const auto& got = r.messages[0];
        CHECK(got.header == m.header);
        CHECK(raw_bytes(got.keys().data(), got.keys().size()) ==
              raw_bytes(m.keys().data(), m.keys().size()));
        CHECK(raw_bytes(got.values().data(), got.values().size()) ==
              raw_bytes(m.values().data(), m.values().size()));
        CHECK(reinterpret_cast<std::uintptr_t>(got.values().data()) % 8 == 0);
    }
}

TEST_CASE("frame: a 64 MiB message round-trips", "[wire]") {
    const std::size_t width = 4096;
    const std::size_t n = (std::size_t{64} << 20) / (width * sizeof(float));
    const auto m = numbered_push(n, width);
    const auto stream = frame_of(m);
    auto r = feed_in_pieces(stream, 1 << 20);
    REQUIRE_FALSE(r.error);
    REQUIRE(r.messages.size() == 1);
    const auto got = r.messages[0].values().as<float>();
    REQUIRE(got.size() == n * width);
    CHECK(got[0] == 0.0f);
    CHECK(got[got.size() - 1] == static_cast<float>(got.size() - 1));
    CHECK(std::memcmp(got.data(), m.values().data(), m.values().size()) == 0);
}

TEST_CASE("frame: a large frame's head is padded so that its payload is aligned; the padding "
          "must be zeros",
          "[wire]") {
    // Below the threshold: no padding. At and above it: a head of a multiple of 64 bytes,
    // for every length of header body around the length's own varint boundary.
    int padded_heads = 0;
    for (std::size_t width : {std::size_t{1}, std::size_t{2048}, std::size_t{4096}}) {
        for (std::uint64_t request = 0; request < 300; request += 7) {
            auto m = numbered_push(8, width);
            m.header.request_id = request << 50; // a longer header body
            const auto layout = layout_of(m.header);
            INFO("width " << width << " request " << request);
            if (layout.payload < aligned_payload_bytes) {
                std::vector<std::byte> head;
                encode_head(m, head);
                CHECK(head.size() < payload_alignment);
                continue;
            }
            CHECK(layout.head_bytes % payload_alignment == 0);
            const auto stream = frame_of(m);
            CHECK(stream.size() == layout.frame_bytes());
            auto r = feed_in_pieces(stream, 1 << 16);
            REQUIRE_FALSE(r.error);
            REQUIRE(r.messages.size() == 1);
            CHECK(r.messages[0].header == m.header);
            CHECK(r.messages[0].received_head_bytes == layout.head_bytes);
            CHECK(std::memcmp(r.messages[0].values().data(), m.values().data(),
                              m.values().size()) == 0);
            // The last byte of a padded head is padding: anything but zero is refused.
            if (layout.body_bytes == wire::detail::body_bytes(m.header)) {
                continue; // aligned without padding
            }
            ++padded_heads;
            auto bad = stream;
            bad[layout.head_bytes - 1] = std::byte{1};
            CHECK(feed_in_pieces(bad, 1 << 16).error == errc::malformed_header);
        }
    }
    CHECK(padded_heads > 40);
}

TEST_CASE("frame: u32 keys with double values stay aligned", "[wire]") {
    std::vector<std::uint32_t> keys{1, 2, 3};
    std::vector<double> values{1.5, 2.5, 3.5};
    message m;
    m.header.kind = message_kind::push;
    m.header.key_type = scalar_type::u32;
    m.header.value_type = scalar_type::f64;
    m.header.key_count = 3;
    m.header.range_end = 10;
    m.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
    auto r = feed_in_pieces(frame_of(m), 5);
    REQUIRE_FALSE(r.error);
    REQUIRE(r.messages.size() == 1);
    CHECK(reinterpret_cast<std::uintptr_t>(r.messages[0].values().data()) % alignof(double) == 0);
    CHECK(r.messages[0].values().as<double>()[2] == 3.5);
}

TEST_CASE("frame: invalid frames are refused with a precise error", "[wire]") {
    auto good = numbered_push(4, 2);
    SECTION("bad magic") {
        auto stream = frame_of(good);
        stream[0] = std::byte{0x12};
        CHECK(feed_in_pieces(stream, 64).error == errc::bad_magic);
    }
    SECTION("another major protocol version") {
        auto stream = frame_of(good);
        stream[2] = static_cast<std::byte>(protocol_major + 1);
        frame_decoder dec({}, std::make_shared<buffer_pool>());
        std::vector<message> out;
        CHECK(test::feed_all(dec, stream, out) == errc::unsupported_version);
        CHECK(out.empty());
        CHECK_THAT(dec.error_text(),
                   Catch::Contains("the peer speaks wire protocol " +
                                   std::to_string(protocol_major + 1) + "." +
                                   std::to_string(protocol_minor) + ", this node " +
                                   version_text(protocol_version)));
    }
    SECTION("a connection handshake's hello where a frame belongs") {
        // The peer authenticates its connections ("PTRLAUTH", see
        // transport/detail/handshake.hpp) and this node has no secret.
        std::vector<std::byte> hello(41, std::byte{0});
        std::memcpy(hello.data(), "PTRLAUTH", 8);
        hello[8] = std::byte{1};
        CHECK(feed_in_pieces(hello, 64).error == errc::auth_failed);
        CHECK(feed_in_pieces(hello, 1).error == errc::auth_failed); // byte by byte too
    }
    SECTION("a TLS handshake record where a frame belongs") {
        // The peer runs TLS (transport_options::tls) and this node does not: a ClientHello
        // starts with the record type 0x16 and version 3.x.
        std::vector<std::byte> client_hello{std::byte{0x16}, std::byte{0x03}, std::byte{0x01},
                                            std::byte{0x00}, std::byte{0x80}};
        client_hello.resize(133, std::byte{0});
        CHECK(feed_in_pieces(client_hello, 64).error == errc::tls_failed);
        CHECK(feed_in_pieces(client_hello, 1).error == errc::tls_failed);
    }
    SECTION("another minor protocol version is accepted") {
        auto stream = frame_of(good);
        stream[3] = static_cast<std::byte>(protocol_minor + 1);
        auto r = feed_in_pieces(stream, 64);
        REQUIRE_FALSE(r.error);
        REQUIRE(r.messages.size() == 1);
        CHECK(r.messages[0].keys().as<std::uint64_t>()[3] == good.keys().as<std::uint64_t>()[3]);
    }
    SECTION("unsorted keys") {
        std::vector<std::uint64_t> keys{0, 4, 2, 6};
        good.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
        CHECK(feed_in_pieces(frame_of(good), 64).error == errc::keys_not_sorted);
    }
    SECTION("duplicate keys") {
        std::vector<std::uint64_t> keys{0, 2, 2, 6};
        good.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
        CHECK(feed_in_pieces(frame_of(good), 64).error == errc::keys_not_sorted);
    }
    SECTION("key outside the stated range") {
        good.header.range_end = 5;
        CHECK(feed_in_pieces(frame_of(good), 64).error == errc::key_out_of_range);
    }
    SECTION("values that do not match keys x width") {
        good.header.width = 3;
        CHECK(feed_in_pieces(frame_of(good), 64).error == errc::value_count_mismatch);
    }
    SECTION("segment sizes that do not add up") {
        good.header.segment_bytes[keys_segment] += 8;
        CHECK(feed_in_pieces(frame_of(good), 64).error == errc::segment_size_mismatch);
    }
    SECTION("a key count whose byte size overflows") {
        good.header.key_count = std::uint64_t{1} << 62;
        good.header.width = 1u << 31;
        CHECK(feed_in_pieces(frame_of(good), 64).error == errc::segment_size_mismatch);
    }
    SECTION("an unknown kind") {
        good.header.kind = static_cast<message_kind>(77);
        CHECK(feed_in_pieces(frame_of(good), 64).error == errc::bad_message_kind);
    }
    SECTION("a frame over the receiver's limit is refused before its payload is read") {
        wire_limits small;
        small.max_frame_bytes = 16;
        auto stream = frame_of(good);
        stream.resize(wire::detail::envelope_fixed_bytes + 2); // only the envelope arrives
        CHECK(feed_in_pieces(stream, 64, small).error == errc::frame_too_large);
    }
    SECTION("a header over the limit") {
        const auto stream = test::envelope_of(message_kind::push, std::uint64_t{1} << 30, 0);
        CHECK(feed_in_pieces(stream, 64).error == errc::header_too_large);
    }
    SECTION("too many clock entries") {
        message reply;
        reply.header.kind = message_kind::push_reply;
        good = reply;
        // Entries of about 17 bytes each: more than the default limit on a header.
        good.header.clocks.assign(max_clock_entries + 1,
                                  clock_entry{0, 0, 0xffffffffu, ~std::uint64_t{0}});
        wire_limits roomy;
        roomy.max_header_bytes = 1 << 20; // past the size check, the count check must hold
        CHECK(feed_in_pieces(frame_of(good), 1 << 20, roomy).error == errc::malformed_header);
        CHECK(feed_in_pieces(frame_of(good), 1 << 20).error == errc::header_too_large);
    }
    SECTION("a header whose declared length cuts it short") {
        auto stream = frame_of(good);
        const auto len = std::to_integer<std::uint8_t>(stream[wire::detail::envelope_fixed_bytes]);
        REQUIRE(len < 0x80); // one byte
        stream[wire::detail::envelope_fixed_bytes] = static_cast<std::byte>(len - 3);
        CHECK(feed_in_pieces(stream, 64).error);
    }
}

TEST_CASE("frame: validate() applies the decoder's checks to a message object", "[wire]") {
    auto m = numbered_push(4, 2);
    CHECK_FALSE(validate(m, {}));
    wire_limits small;
    small.max_frame_bytes = 8;
    CHECK(validate(m, small) == errc::frame_too_large);
    m.header.range_end = 3;
    CHECK(validate(m, {}) == errc::key_out_of_range);
}

TEST_CASE("frame: control messages carry one body segment and nothing else", "[wire]") {
    message m;
    m.header.kind = message_kind::control;
    std::vector<std::byte> body(100, std::byte{7});
    m.set_segment(values_segment, shared_bytes::copy_of(body));
    CHECK_FALSE(validate(m, {}));
    m.header.kind = message_kind::control_reply;
    m.header.status = 23; // a refusal keeps its body, so that its text reaches the log
    CHECK_FALSE(validate(m, {}));

    auto with_keys = m;
    std::vector<std::uint64_t> keys{1, 2};
    with_keys.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    CHECK(validate(with_keys, {}) == errc::segment_size_mismatch);
    auto counted = m;
    counted.header.key_count = 1;
    CHECK(validate(counted, {}) == errc::segment_size_mismatch);

    message big;
    big.header.kind = message_kind::control;
    big.set_segment(values_segment,
                    shared_bytes::copy_of(std::vector<std::byte>(max_control_bytes + 1)));
    CHECK(validate(big, {}) == errc::frame_too_large);
}

TEST_CASE("frame: clock messages carry no payload", "[wire]") {
    message m;
    m.header.kind = message_kind::clock;
    m.header.range_end = key_space_end<std::uint64_t>;
    m.header.worker = 2;
    m.header.clock = 7;
    CHECK_FALSE(validate(m, {}));
    m.header.kind = message_kind::clock_reply;
    m.header.clocks = {{0, 10, 2, 7}};
    CHECK_FALSE(validate(m, {}));

    auto with_body = m;
    std::vector<std::byte> body(8, std::byte{1});
    with_body.set_segment(values_segment, shared_bytes::copy_of(body));
    CHECK(validate(with_body, {}) == errc::segment_size_mismatch);
    auto counted = m;
    counted.header.key_count = 1;
    CHECK(validate(counted, {}) == errc::segment_size_mismatch);
    auto backwards = m;
    backwards.header.range_begin = 10;
    backwards.header.range_end = 5;
    CHECK(validate(backwards, {}) == errc::malformed_header);
}

TEST_CASE("frame: calls carry a key range and one body, also on failed replies", "[wire]") {
    message m;
    m.header.kind = message_kind::call;
    m.header.range_begin = 100;
    m.header.range_end = 200;
    std::vector<std::byte> body(40, std::byte{3});
    m.set_segment(values_segment, shared_bytes::copy_of(body));
    CHECK_FALSE(validate(m, {}));
    m.header.kind = message_kind::call_reply;
    m.header.status = static_cast<std::uint32_t>(errc::handler_failed); // the error's text
    CHECK_FALSE(validate(m, {}));

    auto with_keys = m;
    std::vector<std::uint64_t> keys{100};
    with_keys.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    with_keys.header.key_count = 1;
    CHECK(validate(with_keys, {}) == errc::segment_size_mismatch);
    message big;
    big.header.kind = message_kind::call;
    big.set_segment(values_segment,
                    shared_bytes::copy_of(std::vector<std::byte>(max_control_bytes + 1)));
    CHECK(validate(big, {}) == errc::frame_too_large);
}

TEST_CASE("frame: key runs stand for every key of each run and are checked", "[wire]") {
    auto runs_push = [](std::vector<std::uint64_t> runs, std::uint64_t count) {
        message m;
        m.header.kind = message_kind::push;
        m.header.flags = flag_key_runs;
        m.header.key_count = count;
        m.header.range_begin = runs.empty() ? 0 : runs.front();
        m.header.range_end = runs.empty() ? 1 : runs.back();
        std::vector<float> values(count, 1.0f);
        m.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(runs))));
        m.set_segment(values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
        return m;
    };
    CHECK_FALSE(validate(runs_push({10, 20, 64, 128}, 74), {}));
    // The decoder accepts the same frame.
    const auto ok = feed_in_pieces(frame_of(runs_push({10, 20, 64, 128}, 74)), 7);
    REQUIRE_FALSE(ok.error);
    REQUIRE(ok.messages.size() == 1);
    CHECK(ok.messages[0].header.key_count == 74);
    // Counts that do not add up, empty, overlapping or backwards runs, runs outside the range.
    CHECK(validate(runs_push({10, 20, 64, 128}, 75), {}));
    CHECK(validate(runs_push({10, 20, 20, 20}, 10), {}) == errc::keys_not_sorted);
    CHECK(validate(runs_push({10, 20, 15, 30}, 25), {}) == errc::keys_not_sorted);
    auto wide = runs_push({10, 20}, 10);
    wide.header.range_end = 15;
    CHECK(validate(wide, {}) == errc::key_out_of_range);
    // More runs than keys, an odd number of run bounds, or runs with per-key lengths.
    auto many = runs_push({1, 2, 3, 4}, 2);
    many.header.key_count = 1;
    CHECK(validate(many, {}));
    auto odd = runs_push({1, 2, 3, 4}, 2);
    odd.set_segment(keys_segment, odd.keys().subspan(0, 3 * sizeof(std::uint64_t)));
    CHECK(validate(odd, {}) == errc::segment_size_mismatch);
    // Runs on a pull: no values. On a reply: refused.
    auto pull = runs_push({0, 8}, 8);
    pull.header.kind = message_kind::pull;
    pull.set_segment(values_segment, {});
    CHECK_FALSE(validate(pull, {}));
    auto reply = runs_push({0, 8}, 8);
    reply.header.kind = message_kind::pull_reply;
    CHECK(validate(reply, {}) == errc::segment_size_mismatch);
}

TEST_CASE("frame: header size is what the encoder writes", "[wire]") {
    message m = numbered_push(3, 1);
    for (std::size_t clocks : {0, 1, 5}) {
        m.header.clocks.assign(clocks, clock_entry{1, 2, 3, 4});
        std::vector<std::byte> head;
        encode_head(m, head);
        CHECK(head.size() == head_bytes(m.header));
        CHECK(frame_bytes(m.header) == head.size() + framed_payload_bytes(m.header));
    }
}

namespace {

/// A valid message of kind `k`, with the fields and segments that kind carries.
message valid_of(message_kind k) {
    std::vector<std::uint64_t> keys{3, 5};
    std::vector<float> values{1.5f, 2.5f};
    std::vector<std::byte> body(13, std::byte{0x42});
    message m;
    m.header.kind = k;
    m.header.request_id = 77;
    m.header.sender = 2;
    m.header.receiver = 1;
    m.header.table_id = 4;
    m.header.range_begin = 0;
    m.header.range_end = 10;
    m.header.view = 3;
    const bool reply = is_reply(k);
    if (reply) {
        m.header.clocks = {{0, 10, 0, 2}};
    } else {
        m.header.worker = 0;
        m.header.clock = 2;
    }
    switch (k) {
    case message_kind::push:
        m.header.key_count = 2;
        m.header.update_id = 0x5555aaaa5555aaaaULL;
        m.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
        m.set_segment(values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
        break;
    case message_kind::replica_update:
    case message_kind::row_transfer:
        m.header.worker = no_worker;
        m.header.key_count = 2;
        m.header.secret = 0x0123456789abcdefULL;
        if (k == message_kind::replica_update) {
            m.header.update_id = 0x5555aaaa5555aaaaULL;
        } else {
            m.header.flags = flag_ordered;
        }
        m.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
        m.set_segment(values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
        break;
    case message_kind::hand_over:
        m.header.worker = no_worker;
        m.header.secret = 0x0123456789abcdefULL;
        break;
    case message_kind::pull:
        m.header.key_count = 2;
        m.set_segment(keys_segment, shared_bytes::copy_of(std::as_bytes(std::span(keys))));
        break;
    case message_kind::pull_reply:
        m.header.key_count = 2;
        m.set_segment(values_segment, shared_bytes::copy_of(std::as_bytes(std::span(values))));
        break;
    case message_kind::control:
    case message_kind::control_reply:
    case message_kind::call:
    case message_kind::call_reply:
        m.set_segment(values_segment, shared_bytes::copy_of(std::span<const std::byte>(body)));
        break;
    case message_kind::clock:
        m.header.flags = flag_finish;
        break;
    case message_kind::push_reply:
    case message_kind::clock_reply:
        break;
    }
    if (k == message_kind::control || k == message_kind::control_reply) {
        m.header.range_end = 0;
        m.header.clocks.clear();
    }
    return m;
}

} // namespace

TEST_CASE("frame: every kind decodes when valid, waits when cut short and refuses each bad "
          "field",
          "[wire]") {
    for (int kind = 1; kind <= static_cast<int>(message_kind::hand_over); ++kind) {
        const auto k = static_cast<message_kind>(kind);
        INFO("kind " << kind);
        const auto m = valid_of(k);
        const auto stream = frame_of(m);

        // Valid: one message, header and segments as sent.
        auto r = feed_in_pieces(stream, 3);
        REQUIRE_FALSE(r.error);
        REQUIRE(r.messages.size() == 1);
        CHECK(r.messages[0].header == m.header);
        CHECK(r.messages[0].received_head_bytes == head_bytes(m.header));
        for (std::size_t s = 0; s < segment_count; ++s) {
            CHECK(raw_bytes(r.messages[0].segments[s].data(), r.messages[0].segments[s].size()) ==
                  raw_bytes(m.segments[s].data(), m.segments[s].size()));
        }

        // Truncated anywhere: no message and no error yet.
        for (std::size_t cut = 0; cut < stream.size(); ++cut) {
            const std::vector<std::byte> part(stream.begin(),
                                              stream.begin() + static_cast<std::ptrdiff_t>(cut));
            auto t = feed_in_pieces(part, 1 << 16);
            CHECK_FALSE(t.error);
            CHECK(t.messages.empty());
        }

        // Each field the kind may not carry.
        const std::uint64_t allowed = wire::detail::allowed_fields(k);
        using wire::detail::field_bit;
        using wire::detail::header_field;
        auto refused = [&](auto mutate, std::error_code expected) {
            auto bad = m;
            mutate(bad.header);
            CHECK(feed_in_pieces(frame_of(bad), 64).error == expected);
        };
        if ((allowed & field_bit(header_field::status)) == 0) {
            refused([](message_header& h) { h.status = 1; }, errc::malformed_header);
        }
        if ((allowed & field_bit(header_field::clocks)) == 0) {
            refused([](message_header& h) { h.clocks = {{0, 1, 0, 1}}; }, errc::malformed_header);
        }
        if ((allowed & field_bit(header_field::update_id)) == 0) {
            refused([](message_header& h) { h.update_id = 9; }, errc::malformed_header);
        }
        if ((allowed & field_bit(header_field::key_list_id)) == 0) {
            refused([](message_header& h) { h.key_list_id = 9; }, errc::malformed_header);
            refused([](message_header& h) { h.key_list_digest = 9; }, errc::malformed_header);
        }
        if ((allowed & field_bit(header_field::secret)) == 0) {
            refused([](message_header& h) { h.secret = 9; }, errc::malformed_header);
        }
        // Flags no kind defines.
        refused([](message_header& h) { h.flags |= 32; }, errc::malformed_header);
        refused([](message_header& h) { h.flags |= 64; }, errc::malformed_header);
        // Fields every kind carries, with values the checks refuse.
        if (k == message_kind::control || k == message_kind::control_reply) {
            refused([](message_header& h) { h.key_count = 1; }, errc::segment_size_mismatch);
        } else {
            refused([](message_header& h) { h.key_type = scalar_type::f32; },
                    errc::malformed_header);
            refused([](message_header& h) { h.value_type = scalar_type::none; },
                    errc::malformed_header);
            refused(
                [](message_header& h) {
                    h.range_begin = 20;
                    h.range_end = 10;
                },
                errc::malformed_header);
            refused([](message_header& h) { h.encoding = 0x80; }, errc::malformed_header);
        }
        // A body sent as another kind: a reply's clock entries under its request's kind,
        // a push's values under a pull's, a pull without the values a push needs.
        if (is_reply(k) && !m.header.clocks.empty()) {
            auto relabelled = stream;
            const int request = k == message_kind::push_reply   ? 1
                                : k == message_kind::pull_reply ? 2
                                                                : kind - 1;
            relabelled[4] = static_cast<std::byte>(request);
            CHECK(feed_in_pieces(relabelled, 64).error == errc::malformed_header);
        }
        if (is_server_update(k)) {
            // A server's update sent as a worker's push: the secret is no push's field.
            auto relabelled = stream;
            relabelled[4] = static_cast<std::byte>(message_kind::push);
            CHECK(feed_in_pieces(relabelled, 64).error == errc::malformed_header);
        }
        if (k == message_kind::push || k == message_kind::pull) {
            auto relabelled = stream;
            relabelled[4] = static_cast<std::byte>(k == message_kind::push ? message_kind::pull
                                                                           : message_kind::push);
            CHECK(feed_in_pieces(relabelled, 64).error);
        }
        // A key count that does not match the segments (a push's reply carries none and
        // checks none: the count only echoes the request's).
        if (k == message_kind::push_reply) {
            continue;
        }
        auto bad = m;
        bad.header.key_count += 1;
        CHECK(feed_in_pieces(frame_of(bad), 64).error);
    }
}
