#include <petrel/wire/frame_decoder.hpp>

#include "support/frames.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

using namespace petrel;
using namespace petrel::wire;
using petrel::test::feed_in_pieces;
using petrel::test::frame_of;
using petrel::test::numbered_push;

TEST_CASE("frame_decoder: many small frames in one read are all delivered in order", "[wire]") {
    std::vector<std::byte> stream;
    for (std::uint64_t i = 0; i < 500; ++i) {
        auto m = numbered_push(1 + i % 5, 1);
        m.header.request_id = i;
        auto f = frame_of(m);
        stream.insert(stream.end(), f.begin(), f.end());
    }
    auto r = feed_in_pieces(stream, 1 << 20);
    REQUIRE_FALSE(r.error);
    REQUIRE(r.messages.size() == 500);
    for (std::uint64_t i = 0; i < 500; ++i) {
        CHECK(r.messages[i].header.request_id == i);
    }
}

TEST_CASE("frame_decoder: a truncated frame yields no message and no error yet", "[wire]") {
    auto stream = frame_of(numbered_push(10, 1));
    for (std::size_t cut : {std::size_t{1}, std::size_t{3}, wire::detail::envelope_fixed_bytes,
                            wire::detail::envelope_fixed_bytes + 5, stream.size() - 1}) {
        std::vector<std::byte> part(stream.begin(), stream.begin() + static_cast<long>(cut));
        auto r = feed_in_pieces(part, 1 << 16);
        CHECK_FALSE(r.error);
        CHECK(r.messages.empty());
    }
}

TEST_CASE("frame_decoder: random bytes never crash the decoder or allocate without bound",
          "[wire]") {
    std::mt19937_64 rng(12345);
    wire_limits limits;
    limits.max_frame_bytes = 1 << 20;
    const auto good = frame_of(numbered_push(8, 2));
    int refused = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        std::vector<std::byte> stream;
        if (trial % 2 == 0) {
            stream.resize(1 + rng() % 512);
            for (auto& b : stream) {
                b = static_cast<std::byte>(rng());
            }
        } else {
            stream = good; // a valid frame with a few bytes flipped
            for (int flips = 0; flips < 3; ++flips) {
                stream[rng() % stream.size()] ^= static_cast<std::byte>(1 + rng() % 255);
            }
        }
        auto r = feed_in_pieces(stream, 1 + rng() % 100, limits);
        if (r.error) {
            ++refused;
            CHECK(r.error.category() == petrel::error_category());
        }
        for (const auto& m : r.messages) {
            CHECK_FALSE(check_payload(m)); // anything delivered passed every check
        }
    }
    CHECK(refused > 1000);
}

TEST_CASE(
    "frame_decoder: a decoder told to hold after a frame keeps the rest staged until asked again",
    "[wire]") {
    std::vector<std::byte> stream;
    for (std::uint64_t i = 1; i <= 3; ++i) {
        const auto f = frame_of(numbered_push(10 * i, 2));
        stream.insert(stream.end(), f.begin(), f.end());
    }
    frame_decoder dec({}, std::make_shared<buffer_pool>());
    auto buf = dec.buffer();
    REQUIRE(buf.size() >= stream.size());
    std::memcpy(buf.data(), stream.data(), stream.size());
    std::vector<message> got;
    auto keep = [&](message&& m) { got.push_back(std::move(m)); };
    // Hold after the first frame.
    REQUIRE_FALSE(dec.consume(stream.size(), keep, [&] { return !got.empty(); }));
    CHECK(got.size() == 1);
    CHECK(dec.held());
    CHECK(dec.mid_frame());
    // Asked again with nothing new: the staged frames, one at a time while told to hold.
    REQUIRE_FALSE(dec.consume(0, keep, [&] { return got.size() < 3; }));
    CHECK(got.size() == 2);
    CHECK(dec.held());
    REQUIRE_FALSE(dec.consume(0, keep, [] { return false; }));
    REQUIRE(got.size() == 3);
    CHECK_FALSE(dec.held());
    CHECK_FALSE(dec.mid_frame());
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(got[i].header.key_count == 10 * (i + 1));
    }
    // The last frame never holds: nothing is left staged.
    got.clear();
    const auto one = frame_of(numbered_push(5, 1));
    std::memcpy(dec.buffer().data(), one.data(), one.size());
    REQUIRE_FALSE(dec.consume(one.size(), keep, [] { return true; }));
    CHECK(got.size() == 1);
    CHECK_FALSE(dec.held());
}

TEST_CASE(
    "frame_decoder: decoders that share a budget receive a payload only once its share is free, "
    "and give it back once its message is handed over",
    "[wire][security]") {
    auto pool = std::make_shared<buffer_pool>();
    auto budget = std::make_shared<petrel::detail::byte_budget>(10000);
    int woken = 0;
    frame_decoder a({}, pool);
    frame_decoder b({}, pool);
    a.share_budget(budget, [] {});
    b.share_budget(budget, [&] { ++woken; });
    const auto fa = frame_of(numbered_push(500, 2)); // 8000 bytes of payload
    const auto fb = frame_of(numbered_push(400, 2)); // 6400
    std::vector<message> got_a;
    std::vector<message> got_b;
    auto keep_a = [&](message&& m) { got_a.push_back(std::move(m)); };
    auto keep_b = [&](message&& m) { got_b.push_back(std::move(m)); };

    // A's header and half its payload: its share is taken.
    const std::size_t half = fa.size() / 2;
    std::memcpy(a.buffer().data(), fa.data(), half);
    REQUIRE_FALSE(a.consume(half, keep_a));
    CHECK(budget->used() >= 8000);
    CHECK(budget->used() < 8100);
    const auto a_share = budget->used();

    // B's whole frame: its header is read, its payload waits, nothing is delivered.
    std::memcpy(b.buffer().data(), fb.data(), fb.size());
    REQUIRE_FALSE(b.consume(fb.size(), keep_b));
    CHECK(b.waiting_for_budget());
    CHECK(got_b.empty());
    CHECK(budget->used() == a_share);
    REQUIRE_FALSE(b.consume(0, keep_b)); // asked again too early: still waiting
    CHECK(b.waiting_for_budget());

    // A's frame completes: its share comes back, B is woken and receives when asked again.
    const auto rest = a.buffer();
    REQUIRE(rest.size() == fa.size() - half);
    std::memcpy(rest.data(), fa.data() + half, rest.size());
    REQUIRE_FALSE(a.consume(rest.size(), keep_a));
    REQUIRE(got_a.size() == 1);
    CHECK(got_a[0].header.key_count == 500);
    CHECK(budget->used() == 0);
    CHECK(woken >= 1);
    REQUIRE_FALSE(b.consume(0, keep_b));
    CHECK_FALSE(b.waiting_for_budget());
    REQUIRE(got_b.size() == 1);
    CHECK(got_b[0].header.key_count == 400);
    CHECK(got_b[0].values().as<float>()[799] == 799.0f);
    CHECK(budget->used() == 0);

    SECTION("a payload larger than the whole budget is refused") {
        frame_decoder c({}, pool);
        c.share_budget(std::make_shared<petrel::detail::byte_budget>(4096), [] {});
        std::memcpy(c.buffer().data(), fa.data(), half);
        CHECK(c.consume(half, keep_a) == errc::frame_too_large);
    }
    SECTION("a decoder that goes, or drops its share, within a frame gives the share back") {
        {
            frame_decoder d({}, pool);
            d.share_budget(budget, [] {});
            std::memcpy(d.buffer().data(), fa.data(), half);
            REQUIRE_FALSE(d.consume(half, keep_a));
            CHECK(budget->used() == a_share);
        }
        CHECK(budget->used() == 0);
        frame_decoder e({}, pool);
        e.share_budget(budget, [] {});
        std::memcpy(e.buffer().data(), fa.data(), half);
        REQUIRE_FALSE(e.consume(half, keep_a));
        CHECK(budget->used() == a_share);
        e.drop_budget_share();
        CHECK(budget->used() == 0);
    }
    SECTION("payloads of at most 512 bytes are not counted") {
        frame_decoder s({}, pool);
        s.share_budget(std::make_shared<petrel::detail::byte_budget>(0), [] {});
        const auto small = frame_of(numbered_push(20, 2)); // 320 bytes
        std::memcpy(s.buffer().data(), small.data(), small.size());
        REQUIRE_FALSE(s.consume(small.size(), keep_a));
        CHECK_FALSE(s.waiting_for_budget());
        CHECK(got_a.size() == 2);
    }
}
