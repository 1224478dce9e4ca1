// Petrel tests: one function run on several threads at once, counting what failed, and
// meeting points between test threads that give up after a while.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <latch>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace petrel::test {

/// Runs `f(i)` for each `i` in [0, n), each on a thread of its own, and waits for all of
/// them. Returns the failures: the sum of what the calls return, and one for each call
/// that throws.
template <class F>
[[nodiscard]] int on_threads(int n, F f) {
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        threads.emplace_back([&failures, &f, i] {
            try {
                failures += f(i);
            } catch (const std::exception&) {
                ++failures;
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    return failures.load();
}

/// Waits for latch `l` at most `limit`; throws `std::runtime_error` naming `what` when it
/// has not opened by then (a thread that failed before counting down fails the waiter
/// instead of hanging it).
inline void wait_for(std::latch& l, std::chrono::milliseconds limit, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!l.try_wait()) {
        if (std::chrono::steady_clock::now() >= deadline) {
            throw std::runtime_error("gave up waiting for " + what);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

/// Counts `l` down once, then waits for it as `wait_for` does.
inline void arrive_and_wait_for(std::latch& l, std::chrono::milliseconds limit,
                                const std::string& what) {
    l.count_down();
    wait_for(l, limit, what);
}

} // namespace petrel::test
