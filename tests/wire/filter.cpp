#include <petrel/wire/filter.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

using petrel::wire::filter_batch;
using petrel::wire::push_filter;
using petrel::wire::significance_filter;
using batch = filter_batch<std::uint64_t, float>;

namespace {

batch make(std::vector<std::uint64_t> keys, std::vector<float> values, std::size_t width = 1) {
    batch b;
    b.keys = std::move(keys);
    b.values = std::move(values);
    b.width = width;
    return b;
}

} // namespace

TEST_CASE("filter: keep_if keeps rows in order", "[wire][efficiency]") {
    auto b = make({1, 2, 3, 4}, {1, 1, 2, 2, 3, 3, 4, 4}, 2);
    b.keep_if([](std::size_t i) { return i % 2 == 1; });
    CHECK(b.keys == std::vector<std::uint64_t>{2, 4});
    CHECK(b.values == std::vector<float>{2, 2, 4, 4});
    CHECK(b.bytes() == 2 * 8 + 4 * 4);
}

TEST_CASE("filter: significant changes are sent, small ones wait as a residual",
          "[wire][efficiency]") {
    significance_filter<std::uint64_t, float> f(1.0f);
    auto b = make({1, 2, 3, 4}, {0.5f, 2.0f, 0.0f, -1.0f});
    f.filter(b);
    CHECK(b.keys == std::vector<std::uint64_t>{2, 4});
    CHECK(b.values == std::vector<float>{2.0f, -1.0f});
    CHECK(f.held_keys() == 1); // key 1; the zero row leaves nothing behind
    auto next = make({1, 3}, {0.5f, 0.25f});
    f.filter(next); // key 1 reaches 1.0 with its residual
    CHECK(next.keys == std::vector<std::uint64_t>{1});
    CHECK(next.values == std::vector<float>{1.0f});
    CHECK(f.held_keys() == 1); // key 3
    batch rest;
    f.drain(rest);
    CHECK(rest.keys == std::vector<std::uint64_t>{3});
    CHECK(rest.values == std::vector<float>{0.25f});
    CHECK(f.held_keys() == 0);
}

TEST_CASE("filter: nothing is lost: sent plus drained equals pushed", "[wire][efficiency]") {
    // Integer-valued updates, so that every sum is exact.
    significance_filter<std::uint64_t, float> f(5.0f);
    std::map<std::uint64_t, float> pushed;
    std::map<std::uint64_t, float> sent;
    std::uint64_t x = 1;
    for (int round = 0; round < 200; ++round) {
        batch b;
        b.width = 2;
        for (std::uint64_t k = 0; k < 50; ++k) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            if ((x >> 60) < 6) {
                continue; // this key is not in this push
            }
            const float v = static_cast<float>(static_cast<int>((x >> 33) % 5) - 2);
            b.keys.push_back(k);
            b.values.push_back(v);
            b.values.push_back(-v);
            pushed[k] += v;
        }
        f.filter(b);
        for (std::size_t i = 0; i < b.size(); ++i) {
            sent[b.keys[i]] += b.row(i)[0];
            CHECK(b.row(i)[1] == -b.row(i)[0]);
        }
    }
    batch rest;
    rest.width = 2;
    f.drain(rest);
    CHECK(std::is_sorted(rest.keys.begin(), rest.keys.end()));
    for (std::size_t i = 0; i < rest.size(); ++i) {
        sent[rest.keys[i]] += rest.row(i)[0];
    }
    for (const auto& [k, v] : pushed) {
        CHECK(sent[k] == v);
    }
}

TEST_CASE("filter: user filters compose and their residuals are merged", "[wire][efficiency]") {
    struct drop_odd_keys final : push_filter<std::uint64_t, float> {
        std::map<std::uint64_t, float> held;
        void filter(batch& b) override {
            for (std::size_t i = 0; i < b.size(); ++i) {
                if (b.keys[i] % 2 == 1) {
                    held[b.keys[i]] += b.row(i)[0];
                }
            }
            b.keep_if([&](std::size_t i) { return b.keys[i] % 2 == 0; });
        }
        void drain(batch& out) override {
            for (const auto& [k, v] : held) {
                out.keys.push_back(k);
                out.values.push_back(v);
            }
            held.clear();
        }
    };
    auto odd = std::make_shared<drop_odd_keys>();
    auto sig = std::make_shared<significance_filter<std::uint64_t, float>>(1.0f);
    std::vector<std::shared_ptr<push_filter<std::uint64_t, float>>> chain{odd, sig};
    auto b = make({1, 2, 3, 4}, {5.0f, 0.5f, 7.0f, 3.0f});
    petrel::wire::apply_filters(chain, b);
    CHECK(b.keys == std::vector<std::uint64_t>{4});
    auto c = make({2, 3}, {0.25f, 1.0f});
    petrel::wire::apply_filters(chain, c);
    CHECK(c.keys.empty());
    const auto rest = petrel::wire::drain_filters(chain, 1);
    CHECK(rest.keys == std::vector<std::uint64_t>{1, 2, 3});
    CHECK(rest.values == std::vector<float>{5.0f, 0.75f, 8.0f});
}
