#include <petrel/server/detail/table_locks.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>

TEST_CASE("table_locks: one lock per table id modulo their count; all of them held at once "
          "keeps every table's work out",
          "[server]") {
    using petrel::detail::table_locks;
    table_locks locks;
    CHECK(&locks.of(3) == &locks.of(3 + table_locks::count));
    CHECK(&locks.of(3) != &locks.of(4));
    {
        // Work on one table does not hold another back.
        std::unique_lock one(locks.of(1));
        std::unique_lock other(locks.of(2), std::try_to_lock);
        CHECK(other.owns_lock());
        std::shared_lock same(locks.of(1), std::try_to_lock);
        CHECK_FALSE(same.owns_lock());
    }
    std::atomic<bool> held{true};
    std::atomic<bool> entered_while_held{false};
    std::thread t;
    {
        table_locks::all every(locks);
        t = std::thread([&] {
            std::shared_lock l(locks.of(17));
            entered_while_held = held.load();
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        for (std::uint32_t id = 0; id < table_locks::count; ++id) {
            std::shared_lock l(locks.of(id), std::try_to_lock);
            CHECK_FALSE(l.owns_lock());
        }
        held = false;
    }
    t.join();
    CHECK_FALSE(entered_while_held);
    std::unique_lock after(locks.of(17), std::try_to_lock);
    CHECK(after.owns_lock()); // every lock released
}
