#include <petrel/server/detail/thread_census.hpp>

#include "support/threads.hpp"

#include <catch2/catch.hpp>

#include <thread>

using petrel::detail::thread_census;

TEST_CASE("thread_census: counts each thread once", "[server][thread_census]") {
    thread_census<8> census;
    CHECK(census.count() == 0);
    census.note();
    census.note();
    CHECK(census.count() == 1);
    std::thread([&] {
        census.note();
        census.note();
    }).join();
    CHECK(census.count() == 2);
    census.note();
    CHECK(census.count() == 2);
}

TEST_CASE("thread_census: threads that note at once are counted once each, up to the cap",
          "[server][thread_census]") {
    thread_census<16> census;
    const int failures = petrel::test::on_threads(6, [&](int) {
        for (int i = 0; i < 1000; ++i) {
            census.note();
        }
        return 0;
    });
    CHECK(failures == 0);
    CHECK(census.count() == 6);

    thread_census<3> small;
    CHECK(petrel::test::on_threads(6, [&](int) {
              small.note();
              return 0;
          }) == 0);
    CHECK(small.count() == 3);
}
