#include <petrel/server/detail/update_window.hpp>

#include <catch2/catch.hpp>

#include <cstdint>

using petrel::detail::update_window;

TEST_CASE("update_window: remembers ids per primary, never id 0", "[server]") {
    update_window w;
    CHECK_FALSE(w.contains(7, 1));
    w.remember(7, 1);
    CHECK(w.contains(7, 1));
    CHECK_FALSE(w.contains(7, 2)); // the same push's piece of another primary
    CHECK_FALSE(w.contains(8, 1));
    w.remember(0, 1);
    CHECK_FALSE(w.contains(0, 1));
    CHECK(w.size() == 1);
    w.remember(7, 1); // again: no second place in the window
    CHECK(w.size() == 1);
}

TEST_CASE("update_window: forgets the oldest beyond its capacity", "[server]") {
    update_window w(3);
    for (std::uint64_t id = 1; id <= 5; ++id) {
        w.remember(id, 0);
    }
    CHECK_FALSE(w.contains(1, 0));
    CHECK_FALSE(w.contains(2, 0));
    CHECK(w.contains(3, 0));
    CHECK(w.contains(4, 0));
    CHECK(w.contains(5, 0));
    CHECK(w.size() == 3);
}

TEST_CASE("update_window: an id forgotten and remembered again keeps its new place", "[server]") {
    update_window w(3);
    w.remember(1, 0);
    w.remember(2, 0);
    w.forget(1, 0); // not applied after all
    CHECK_FALSE(w.contains(1, 0));
    w.remember(1, 0); // its resend applied
    w.remember(3, 0);
    // The window drops the old place of 1, not the id remembered since.
    CHECK(w.contains(1, 0));
    w.remember(4, 0);
    CHECK_FALSE(w.contains(2, 0));
    CHECK(w.contains(1, 0));
    w.remember(5, 0);
    CHECK_FALSE(w.contains(1, 0)); // now the oldest, forgotten in turn
    CHECK(w.contains(3, 0));
    CHECK(w.contains(4, 0));
    CHECK(w.contains(5, 0));
    CHECK(w.size() == 3);
}

TEST_CASE("update_window: forgetting an id not held changes nothing", "[server]") {
    update_window w(2);
    w.remember(1, 0);
    w.forget(9, 0);
    w.forget(0, 0);
    CHECK(w.contains(1, 0));
    CHECK(w.size() == 1);
}
