#include <petrel/server/updater.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

/// Random gradients for `steps` steps of `width` values, some of them zero.
std::vector<std::vector<double>> gradients(std::size_t steps, std::size_t width) {
    std::mt19937 rng(11);
    std::normal_distribution<double> n(0.0, 1.0);
    std::vector<std::vector<double>> g(steps, std::vector<double>(width));
    for (auto& row : g) {
        for (auto& x : row) {
            x = n(rng);
        }
        row[0] = 0.0; // a coordinate without gradient
    }
    return g;
}

/// Runs `u` over `g` on float rows starting at `w0`; returns the values after each step.
template <typename U>
std::vector<std::vector<float>> run_updater(const U& u, std::vector<float> w,
                                            const std::vector<std::vector<double>>& g) {
    std::vector<float> state(u.state_size(w.size()), 0.0f);
    if constexpr (requires { u.init_state(std::span<float>(state)); }) {
        u.init_state(std::span<float>(state));
    }
    std::vector<std::vector<float>> out;
    for (const auto& step : g) {
        std::vector<float> gf(step.begin(), step.end());
        u.update(std::span<float>(w), std::span<float>(state), std::span<const float>(gf));
        out.push_back(w);
    }
    return out;
}

void check_close(const std::vector<std::vector<float>>& got,
                 const std::vector<std::vector<double>>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t t = 0; t < got.size(); ++t) {
        for (std::size_t j = 0; j < got[t].size(); ++j) {
            INFO("step " << t << " column " << j);
            CHECK(got[t][j] == Approx(want[t][j]).margin(1e-5).epsilon(1e-4));
        }
    }
}

} // namespace

static_assert(petrel::updater<petrel::sum, float>);
static_assert(petrel::updater<petrel::sgd, double>);
static_assert(petrel::updater<petrel::adagrad, float>);
static_assert(petrel::updater<petrel::ftrl, float>);
static_assert(petrel::updater<petrel::adam, double>);
static_assert(!petrel::updater<int, float>);

TEST_CASE("updater: sum adds the gradient", "[server]") {
    const auto g = gradients(5, 3);
    const std::vector<float> w0{1.0f, 2.0f, 3.0f};
    std::vector<std::vector<double>> want;
    std::vector<double> w(w0.begin(), w0.end());
    for (const auto& step : g) {
        for (std::size_t j = 0; j < w.size(); ++j) {
            w[j] += step[j];
        }
        want.push_back(w);
    }
    check_close(run_updater(petrel::sum{}, w0, g), want);
}

TEST_CASE("updater: sgd takes the proximal step of L1 and L2", "[server]") {
    const auto g = gradients(20, 4);
    const petrel::sgd u{.eta = 0.3, .l1 = 0.5, .l2 = 0.2};
    const std::vector<float> w0{0.2f, -1.0f, 0.05f, 2.0f};
    std::vector<std::vector<double>> want;
    std::vector<double> w(w0.begin(), w0.end());
    for (const auto& step : g) {
        for (std::size_t j = 0; j < w.size(); ++j) {
            const double v = w[j] - u.eta * step[j];
            double shrunk = std::abs(v) - u.eta * u.l1;
            if (shrunk < 0) {
                shrunk = 0;
            }
            w[j] = (v < 0 ? -shrunk : shrunk) / (1.0 + u.eta * u.l2);
        }
        want.push_back(w);
    }
    check_close(run_updater(u, w0, g), want);
    // Coordinate 0 has no gradient: L1 drives it to exactly zero and keeps it there.
    CHECK(run_updater(u, w0, g).back()[0] == 0.0f);
}

TEST_CASE("updater: sgd without regularization is w - eta g", "[server]") {
    const auto g = gradients(3, 2);
    const petrel::sgd u{.eta = 0.1};
    std::vector<double> w{1.0, 1.0};
    std::vector<std::vector<double>> want;
    for (const auto& step : g) {
        w[0] -= 0.1 * step[0];
        w[1] -= 0.1 * step[1];
        want.push_back(w);
    }
    check_close(run_updater(u, {1.0f, 1.0f}, g), want);
}

TEST_CASE("updater: adagrad divides by the root of the summed squares", "[server]") {
    const auto g = gradients(25, 3);
    const petrel::adagrad u{.eta = 0.5, .epsilon = 1e-6, .initial_accumulator = 0.1};
    CHECK(u.state_size(3) == 3);
    std::vector<double> w{0.0, 0.5, -0.5};
    std::vector<double> n(3, 0.1);
    std::vector<std::vector<double>> want;
    for (const auto& step : g) {
        for (std::size_t j = 0; j < 3; ++j) {
            n[j] += step[j] * step[j];
            w[j] -= 0.5 * step[j] / (std::sqrt(n[j]) + 1e-6);
        }
        want.push_back(w);
    }
    check_close(run_updater(u, {0.0f, 0.5f, -0.5f}, g), want);
}

TEST_CASE("updater: ftrl follows the FTRL-proximal recurrences", "[server]") {
    const auto g = gradients(30, 3);
    const petrel::ftrl u{.alpha = 0.2, .beta = 1.0, .l1 = 0.3, .l2 = 0.1};
    CHECK(u.state_size(3) == 6);
    std::vector<double> w(3, 0.0);
    std::vector<double> z(3, 0.0);
    std::vector<double> n(3, 0.0);
    std::vector<std::vector<double>> want;
    for (const auto& step : g) {
        for (std::size_t j = 0; j < 3; ++j) {
            const double sigma = (std::sqrt(n[j] + step[j] * step[j]) - std::sqrt(n[j])) / u.alpha;
            z[j] += step[j] - sigma * w[j];
            n[j] += step[j] * step[j];
            if (std::abs(z[j]) <= u.l1) {
                w[j] = 0.0;
            } else {
                const double sgn = z[j] > 0 ? 1.0 : -1.0;
                w[j] = -(z[j] - sgn * u.l1) / ((u.beta + std::sqrt(n[j])) / u.alpha + u.l2);
            }
        }
        want.push_back(w);
    }
    check_close(run_updater(u, {0.0f, 0.0f, 0.0f}, g), want);
    CHECK(run_updater(u, {0.0f, 0.0f, 0.0f}, g).back()[0] == 0.0f); // sparse: no gradient, zero
}

TEST_CASE("updater: adam uses bias-corrected moments and a per-key step count", "[server]") {
    const auto g = gradients(40, 2);
    const petrel::adam u{.eta = 0.01, .beta1 = 0.8, .beta2 = 0.95, .epsilon = 1e-7};
    CHECK(u.state_size(2) == 5);
    std::vector<double> w{0.3, -0.3};
    std::vector<double> m(2, 0.0);
    std::vector<double> v(2, 0.0);
    std::vector<std::vector<double>> want;
    for (std::size_t t = 1; t <= g.size(); ++t) {
        for (std::size_t j = 0; j < 2; ++j) {
            const double gj = g[t - 1][j];
            m[j] = 0.8 * m[j] + 0.2 * gj;
            v[j] = 0.95 * v[j] + 0.05 * gj * gj;
            const double mh = m[j] / (1 - std::pow(0.8, double(t)));
            const double vh = v[j] / (1 - std::pow(0.95, double(t)));
            w[j] -= 0.01 * mh / (std::sqrt(vh) + 1e-7);
        }
        want.push_back(w);
    }
    check_close(run_updater(u, {0.3f, -0.3f}, g), want);
}

TEST_CASE("updater: update_fn makes a rule from a function, with or without state", "[server]") {
    auto decay = petrel::update_fn<float>([](std::span<float> w, std::span<const float> g) {
        for (std::size_t j = 0; j < w.size(); ++j) {
            w[j] = 0.5f * w[j] - g[j];
        }
    });
    static_assert(petrel::updater<decltype(decay), float>);
    CHECK(decay.state_size(4) == 0);
    const auto out = run_updater(decay, {2.0f}, {{0.0}, {1.0}});
    CHECK(out[0][0] == 1.0f);
    CHECK(out[1][0] == -0.5f);

    auto counting = petrel::update_fn<float>(
        1, [](std::span<float> w, std::span<float> s, std::span<const float> g) {
            for (std::size_t j = 0; j < w.size(); ++j) {
                s[j] += 1.0f;
                w[j] += g[j] / s[j];
            }
        });
    CHECK(counting.state_size(3) == 3);
    const auto avg = run_updater(counting, {0.0f}, {{2.0}, {2.0}, {2.0}});
    CHECK(avg.back()[0] == Approx(2.0 + 1.0 + 2.0 / 3.0));
}

TEST_CASE("updater: the type-erased rule keeps name, state and init_state", "[server]") {
    const auto box =
        petrel::detail::make_updater<float>(petrel::adagrad{.initial_accumulator = 0.25});
    CHECK(box->name() == "adagrad");
    CHECK_FALSE(box->is_sum());
    std::vector<float> state(box->state_size(2), -1.0f);
    box->init_state(state);
    CHECK(state == std::vector<float>{0.25f, 0.25f});
    const auto plain = petrel::detail::make_updater<double>(petrel::sum{});
    CHECK(plain->is_sum());
    CHECK(plain->name() == "sum");
    struct unnamed {
        std::size_t state_size(std::size_t) const { return 0; }
        void update(std::span<double>, std::span<double>, std::span<const double>) const {}
    };
    CHECK(petrel::detail::make_updater<double>(unnamed{})->name() == "user");
}

namespace {

struct unnamed_rule {
    std::size_t state_size(std::size_t width) const { return width + 1; }
    void update(std::span<double>, std::span<double>, std::span<const double>) const {}
};

struct named_rule : unnamed_rule {
    static constexpr std::string_view name = "clipped";
};

} // namespace

TEST_CASE("updater: a rule is described with its parameters, a user rule by name and state",
          "[server]") {
    using petrel::detail::make_updater;
    CHECK(make_updater<float>(petrel::sum{})->describe(4) == "sum");
    CHECK(make_updater<float>(petrel::sgd{})->describe(4) == "sgd{eta=0.01,l1=0,l2=0}");
    CHECK(make_updater<float>(petrel::sgd{.eta = 0.5, .l1 = 1e-3, .l2 = 2})->describe(4) ==
          "sgd{eta=0.5,l1=0.001,l2=2}");
    CHECK(make_updater<float>(petrel::adagrad{})->describe(4) ==
          "adagrad{eta=0.1,epsilon=1e-08,initial_accumulator=0}");
    CHECK(make_updater<double>(petrel::ftrl{.l1 = 0})->describe(4) ==
          "ftrl{alpha=0.1,beta=1,l1=0,l2=1}");
    CHECK(make_updater<double>(petrel::adam{})->describe(4) ==
          "adam{eta=0.001,beta1=0.9,beta2=0.999,epsilon=1e-08}");
    // Parameters that differ in the last bit still differ.
    CHECK(make_updater<float>(petrel::sgd{.eta = 0.1 + 0.2})->describe(1) !=
          make_updater<float>(petrel::sgd{.eta = 0.3})->describe(1));

    auto stateless = petrel::update_fn<float>([](std::span<float>, std::span<const float>) {});
    auto stateful = petrel::update_fn<float>(
        2, [](std::span<float>, std::span<float>, std::span<const float>) {});
    CHECK(make_updater<float>(stateless)->describe(4) == "function{state=0}");
    CHECK(make_updater<float>(stateful)->describe(4) == "function{state=8}");
    CHECK(make_updater<double>(unnamed_rule{})->describe(3) == "user{state=4}");
    CHECK(make_updater<double>(named_rule{})->describe(3) == "clipped{state=4}");
}
