#include <petrel/server/detail/part_runner.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

TEST_CASE("run_parts: every part runs once, on the caller and the executor's threads", "[server]") {
    asio::io_context io;
    auto guard = asio::make_work_guard(io);
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i) {
        threads.emplace_back([&] { io.run(); });
    }
    std::vector<std::atomic<int>> runs(64);
    std::mutex mutex;
    std::set<std::thread::id> ran_on;
    for (int round = 0; round < 20; ++round) {
        petrel::detail::run_parts(io.get_executor(), runs.size(), 3, [&](std::size_t i) {
            ++runs[i];
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            std::lock_guard lock(mutex);
            ran_on.insert(std::this_thread::get_id());
        });
    }
    guard.reset();
    for (auto& t : threads) {
        t.join();
    }
    for (const auto& r : runs) {
        CHECK(r == 20);
    }
    CHECK(ran_on.size() >= 2); // the helpers took parts
}

TEST_CASE("run_parts: returns with no thread to help; a helper that starts late does nothing",
          "[server]") {
    asio::io_context io; // not run yet: the posted helpers wait
    std::vector<int> runs(8);
    const auto caller = std::this_thread::get_id();
    bool elsewhere = false;
    petrel::detail::run_parts(io.get_executor(), runs.size(), 4, [&](std::size_t i) {
        ++runs[i];
        elsewhere = elsewhere || std::this_thread::get_id() != caller;
    });
    CHECK(runs == std::vector<int>(8, 1));
    CHECK_FALSE(elsewhere);
    CHECK(io.run() == 4); // the helpers find every part taken
    CHECK(runs == std::vector<int>(8, 1));

    petrel::detail::run_parts(io.get_executor(), 3, 0, [&](std::size_t i) { ++runs[i]; });
    CHECK(runs[2] == 2);
    io.restart();
    CHECK(io.run() == 0); // no helper asked for: none posted
}
