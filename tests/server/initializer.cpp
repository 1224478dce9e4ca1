#include <petrel/server/initializer.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>

using petrel::initializer;

TEST_CASE("initializer: zeros and constants", "[server]") {
    CHECK(initializer::zeros().value(5, 3) == 0.0);
    CHECK(initializer().value(1, 0) == 0.0);
    CHECK(initializer::constant(0.25).value(99, 7) == 0.25);
    CHECK(initializer::constant(0.25).name() == "constant");
}

TEST_CASE("initializer: random values depend only on seed, key and column", "[server]") {
    const auto a = initializer::normal(0.0, 1.0, 42);
    const auto b = initializer::normal(0.0, 1.0, 42);
    const auto c = initializer::normal(0.0, 1.0, 43);
    CHECK(a.value(17, 2) == b.value(17, 2));
    CHECK(a.value(17, 2) != c.value(17, 2));
    CHECK(a.value(17, 2) != a.value(18, 2));
    CHECK(a.value(17, 2) != a.value(17, 3));
}

TEST_CASE("initializer: normal values have the asked mean and deviation", "[server]") {
    const auto n = initializer::normal(1.5, 0.5, 7);
    double sum = 0;
    double squares = 0;
    constexpr int count = 200000;
    for (std::uint64_t k = 0; k < count; ++k) {
        const double v = n.value(k, 0);
        REQUIRE(std::isfinite(v));
        sum += v;
        squares += v * v;
    }
    const double mean = sum / count;
    const double sd = std::sqrt(squares / count - mean * mean);
    CHECK(mean == Approx(1.5).margin(0.01));
    CHECK(sd == Approx(0.5).margin(0.01));
}

TEST_CASE("initializer: uniform values stay between low and high and fill the interval",
          "[server]") {
    const auto u = initializer::uniform(-0.1, 0.3, 3);
    double lo = 1;
    double hi = -1;
    double sum = 0;
    constexpr int count = 100000;
    for (std::uint64_t k = 0; k < count; ++k) {
        const double v = u.value(k, k % 5);
        REQUIRE(v >= -0.1);
        REQUIRE(v < 0.3);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += v;
    }
    CHECK(lo < -0.099);
    CHECK(hi > 0.299);
    CHECK(sum / count == Approx(0.1).margin(0.005));
}

TEST_CASE("initializer: describe names the kind and every parameter", "[server]") {
    CHECK(initializer::zeros().describe() == "zeros");
    CHECK(initializer::constant(0.25).describe() == "constant{value=0.25}");
    CHECK(initializer::uniform(-1, 1, 7).describe() == "uniform{low=-1,high=1,seed=7}");
    CHECK(initializer::normal(0, 0.01, 1).describe() == "normal{mean=0,stddev=0.01,seed=1}");
    CHECK(initializer::normal(0, 0.01, 1).describe() != initializer::normal(0, 0.01, 2).describe());
    CHECK(initializer::normal(0, 0.01, 1).describe() != initializer::normal(0, 0.02, 1).describe());
    CHECK(initializer::uniform(0, 1, 1).describe() != initializer::normal(0, 1, 1).describe());
}
