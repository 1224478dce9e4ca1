#include <petrel/server/detail/clock_sums.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <tuple>
#include <vector>

using petrel::detail::clock_sums;

namespace {

struct drained {
    std::uint32_t row;
    std::vector<double> sum;
    std::uint32_t count;
};

std::vector<drained> drain_all(clock_sums<double>& s) {
    std::vector<drained> out;
    s.drain([&](std::uint32_t r, std::span<double> sum, std::uint32_t count) noexcept {
        out.push_back({r, {sum.begin(), sum.end()}, count});
    });
    return out;
}

} // namespace

TEST_CASE("clock_sums: sums per row in first-added order, with counts", "[server]") {
    clock_sums<double> s(2);
    const double a[] = {1, 2};
    const double b[] = {10, 20};
    const double c[] = {100, 200};
    s.add(7, a);
    s.add(3, b);
    s.add(7, c);
    CHECK(s.size() == 2);
    const auto out = drain_all(s);
    REQUIRE(out.size() == 2);
    CHECK(out[0].row == 7);
    CHECK(out[0].sum == std::vector<double>{101, 202});
    CHECK(out[0].count == 2);
    CHECK(out[1].row == 3);
    CHECK(out[1].sum == std::vector<double>{10, 20});
    CHECK(out[1].count == 1);
    CHECK(s.size() == 0);
}

TEST_CASE("clock_sums: a drain forgets every sum, and the next clock starts afresh", "[server]") {
    clock_sums<double> s(1);
    const double one[] = {1};
    s.add(5, one);
    s.add(5, one);
    (void)drain_all(s);
    s.add(5, one);
    s.add(2, one);
    const auto out = drain_all(s);
    REQUIRE(out.size() == 2);
    CHECK(out[0].row == 5);
    CHECK(out[0].sum == std::vector<double>{1});
    CHECK(out[0].count == 1);
    CHECK(out[1].row == 2);
}

TEST_CASE("clock_sums: clear forgets sums so that a row added after starts from zero", "[server]") {
    clock_sums<double> s(1);
    const double one[] = {1};
    const double two[] = {2};
    s.add(4, one);
    s.add(9, one);
    s.clear();
    CHECK(s.size() == 0);
    s.add(9, two);
    const auto out = drain_all(s);
    REQUIRE(out.size() == 1);
    CHECK(out[0].row == 9);
    CHECK(out[0].sum == std::vector<double>{2});
    CHECK(out[0].count == 1);
}

TEST_CASE("clock_sums: agrees with a map on random rows over several clocks", "[server]") {
    std::mt19937 rng(11);
    clock_sums<float> s(3);
    for (int clock = 0; clock < 20; ++clock) {
        std::map<std::uint32_t, std::tuple<std::vector<float>, std::uint32_t>> want;
        std::vector<std::uint32_t> order;
        const int n = 1 + static_cast<int>(rng() % 200);
        for (int i = 0; i < n; ++i) {
            const auto r = static_cast<std::uint32_t>(rng() % 64);
            const float g[] = {static_cast<float>(rng() % 8), 1.0F, static_cast<float>(i)};
            s.add(r, g);
            auto [it, fresh] = want.try_emplace(r, std::vector<float>(3, 0.0F), 0U);
            if (fresh) {
                order.push_back(r);
            }
            auto& [sum, count] = it->second;
            for (int j = 0; j < 3; ++j) {
                sum[j] += g[j];
            }
            ++count;
        }
        std::size_t t = 0;
        bool same = true;
        s.drain([&](std::uint32_t r, std::span<float> sum, std::uint32_t count) noexcept {
            const auto it = want.find(r);
            same = same && it != want.end() && t < order.size() && order[t] == r &&
                   std::get<1>(it->second) == count &&
                   std::vector<float>(sum.begin(), sum.end()) == std::get<0>(it->second);
            ++t;
        });
        CHECK(same);
        CHECK(t == want.size());
    }
    CHECK(s.memory_bytes() > 0);
}
