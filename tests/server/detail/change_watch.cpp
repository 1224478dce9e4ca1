#include <petrel/server/detail/change_watch.hpp>

#include <asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

TEST_CASE("change_watch: a change posts one call of each callback; no change posts none",
          "[server]") {
    asio::io_context io;
    petrel::detail::change_watch<std::uint64_t> watch;
    std::vector<int> calls;
    const auto first = watch.add([&] { calls.push_back(1); });
    watch.add([&] { calls.push_back(2); });
    CHECK_FALSE(watch.note(0, io.get_executor())); // the value it starts from
    CHECK(watch.note(5, io.get_executor()));
    CHECK(calls.empty()); // posted, not run inside the caller's locks
    CHECK(io.run() == 2);
    CHECK(calls == std::vector<int>{1, 2});
    io.restart();
    CHECK_FALSE(watch.note(5, io.get_executor()));
    CHECK(io.run() == 0);
    watch.remove(first);
    CHECK(watch.note(6, io.get_executor()));
    io.restart();
    CHECK(io.run() == 1);
    CHECK(calls == std::vector<int>{1, 2, 2});
}
