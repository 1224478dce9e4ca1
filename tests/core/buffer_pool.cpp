#include <petrel/core/buffer_pool.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

using petrel::buffer_pool;
using petrel::pooled_buffer;
using petrel::shared_bytes;

namespace {

std::vector<std::byte> iota_bytes(std::size_t n) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = static_cast<std::byte>(i);
    }
    return v;
}

std::vector<std::byte> contents(const shared_bytes& b) {
    return {b.data(), b.data() + b.size()};
}

} // namespace

TEST_CASE("shared_bytes: a default one is empty", "[core][buffer]") {
    const shared_bytes b;
    CHECK(b.empty());
    CHECK(b.size() == 0);
    CHECK(b.data() == nullptr);
    CHECK(b.span().empty());
    CHECK(b.owner() == nullptr);
    CHECK(b.subspan(3, 5).empty());
}

TEST_CASE("shared_bytes: copy_of copies the bytes into a buffer of its own", "[core][buffer]") {
    auto src = iota_bytes(100);
    const auto b = shared_bytes::copy_of(src);
    REQUIRE(b.size() == 100);
    CHECK_FALSE(b.empty());
    CHECK(b.data() != src.data());
    CHECK(contents(b) == src);
    CHECK(b.owner() != nullptr);
    const auto before = src;
    std::fill(src.begin(), src.end(), std::byte{0xff});
    CHECK(contents(b) == before); // the copy does not see later changes to the source

    const auto e = shared_bytes::copy_of({});
    CHECK(e.empty());
    CHECK(e.owner() != nullptr);
}

TEST_CASE("shared_bytes: subspan is clamped to the buffer", "[core][buffer]") {
    const auto b = shared_bytes::copy_of(iota_bytes(10));

    const auto mid = b.subspan(2, 3);
    REQUIRE(mid.size() == 3);
    CHECK(mid.data() == b.data() + 2);
    CHECK(std::to_integer<int>(mid.data()[0]) == 2);

    const auto tail = b.subspan(7, 100);
    CHECK(tail.size() == 3);
    CHECK(tail.data() == b.data() + 7);

    const auto past = b.subspan(50, 4);
    CHECK(past.empty());
    CHECK(past.data() == b.data() + 10);

    const auto huge = b.subspan(4, static_cast<std::size_t>(-1));
    CHECK(huge.size() == 6);

    const auto nested = tail.subspan(1, 10);
    CHECK(nested.size() == 2);
    CHECK(nested.data() == b.data() + 8);

    CHECK(mid.owner() == b.owner()); // sub-views share ownership of the whole buffer
}

TEST_CASE("shared_bytes: as<T> views the bytes as an array of T", "[core][buffer]") {
    const std::array<std::uint32_t, 4> words{7, 0xdeadbeef, 0, 42};
    const auto b = shared_bytes::copy_of(std::as_bytes(std::span(words)));
    const auto w = b.as<std::uint32_t>();
    REQUIRE(w.size() == 4);
    CHECK(w[0] == 7);
    CHECK(w[1] == 0xdeadbeef);
    CHECK(w[3] == 42);
    CHECK(static_cast<const void*>(w.data()) == static_cast<const void*>(b.data()));

    const auto d = b.as<std::uint64_t>();
    CHECK(d.size() == 2);
    // A trailing partial element is not part of the view.
    CHECK(b.subspan(0, 15).as<std::uint32_t>().size() == 3);
}

TEST_CASE("shared_bytes: any copy or sub-view keeps the bytes alive", "[core][buffer]") {
    std::weak_ptr<const void> watch;
    shared_bytes sub;
    {
        const auto whole = shared_bytes::copy_of(iota_bytes(64));
        watch = whole.owner();
        sub = whole.subspan(60, 4);
        const shared_bytes copy = whole; // NOLINT(performance-unnecessary-copy-initialization)
        CHECK(copy.data() == whole.data());
    }
    REQUIRE_FALSE(watch.expired());
    REQUIRE(sub.size() == 4);
    CHECK(std::to_integer<int>(sub.data()[0]) == 60);
    CHECK(std::to_integer<int>(sub.data()[3]) == 63);
    sub = shared_bytes{};
    CHECK(watch.expired());
}

TEST_CASE("shared_bytes: adopts an owner and a view", "[core][buffer]") {
    auto owner = std::make_shared<std::vector<std::byte>>(iota_bytes(16));
    const shared_bytes b(owner, std::span<const std::byte>(*owner).subspan(4, 8));
    CHECK(b.size() == 8);
    CHECK(std::to_integer<int>(b.data()[0]) == 4);
    std::weak_ptr<std::vector<std::byte>> watch = owner;
    owner.reset();
    CHECK_FALSE(watch.expired());
}

TEST_CASE("pooled_buffer: share gives read-only views that share ownership", "[core][buffer]") {
    buffer_pool pool;
    shared_bytes all;
    shared_bytes part;
    {
        auto buf = pool.acquire(32);
        REQUIRE(buf.size() == 32);
        CHECK(buf.span().size() == 32);
        CHECK(buf.span().data() == buf.data());
        for (std::size_t i = 0; i < 32; ++i) {
            buf.data()[i] = static_cast<std::byte>(i);
        }
        CHECK(buf.as<std::uint8_t>() == reinterpret_cast<std::uint8_t*>(buf.data()));
        all = buf.share();
        part = buf.share(30, 10); // clamped to the buffer's size, not its capacity
        CHECK(all.data() == buf.data());
        CHECK(all.size() == 32);
        CHECK(part.data() == buf.data() + 30);
        CHECK(part.size() == 2);
    }
    // The handle is gone, the views are not: the buffer stays out of the pool.
    CHECK(pool.pooled_bytes() == 0);
    CHECK(std::to_integer<int>(all.data()[31]) == 31);
    CHECK(std::to_integer<int>(part.data()[1]) == 31);
    all = {};
    CHECK(pool.pooled_bytes() == 0);
    part = {};
    CHECK(pool.pooled_bytes() == buffer_pool::min_class_bytes);
}

TEST_CASE("pooled_buffer: a default one is empty", "[core][buffer]") {
    const pooled_buffer b;
    CHECK(b.data() == nullptr);
    CHECK(b.size() == 0);
    CHECK(b.share().empty());
}

TEST_CASE("buffer_pool: a released buffer is reused for the same size class", "[core][buffer]") {
    buffer_pool pool;
    std::byte* first = nullptr;
    {
        auto a = pool.acquire(1000);
        first = a.data();
        CHECK(reinterpret_cast<std::uintptr_t>(first) % alignof(std::max_align_t) == 0);
        CHECK(pool.pooled_bytes() == 0);
    }
    CHECK(pool.pooled_bytes() == 4096);

    auto b = pool.acquire(4096); // same class (4 KiB), other size
    CHECK(b.data() == first);
    CHECK(b.size() == 4096);
    CHECK(pool.pooled_bytes() == 0);

    auto c = pool.acquire(10); // the class is empty now: a new buffer
    CHECK(c.data() != first);
}

TEST_CASE("buffer_pool: size classes are powers of two from 4 KiB", "[core][buffer]") {
    buffer_pool pool;
    std::byte* small = nullptr;
    std::byte* large = nullptr;
    {
        auto a = pool.acquire(0);
        auto b = pool.acquire(4097); // 8 KiB class
        auto c = pool.acquire(8192); // 8 KiB class
        auto d = pool.acquire(8193); // 16 KiB class
        CHECK(a.size() == 0);
        small = a.data();
        large = d.data();
        CHECK(pool.pooled_bytes() == 0);
        b = {};
        CHECK(pool.pooled_bytes() == 8192);
        c = {};
        CHECK(pool.pooled_bytes() == 2 * 8192);
    }
    CHECK(pool.pooled_bytes() == 4096 + 2 * 8192 + 16384);

    // A buffer of another class is not handed out for a request.
    auto x = pool.acquire(16000);
    CHECK(x.data() == large);
    CHECK(pool.pooled_bytes() == 4096 + 2 * 8192);
    auto y = pool.acquire(1);
    CHECK(y.data() == small);
    CHECK(pool.pooled_bytes() == 2 * 8192);
}

TEST_CASE("buffer_pool: idle bytes never exceed max_pooled_bytes", "[core][buffer]") {
    buffer_pool pool(buffer_pool::options{.max_pooled_bytes = 3 * 4096});
    {
        std::vector<pooled_buffer> held;
        for (int i = 0; i < 5; ++i) {
            held.push_back(pool.acquire(100));
        }
        while (!held.empty()) {
            held.pop_back();
            CHECK(pool.pooled_bytes() <= 3 * 4096);
        }
    }
    CHECK(pool.pooled_bytes() == 3 * 4096); // two of the five were freed

    SECTION("a buffer larger than the room left is freed") {
        { auto big = pool.acquire(20000); }
        CHECK(pool.pooled_bytes() == 3 * 4096);
    }
    SECTION("the pooled buffers are handed out again, then new ones") {
        std::vector<pooled_buffer> again;
        for (int i = 0; i < 4; ++i) {
            again.push_back(pool.acquire(4096));
        }
        CHECK(pool.pooled_bytes() == 0);
    }
    SECTION("a pool with no room frees everything") {
        buffer_pool none(buffer_pool::options{.max_pooled_bytes = 0});
        { auto b = none.acquire(1); }
        CHECK(none.pooled_bytes() == 0);
    }
}

TEST_CASE("buffer_pool: buffers may outlive their pool", "[core][buffer]") {
    auto pool = std::make_unique<buffer_pool>();
    auto buf = pool->acquire(5000);
    { auto pooled = pool->acquire(100); } // idle in the pool when it dies
    REQUIRE(pool->pooled_bytes() == 4096);
    auto view = buf.share(0, 4);
    std::memset(buf.data(), 0x5a, buf.size());
    pool.reset();
    // Still usable; released into nothing (freed) at the end.
    CHECK(std::to_integer<int>(view.data()[3]) == 0x5a);
    std::memset(buf.data(), 0x11, buf.size());
    buf = {};
    CHECK(std::to_integer<int>(view.data()[0]) == 0x11);
    view = {};
}

TEST_CASE("buffer_pool: requests above max_class_bytes throw length_error", "[core][buffer]") {
    buffer_pool pool;
    CHECK_THROWS_AS(pool.acquire(buffer_pool::max_class_bytes + 1), std::length_error);
    CHECK_THROWS_AS(pool.acquire(static_cast<std::size_t>(-1)), std::length_error);
    CHECK(pool.pooled_bytes() == 0);
}

TEST_CASE("buffer_pool: concurrent acquire and release from several threads", "[core][buffer]") {
    constexpr std::size_t cap = 64 * 4096;
    buffer_pool pool(buffer_pool::options{.max_pooled_bytes = cap});
    constexpr int threads = 4;
    constexpr int rounds = 2000;
    std::mutex handoff_mutex;
    std::vector<shared_bytes> handoff; // views released by another thread than their maker
    std::vector<int> failures(threads, 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            for (int i = 0; i < rounds; ++i) {
                const std::size_t size = 1 + static_cast<std::size_t>((i * 7919 + t) % 20000);
                auto buf = pool.acquire(size);
                const auto fill = static_cast<std::byte>(t * 31 + i);
                std::memset(buf.data(), std::to_integer<int>(fill), size);
                if (buf.data()[0] != fill || buf.data()[size - 1] != fill) {
                    ++failures[static_cast<std::size_t>(t)];
                }
                if (pool.pooled_bytes() > cap) {
                    ++failures[static_cast<std::size_t>(t)];
                }
                if (i % 3 == 0) {
                    std::lock_guard lock(handoff_mutex);
                    handoff.push_back(buf.share());
                    if (handoff.size() > 8) {
                        handoff.erase(handoff.begin());
                    }
                }
            }
        });
    }
    for (auto& w : workers) {
        w.join();
    }
    for (int t = 0; t < threads; ++t) {
        CHECK(failures[static_cast<std::size_t>(t)] == 0);
    }
    handoff.clear();
    CHECK(pool.pooled_bytes() > 0);
    CHECK(pool.pooled_bytes() <= cap);
}
