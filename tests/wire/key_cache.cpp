#include <petrel/wire/key_cache.hpp>

#include <petrel/wire/frame_decoder.hpp>

#include "support/frames.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

using namespace petrel;
using namespace petrel::wire;
using petrel::test::cached_push;

namespace {

shared_bytes shared_keys(std::vector<std::uint64_t> keys) {
    return shared_bytes::copy_of(std::as_bytes(std::span(keys)));
}

std::vector<std::uint64_t> iota_keys(std::size_t n, std::uint64_t first = 0) {
    std::vector<std::uint64_t> k(n);
    std::iota(k.begin(), k.end(), first);
    return k;
}

/// Feeds frames through one decoder (one connection), collecting messages.
struct connection_end {
    frame_decoder dec;
    explicit connection_end(wire_limits l = {}) : dec(l, std::make_shared<buffer_pool>()) {}
    std::error_code feed(const message& m, std::vector<message>& out) {
        return petrel::test::feed_all(dec, petrel::test::frame_of(m), out);
    }
};

std::vector<std::uint64_t> keys_in(const message& m) {
    const auto k = m.keys().as<std::uint64_t>();
    return {k.begin(), k.end()};
}

} // namespace

TEST_CASE("key_cache: the sender refers to a list it sent, compared byte for byte",
          "[wire][efficiency]") {
    key_cache_sender s(1 << 20);
    const auto a = shared_keys(iota_keys(100));
    const auto first = s.lookup(a, scalar_type::u64);
    CHECK_FALSE(first.known);
    CHECK(first.id == 1);
    const auto again = s.lookup(shared_keys(iota_keys(100)), scalar_type::u64); // another copy
    CHECK(again.known);
    CHECK(again.id == first.id);
    CHECK(again.digest == first.digest);
    CHECK_FALSE(s.lookup(shared_keys(iota_keys(100, 1)), scalar_type::u64).known);
    CHECK_FALSE(s.lookup(a, scalar_type::u32).known); // same bytes, other key type
    CHECK(s.size() == 3);
}

TEST_CASE("key_cache: the sender forgets the least recently used lists beyond its bytes",
          "[wire][efficiency]") {
    key_cache_sender s(2 * 800);
    const auto a = shared_keys(iota_keys(100, 0));
    const auto b = shared_keys(iota_keys(100, 1000));
    const auto c = shared_keys(iota_keys(100, 2000));
    REQUIRE_FALSE(s.lookup(a, scalar_type::u64).known);
    REQUIRE_FALSE(s.lookup(b, scalar_type::u64).known);
    REQUIRE(s.lookup(a, scalar_type::u64).known);       // a is now the most recent
    REQUIRE_FALSE(s.lookup(c, scalar_type::u64).known); // evicts b
    CHECK(s.bytes() <= 1600);
    CHECK(s.lookup(a, scalar_type::u64).known);
    CHECK_FALSE(s.lookup(b, scalar_type::u64).known);
    const auto huge = shared_keys(iota_keys(1000));
    const auto d = s.lookup(huge, scalar_type::u64);
    CHECK_FALSE(d.known);
    CHECK_FALSE(s.lookup(huge, scalar_type::u64).known); // never kept: larger than the cache
}

TEST_CASE("key_cache: the receiver resolves only an exact match", "[wire][efficiency]") {
    buffer_pool pool;
    key_cache_receiver r(1 << 20);
    const auto keys = shared_keys(iota_keys(50));
    const auto digest = key_list_digest(keys.span());
    r.store(7, digest, scalar_type::u64, keys.span(), pool);
    REQUIRE(r.find(7, digest, scalar_type::u64, keys.size()));
    CHECK(std::memcmp(r.find(7, digest, scalar_type::u64, keys.size())->data(), keys.data(),
                      keys.size()) == 0);
    CHECK_FALSE(r.find(8, digest, scalar_type::u64, keys.size()));
    CHECK_FALSE(r.find(7, digest + 1, scalar_type::u64, keys.size()));
    CHECK_FALSE(r.find(7, digest, scalar_type::u32, keys.size()));
    CHECK_FALSE(r.find(7, digest, scalar_type::u64, keys.size() - 8));
    SECTION("a list stored again under its number replaces the old one") {
        const auto other = shared_keys(iota_keys(50, 100));
        r.store(7, key_list_digest(other.span()), scalar_type::u64, other.span(), pool);
        CHECK_FALSE(r.find(7, digest, scalar_type::u64, keys.size()));
        CHECK(r.size() == 1);
        CHECK(r.bytes() == other.size() + key_cache_receiver::entry_overhead);
    }
    SECTION("many tiny lists count their bookkeeping against the limit") {
        key_cache_receiver tiny(10 * (8 + key_cache_receiver::entry_overhead));
        for (std::uint64_t id = 1; id <= 1000; ++id) {
            const auto one = shared_keys({id});
            tiny.store(id, key_list_digest(one.span()), scalar_type::u64, one.span(), pool);
        }
        CHECK(tiny.size() == 10);
        CHECK(tiny.bytes() <= 10 * (8 + key_cache_receiver::entry_overhead));
    }
    SECTION("least recently used lists go first") {
        key_cache_receiver small(1000);
        const auto a = shared_keys(iota_keys(70, 0));
        const auto b = shared_keys(iota_keys(70, 100));
        small.store(1, key_list_digest(a.span()), scalar_type::u64, a.span(), pool);
        small.store(2, key_list_digest(b.span()), scalar_type::u64, b.span(), pool);
        CHECK(small.size() == 1);
        CHECK(small.find(2, key_list_digest(b.span()), scalar_type::u64, b.size()));
        CHECK(small.bytes() <= 1000);
    }
}

TEST_CASE("key_cache: receivers that share a budget keep their lists within it together",
          "[wire][efficiency][security]") {
    buffer_pool pool;
    // Each list: 70 keys, 560 bytes + 128 of bookkeeping = 688. The budget holds two.
    const std::uint64_t cost = 70 * 8 + key_cache_receiver::entry_overhead;
    auto budget = std::make_shared<petrel::detail::byte_budget>(2 * cost + 100);
    const auto a = shared_keys(iota_keys(70, 0));
    const auto b = shared_keys(iota_keys(70, 100));
    const auto c = shared_keys(iota_keys(70, 200));
    auto store = [&](key_cache_receiver& r, std::uint64_t id, const shared_bytes& k) {
        r.store(id, key_list_digest(k.span()), scalar_type::u64, k.span(), pool);
    };
    auto holds = [](key_cache_receiver& r, std::uint64_t id, const shared_bytes& k) {
        return r.find(id, key_list_digest(k.span()), scalar_type::u64, k.size()).has_value();
    };
    {
        key_cache_receiver one(1 << 20);
        key_cache_receiver two(1 << 20);
        one.share_budget(budget);
        two.share_budget(budget);
        store(one, 1, a);
        store(one, 2, b);
        CHECK(budget->used() == 2 * cost);
        // The other receiver's list does not fit, and it holds nothing to give up: not kept.
        store(two, 1, c);
        CHECK_FALSE(holds(two, 1, c));
        CHECK(two.bytes() == 0);
        // The first receiver makes room with its own oldest list.
        store(one, 3, c);
        CHECK_FALSE(holds(one, 1, a));
        CHECK(holds(one, 2, b));
        CHECK(holds(one, 3, c));
        CHECK(budget->used() == 2 * cost);
        SECTION("a list stored again under its number gives the old one's bytes back first") {
            store(one, 2, a);
            CHECK(holds(one, 2, a));
            CHECK(budget->used() == 2 * cost);
        }
    }
    // Receivers that go give their bytes back.
    CHECK(budget->used() == 0);
}

TEST_CASE("key_cache: over a connection, a repeated list travels as a reference",
          "[wire][efficiency]") {
    key_cache_sender sender(1 << 20);
    connection_end receiver;
    const auto keys = iota_keys(64, 10);
    std::vector<message> got;
    const auto first = sender.lookup(shared_keys(keys), scalar_type::u64);
    REQUIRE_FALSE(receiver.feed(cached_push(keys, first), got));
    const auto second = sender.lookup(shared_keys(keys), scalar_type::u64);
    REQUIRE(second.known);
    const auto ref = cached_push(keys, second);
    CHECK(ref.keys().empty());
    REQUIRE_FALSE(receiver.feed(ref, got));
    REQUIRE(got.size() == 2);
    for (const auto& m : got) {
        CHECK(m.header.encoding == 0);
        CHECK(keys_in(m) == keys);
    }
    CHECK(receiver.dec.key_cache().size() == 1);
}

TEST_CASE("key_cache: a reference the receiver does not hold is delivered unresolved",
          "[wire][efficiency]") {
    connection_end receiver;
    const auto keys = iota_keys(64);
    std::vector<message> got;
    REQUIRE_FALSE(receiver.feed(
        cached_push(keys, {5, key_list_digest(shared_keys(keys).span()), true}), got));
    REQUIRE(got.size() == 1);
    CHECK((got[0].header.encoding & encoding_keys_cached) != 0);
    CHECK(got[0].keys().empty());
}

TEST_CASE("key_cache: bad references and stores are refused", "[wire][efficiency]") {
    const auto keys = iota_keys(64);
    const auto digest = key_list_digest(shared_keys(keys).span());
    std::vector<message> got;
    SECTION("stored keys that do not match their digest") {
        connection_end receiver;
        CHECK(receiver.feed(cached_push(keys, {1, digest + 1, false}), got) ==
              errc::malformed_payload);
    }
    SECTION("unsorted stored keys are checked like any keys") {
        connection_end receiver;
        auto bad = keys;
        std::swap(bad[3], bad[4]);
        auto m = cached_push(keys, {1, digest, false});
        m.set_segment(keys_segment, shared_keys(bad));
        m.header.key_list_digest = key_list_digest(m.keys().span());
        CHECK(receiver.feed(m, got) == errc::keys_not_sorted);
    }
    SECTION("both reference and store, number 0, or a reference with keys") {
        auto both = cached_push(keys, {1, digest, false});
        both.header.encoding |= encoding_keys_cached;
        CHECK(check_header(both.header, framed_payload_bytes(both.header)) ==
              errc::malformed_header);
        auto zero = cached_push(keys, {0, digest, false});
        CHECK(check_header(zero.header, framed_payload_bytes(zero.header)) ==
              errc::malformed_header);
        auto with_keys = cached_push(keys, {1, digest, true});
        with_keys.set_segment(keys_segment, shared_keys(keys));
        CHECK(check_header(with_keys.header, framed_payload_bytes(with_keys.header)) ==
              errc::segment_size_mismatch);
        auto reply = cached_push(keys, {1, digest, true});
        reply.header.kind = message_kind::push_reply;
        CHECK(check_header(reply.header, framed_payload_bytes(reply.header)) ==
              errc::malformed_header);
    }
}
