#include <petrel/core/detail/log_throttle.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

using namespace std::chrono_literals;
using petrel::detail::log_throttle;

TEST_CASE("log_throttle: the first line, then one a period, each counting those left out",
          "[core][security]") {
    log_throttle t(1s);
    const log_throttle::clock::time_point t0{100s};
    CHECK(t.line("refused a", t0) == "refused a");
    CHECK(t.line("refused b", t0 + 10ms).empty());
    CHECK(t.line("refused c", t0 + 999ms).empty());
    CHECK(t.left_out() == 2);
    CHECK(t.line("refused d", t0 + 1s) == "refused d (and 2 more since the last line)");
    CHECK(t.left_out() == 0);
    // A second later with nothing left out: the line as it is.
    CHECK(t.line("refused e", t0 + 2s) == "refused e");
    CHECK(t.line("refused f", t0 + 2s + 500ms).empty());
    CHECK(t.line("refused g", t0 + 10s) == "refused g (and 1 more since the last line)");
}

TEST_CASE("log_throttle: the first event is logged at any time, even the clock's epoch", "[core]") {
    log_throttle t(1s);
    CHECK(t.line("first", log_throttle::clock::time_point{}) == "first");
    CHECK(t.line("second", log_throttle::clock::time_point{} + 1ms).empty());
}
