#include <petrel/server/detail/stripe_locks.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace {

/// Index i of n lies in stripe i * stripes / n (non-decreasing, every stripe used when
/// n >= stripes).
std::size_t stripe_of(std::size_t i, std::size_t n) {
    return i * petrel::detail::stripe_locks::stripes / n;
}

} // namespace

TEST_CASE("stripe_locks: a walk visits every index once, a stripe at a time, from any start",
          "[server]") {
    petrel::detail::stripe_locks locks;
    const std::size_t n =
        GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{1000});
    for (int walk = 0; walk < 5; ++walk) { // each walk starts at another stripe
        std::vector<int> visits(n, 0);
        std::vector<std::size_t> order;
        locks.walk(
            n, [&](std::size_t i) { return stripe_of(i, n); },
            [&](std::size_t i) {
                ++visits[i];
                order.push_back(stripe_of(i, n));
            });
        CHECK(std::count(visits.begin(), visits.end(), 1) == static_cast<std::ptrdiff_t>(n));
        // Each stripe's indices are visited together: the stripe changes at most once
        // per stripe, plus the wrap-around.
        std::size_t changes = 0;
        for (std::size_t k = 1; k < order.size(); ++k) {
            changes += order[k] != order[k - 1] ? 1 : 0;
        }
        CHECK(changes < std::min<std::size_t>(n, petrel::detail::stripe_locks::stripes) + 1);
    }
}

TEST_CASE("stripe_locks: threads walking at once never run in one stripe together", "[server]") {
    petrel::detail::stripe_locks locks;
    constexpr std::size_t n = 4096;
    constexpr std::size_t stripes = petrel::detail::stripe_locks::stripes;
    std::vector<std::atomic<int>> inside(stripes);
    std::atomic<int> overlaps{0};
    std::atomic<std::size_t> visited{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int w = 0; w < 50; ++w) {
                locks.walk(
                    n, [&](std::size_t i) { return stripe_of(i, n); },
                    [&](std::size_t i) {
                        auto& in = inside[stripe_of(i, n)];
                        if (in.fetch_add(1) != 0) {
                            ++overlaps;
                        }
                        ++visited;
                        in.fetch_sub(1);
                    });
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    CHECK(overlaps == 0);
    CHECK(visited == 4 * 50 * n);
}
