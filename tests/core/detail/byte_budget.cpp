#include <petrel/core/detail/byte_budget.hpp>

#include <catch2/catch.hpp>

#include <memory>

using petrel::detail::budget_share;
using petrel::detail::byte_budget;

TEST_CASE("byte_budget: shares are taken whole; one that does not fit waits and is woken "
          "when bytes come back",
          "[core][security]") {
    auto budget = std::make_shared<byte_budget>(100);
    int woken = 0;
    const auto wake = [&] { ++woken; };
    CHECK(budget->take_or_wait(60, wake));
    CHECK(budget->used() == 60);
    // 50 does not fit beside 60: nothing is taken, the wake-up is kept.
    CHECK_FALSE(budget->take_or_wait(50, wake));
    CHECK(budget->used() == 60);
    CHECK(woken == 0);
    CHECK(budget->take_or_wait(40, wake)); // what fits is taken at once
    CHECK(budget->used() == 100);
    budget->give_back(40);
    CHECK(woken == 1); // woken once, then forgotten
    budget->give_back(60);
    CHECK(woken == 1);
    CHECK(budget->used() == 0);
    CHECK(budget->take_or_wait(100, wake));
    CHECK_FALSE(budget->take_or_wait(1, wake));
    budget->give_back(100);
    CHECK(woken == 2);
}

TEST_CASE("byte_budget: a share gives its bytes back when it goes, once", "[core]") {
    auto budget = std::make_shared<byte_budget>(100);
    REQUIRE(budget->take_or_wait(30, [] {}));
    {
        budget_share a(budget, 30);
        CHECK(a.bytes() == 30);
        budget_share b = std::move(a);
        CHECK(a.bytes() == 0); // NOLINT(bugprone-use-after-move): moved-from is empty
        CHECK(budget->used() == 30);
        b.reset();
        CHECK(budget->used() == 0);
        b.reset();
        CHECK(budget->used() == 0);
        REQUIRE(budget->take_or_wait(20, [] {}));
        b = budget_share(budget, 20);
    }
    CHECK(budget->used() == 0);
}

TEST_CASE("reply_budget: counts queues and their holders; a holder beyond its share only while "
          "the total is over the limit",
          "[core][security]") {
    petrel::detail::reply_budget b(1000);
    CHECK_FALSE(b.over_share(5000)); // nothing counted: not over
    b.change(0, 600);                // connection A queues 600
    b.change(0, 300);                // B 300
    CHECK(b.used() == 900);
    CHECK(b.holders() == 2);
    CHECK_FALSE(b.over_share(600)); // within the limit: nobody is held back
    b.change(300, 700);             // B grows to 700: 1300 in all, shares of 500
    CHECK(b.used() == 1300);
    CHECK(b.over_share(600));
    CHECK(b.over_share(700));
    CHECK_FALSE(b.over_share(400));
    CHECK_FALSE(b.over_share(0)); // a connection without replies never is
    b.change(0, 10);              // C: three holders, shares of 333
    CHECK(b.over_share(400));
    CHECK_FALSE(b.over_share(10));
    b.change(700, 0); // B drained
    b.change(10, 0);  // C too
    CHECK(b.holders() == 1);
    CHECK(b.used() == 600);
    CHECK_FALSE(b.over_share(600));
    b.change(600, 0);
    CHECK(b.used() == 0);
    CHECK(b.holders() == 0);
}
