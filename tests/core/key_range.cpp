#include <petrel/core/key_range.hpp>

#include <catch2/catch.hpp>

#include <compare>
#include <cstdint>
#include <limits>

using petrel::key_range;

TEMPLATE_TEST_CASE("key_range: default and reversed ranges are empty", "[core]", std::uint32_t,
                   std::uint64_t) {
    using range = key_range<TestType>;

    STATIC_REQUIRE(range{}.empty());
    CHECK(range{}.size() == 0);
    CHECK(range{5, 5}.empty());
    CHECK(range{5, 5}.size() == 0);
    CHECK(range{7, 3}.empty());
    CHECK(range{7, 3}.size() == 0);
    CHECK_FALSE(range{3, 4}.empty());
    CHECK_FALSE(range{3, 7}.contains(TestType{7}));
}

TEMPLATE_TEST_CASE("key_range: size counts the keys", "[core]", std::uint8_t, std::uint16_t,
                   std::uint32_t, std::uint64_t) {
    using range = key_range<TestType>;
    constexpr TestType max = std::numeric_limits<TestType>::max();

    STATIC_REQUIRE(range{0, 10}.size() == 10);
    CHECK(range{3, 4}.size() == 1);
    CHECK(range{10, 250}.size() == 240);
    CHECK(range{0, max}.size() == static_cast<std::uint64_t>(max));
    CHECK(range{static_cast<TestType>(max - 1), max}.size() == 1);
}

TEMPLATE_TEST_CASE("key_range: all covers every valid key", "[core]", std::uint8_t, std::uint32_t,
                   std::uint64_t) {
    using range = key_range<TestType>;
    constexpr TestType max = std::numeric_limits<TestType>::max();

    STATIC_REQUIRE(range::all().begin == 0);
    STATIC_REQUIRE(range::all().end == petrel::key_space_end<TestType>);
    CHECK(range::all().end == max);
    CHECK(range::all().size() == static_cast<std::uint64_t>(max));
    CHECK(range::all().contains(TestType{0}));
    CHECK(range::all().contains(static_cast<TestType>(max - 1)));
    // The largest value is the exclusive end of the key space, not a key.
    CHECK_FALSE(range::all().contains(max));
    CHECK(range::all().contains(range{0, max}));
}

TEMPLATE_TEST_CASE("key_range: contains a key", "[core]", std::uint32_t, std::uint64_t) {
    using range = key_range<TestType>;
    constexpr range r{10, 20};

    STATIC_REQUIRE(r.contains(TestType{10}));
    CHECK(r.contains(TestType{15}));
    CHECK(r.contains(TestType{19}));
    CHECK_FALSE(r.contains(TestType{9}));
    CHECK_FALSE(r.contains(TestType{20}));
    CHECK_FALSE(r.contains(TestType{0}));
    CHECK_FALSE(range{}.contains(TestType{0}));
    CHECK_FALSE(range{20, 10}.contains(TestType{15}));
}

TEMPLATE_TEST_CASE("key_range: contains a range", "[core]", std::uint32_t, std::uint64_t) {
    using range = key_range<TestType>;
    constexpr range r{10, 20};

    STATIC_REQUIRE(r.contains(range{12, 18}));
    CHECK(r.contains(r));
    CHECK(r.contains(range{10, 11}));
    CHECK(r.contains(range{19, 20}));
    CHECK_FALSE(r.contains(range{9, 15}));
    CHECK_FALSE(r.contains(range{15, 21}));
    CHECK_FALSE(r.contains(range{5, 25}));
    CHECK_FALSE(r.contains(range{30, 40}));

    SECTION("an empty range is contained anywhere") {
        CHECK(r.contains(range{}));
        CHECK(r.contains(range{100, 100}));
        CHECK(r.contains(range{50, 40}));
        CHECK(range{}.contains(range{}));
    }
    SECTION("an empty range contains no non-empty range") {
        CHECK_FALSE(range{}.contains(range{0, 1}));
        CHECK_FALSE(range{15, 15}.contains(range{15, 16}));
    }
}

TEMPLATE_TEST_CASE("key_range: intersect disjoint ranges is empty", "[core]", std::uint32_t,
                   std::uint64_t) {
    using range = key_range<TestType>;

    const range a{0, 10};
    const range b{20, 30};
    CHECK(a.intersect(b).empty());
    CHECK(a.intersect(b) == range{});
    CHECK(b.intersect(a) == range{});
    CHECK_FALSE(a.overlaps(b));

    SECTION("touching ranges share no key") {
        const range c{10, 20};
        CHECK(a.intersect(c) == range{});
        CHECK(c.intersect(a) == range{});
        CHECK_FALSE(a.overlaps(c));
        CHECK_FALSE(c.overlaps(b));
    }
    SECTION("an empty range meets nothing") {
        CHECK(a.intersect(range{5, 5}) == range{});
        CHECK(range{5, 5}.intersect(a) == range{});
        CHECK_FALSE(a.overlaps(range{5, 5}));
        CHECK_FALSE(range{}.overlaps(range{}));
    }
}

TEMPLATE_TEST_CASE("key_range: intersect overlapping ranges", "[core]", std::uint32_t,
                   std::uint64_t) {
    using range = key_range<TestType>;

    const range a{0, 20};
    const range b{10, 30};
    STATIC_REQUIRE(range{0, 20}.intersect(range{10, 30}) == range{10, 20});
    CHECK(a.intersect(b) == range{10, 20});
    CHECK(b.intersect(a) == range{10, 20});
    CHECK(a.overlaps(b));
    CHECK(b.overlaps(a));
    CHECK(a.intersect(a) == a);
    CHECK(a.intersect(range{19, 40}) == range{19, 20});
}

TEMPLATE_TEST_CASE("key_range: intersect nested ranges", "[core]", std::uint32_t, std::uint64_t) {
    using range = key_range<TestType>;

    const range outer{0, 100};
    const range inner{40, 60};
    CHECK(outer.intersect(inner) == inner);
    CHECK(inner.intersect(outer) == inner);
    CHECK(outer.overlaps(inner));
    CHECK(range::all().intersect(inner) == inner);
    CHECK(outer.intersect(range{0, 10}) == range{0, 10});
    CHECK(outer.intersect(range{90, 100}) == range{90, 100});
}

TEMPLATE_TEST_CASE("key_range: split inside the range", "[core]", std::uint32_t, std::uint64_t) {
    using range = key_range<TestType>;

    const range r{0, 100};
    const auto [lo, hi] = r.split(40);
    CHECK(lo == range{0, 40});
    CHECK(hi == range{40, 100});
    CHECK(lo.size() + hi.size() == r.size());
    CHECK_FALSE(lo.overlaps(hi));

    STATIC_REQUIRE(range{10, 20}.split(15).first == range{10, 15});
    STATIC_REQUIRE(range{10, 20}.split(15).second == range{15, 20});
}

TEMPLATE_TEST_CASE("key_range: split at the bounds", "[core]", std::uint32_t, std::uint64_t) {
    using range = key_range<TestType>;

    const range r{10, 20};
    SECTION("at begin") {
        const auto [lo, hi] = r.split(10);
        CHECK(lo == range{10, 10});
        CHECK(lo.empty());
        CHECK(hi == r);
    }
    SECTION("at end") {
        const auto [lo, hi] = r.split(20);
        CHECK(lo == r);
        CHECK(hi == range{20, 20});
        CHECK(hi.empty());
    }
    SECTION("just inside") {
        CHECK(r.split(11).first == range{10, 11});
        CHECK(r.split(19).second == range{19, 20});
    }
}

TEMPLATE_TEST_CASE("key_range: split clamps outside points", "[core]", std::uint32_t,
                   std::uint64_t) {
    using range = key_range<TestType>;
    constexpr TestType max = std::numeric_limits<TestType>::max();

    const range r{10, 20};
    SECTION("below begin") {
        const auto [lo, hi] = r.split(3);
        CHECK(lo == range{10, 10});
        CHECK(hi == r);
    }
    SECTION("above end") {
        const auto [lo, hi] = r.split(max);
        CHECK(lo == r);
        CHECK(hi == range{20, 20});
    }
    SECTION("an empty range splits into empty halves") {
        const auto [lo, hi] = range{20, 10}.split(15);
        CHECK(lo.empty());
        CHECK(hi.empty());
        CHECK(lo.size() + hi.size() == 0);
    }
    SECTION("the whole key space") {
        const auto [lo, hi] = range::all().split(max);
        CHECK(lo == range::all());
        CHECK(hi.empty());
    }
}

TEMPLATE_TEST_CASE("key_range: comparison", "[core]", std::uint32_t, std::uint64_t) {
    using range = key_range<TestType>;

    STATIC_REQUIRE(range{1, 2} == range{1, 2});
    CHECK(range{1, 2} != range{1, 3});
    CHECK(range{1, 2} != range{0, 2});

    SECTION("ordered by begin, then end") {
        CHECK(range{1, 5} < range{2, 3});
        CHECK(range{1, 3} < range{1, 5});
        CHECK(range{2, 3} > range{1, 9});
        CHECK(range{1, 3} <= range{1, 3});
        CHECK(std::is_eq(range{1, 3} <=> range{1, 3}));
        CHECK(std::is_lt(range{0, 9} <=> range{1, 2}));
    }
    SECTION("empty ranges are equal only when their bounds are") {
        CHECK(range{5, 5} != range{});
        CHECK(range{5, 5}.empty());
        CHECK(range{}.empty());
        CHECK(range{5, 5} == range{5, 5});
    }
}
