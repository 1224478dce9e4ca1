#include <petrel/server/detail/table_locks.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

using namespace std::chrono_literals;
using petrel::detail::table_locks;

TEST_CASE("table_locks: a table held alone keeps out its own table's work, not another's",
          "[server]") {
    table_locks locks;
    std::promise<void> release;
    std::shared_future<void> go = release.get_future().share();
    std::promise<void> holding;
    std::thread holder([&] {
        table_locks::alone one(locks, 1);
        holding.set_value();
        go.wait();
    });
    holding.get_future().wait();
    // Another table, alone or beside: at once.
    auto other = std::async(std::launch::async, [&] { table_locks::alone two(locks, 2); });
    CHECK(other.wait_for(10s) == std::future_status::ready);
    auto other_beside =
        std::async(std::launch::async, [&] { table_locks::beside two(locks, 2 + 128); });
    CHECK(other_beside.wait_for(10s) == std::future_status::ready);
    // The same table, or one whose id shares its lock: after the holder.
    std::atomic<bool> let_go{false};
    auto same = std::async(std::launch::async, [&] {
        table_locks::beside again(locks, 1 + table_locks::count);
        return let_go.load();
    });
    CHECK(same.wait_for(50ms) == std::future_status::timeout);
    let_go = true;
    release.set_value();
    holder.join();
    CHECK(same.get());
}

TEST_CASE("table_locks: every table's lock waits for the work under way, then keeps every "
          "table's work out",
          "[server]") {
    table_locks locks;
    table_locks::beside under_way(locks, 5);
    std::promise<void> acquired;
    auto holding = acquired.get_future();
    std::promise<void> release;
    std::shared_future<void> go = release.get_future().share();
    std::thread t([&] {
        table_locks::all all(locks);
        acquired.set_value();
        go.wait();
    });
    CHECK(holding.wait_for(50ms) == std::future_status::timeout); // table 5's work goes first
    under_way.unlock();
    REQUIRE(holding.wait_for(10s) == std::future_status::ready);
    auto other = std::async(std::launch::async, [&] { table_locks::alone a(locks, 17); });
    CHECK(other.wait_for(50ms) == std::future_status::timeout);
    release.set_value();
    t.join();
    CHECK(other.wait_for(10s) == std::future_status::ready);
}
