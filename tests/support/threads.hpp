// Petrel tests: one function run on several threads at once, counting what failed.
#pragma once

#include <atomic>
#include <exception>
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

} // namespace petrel::test
