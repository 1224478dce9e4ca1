#include <petrel/server/detail/thread_share.hpp>

#include "support/threads.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <utility>

using petrel::detail::thread_share;

TEST_CASE("thread_share: a request takes the threads the others leave, its own always",
          "[server][thread_share]") {
    thread_share share;
    {
        const auto first = share.take(4);
        CHECK(first.threads() == 4);
        {
            const auto second = share.take(4);
            CHECK(second.threads() == 3);
            const auto third = share.take(4);
            CHECK(third.threads() == 2);
            const auto fourth = share.take(4);
            CHECK(fourth.threads() == 1);
            const auto fifth = share.take(4);
            CHECK(fifth.threads() == 1); // its own thread, however many are busy
            CHECK(share.busy() == 5);
        }
        CHECK(share.busy() == 1);
        CHECK(share.take(4).threads() == 3);
        CHECK(share.take(1).threads() == 1);
    }
    CHECK(share.busy() == 0);
    CHECK(share.take(4).threads() == 4); // every lease given back
}

TEST_CASE("thread_share: a moved lease is given back once", "[server][thread_share]") {
    thread_share share;
    {
        std::optional<thread_share::lease> kept;
        {
            auto l = share.take(2);
            kept.emplace(std::move(l));
        }
        CHECK(share.busy() == 1);
        CHECK(kept->threads() == 2);
    }
    CHECK(share.busy() == 0);
}

TEST_CASE("thread_share: leases taken on many threads at once add up and are all given back",
          "[server][thread_share]") {
    thread_share share;
    std::atomic<int> over{0};
    const int failures = petrel::test::on_threads(6, [&](int) {
        for (int i = 0; i < 2000; ++i) {
            const auto l = share.take(8);
            if (l.threads() < 1 || l.threads() > 8) {
                ++over;
            }
        }
        return 0;
    });
    CHECK(failures == 0);
    CHECK(over == 0);
    CHECK(share.busy() == 0);
}
