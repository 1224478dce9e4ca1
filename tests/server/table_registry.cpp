#include <petrel/server/table_registry.hpp>

#include "support/cluster.hpp"

#include <petrel/kv_store.hpp>
#include <petrel/server/server_node.hpp>

#include <asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using petrel::errc;
using petrel::key_range;
using petrel::test::io_threads;
using petrel::test::over_inproc;
using petrel::test::transport_factory;
namespace wire = petrel::wire;

namespace {

/// Two servers holding the declared tables, and stores of `workers` workers on them.
struct two_servers {
    explicit two_servers(petrel::table_registry tables, std::uint32_t workers = 1)
        : registry(std::make_shared<const petrel::table_registry>(std::move(tables))),
          s0(factory.make(io.executor()), {.workers = workers, .tables = registry}),
          s1(factory.make(io.executor()), {.workers = workers, .tables = registry}),
          a0(s0.listen(factory.listen_address())), a1(s1.listen(factory.listen_address())) {}

    template <typename Key, typename Value, typename C = petrel::eventual>
    std::unique_ptr<petrel::kv_store<Key, Value, C>>
    store(std::uint32_t table, std::size_t width = 1, std::uint32_t worker = 0) {
        petrel::kv_store_options<Key> o;
        o.servers = {a0, a1};
        o.table_id = table;
        o.width = width;
        o.worker = worker;
        o.request_timeout = 20s;
        return std::make_unique<petrel::kv_store<Key, Value, C>>(factory.make(io.executor()), o);
    }

    io_threads io{2};
    transport_factory<over_inproc> factory;
    std::shared_ptr<const petrel::table_registry> registry;
    petrel::server_node s0;
    petrel::server_node s1;
    std::string a0;
    std::string a1;
};

/// A push message of `keys` for a detail::table test.
template <typename Key, typename Value>
wire::message push_msg(const std::vector<Key>& keys, const std::vector<Value>& values,
                       std::uint32_t width = 1) {
    wire::message m;
    m.header.key_type = wire::scalar_type_of<Key>;
    m.header.value_type = wire::scalar_type_of<Value>;
    m.header.width = width;
    m.header.key_count = keys.size();
    m.set_segment(wire::keys_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(keys))));
    m.set_segment(wire::values_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

} // namespace

TEST_CASE("table_registry: declarations are checked", "[server]") {
    petrel::table_registry t;
    t.add<std::uint64_t, float>(1, {.width = 4}, petrel::adam{});
    REQUIRE(t.find(1) != nullptr);
    CHECK(t.find(1)->updater == "adam");
    CHECK(t.find(1)->key_type == wire::scalar_type::u64);
    CHECK(t.find(2) == nullptr);
    auto declare = [&](std::uint32_t id, petrel::table_spec spec) {
        t.add<std::uint32_t, float>(id, spec);
    };
    CHECK_THROWS_AS(declare(1, {}), std::invalid_argument);
    CHECK_THROWS_AS(declare(2, {.width = 0}), std::invalid_argument);
    CHECK_THROWS_AS(declare(3, {.dense = key_range<std::uint64_t>{5, 5}}), std::invalid_argument);
    CHECK_THROWS_AS(declare(4, {.dense = key_range<std::uint64_t>{0, std::uint64_t{1} << 40}}),
                    std::invalid_argument);
    t.add<std::uint32_t, double>(
        5, {}, [](std::span<double> w, std::span<const double> g) { w[0] -= g[0]; });
    CHECK(t.find(5)->updater == "function");
    CHECK(t.size() == 2);
}

TEST_CASE("table: a sparse table inserts on first push with the initial values", "[server]") {
    petrel::detail::table<std::uint64_t, float> t(
        2, petrel::detail::make_updater<float>(petrel::sum{}), petrel::initializer::constant(1.0),
        std::nullopt);
    t.add(push_msg<std::uint64_t, float>({3, 9}, {1, 2, 3, 4}, 2));
    CHECK(t.size() == 2);
    std::vector<float> out(6);
    t.read(push_msg<std::uint64_t, float>({3, 4, 9}, {0, 0, 0, 0, 0, 0}, 2),
           reinterpret_cast<std::byte*>(out.data()));
    CHECK(out == std::vector<float>{2, 3, 1, 1, 4, 5});
    CHECK(t.size() == 2); // a read inserts nothing
}

TEST_CASE("table: a sparse table grows through many keys and finds them all", "[server]") {
    petrel::detail::table<std::uint32_t, float> t(1);
    std::vector<std::uint32_t> keys;
    for (std::uint32_t k = 0; k < 200000; ++k) {
        keys.push_back(k * 7919u + 13u);
    }
    std::vector<float> values(keys.size());
    std::iota(values.begin(), values.end(), 0.0f);
    t.add(push_msg<std::uint32_t, float>(keys, values));
    t.add(push_msg<std::uint32_t, float>(keys, values));
    CHECK(t.size() == keys.size());
    std::vector<float> out(keys.size());
    t.read(push_msg<std::uint32_t, float>(keys, values), reinterpret_cast<std::byte*>(out.data()));
    for (std::size_t i = 0; i < keys.size(); ++i) {
        REQUIRE(out[i] == 2.0f * values[i]);
    }
    // Open addressing: key and row number per slot, rows in blocks.
    CHECK(t.memory_bytes() < keys.size() * 32);
}

TEST_CASE("table: a dense table refuses keys outside its range and allocates by page", "[server]") {
    petrel::detail::table<std::uint32_t, double> t(
        1, petrel::detail::make_updater<double>(petrel::sgd{.eta = 0.5}),
        petrel::initializer::constant(2.0), key_range<std::uint64_t>{100, 1000});
    CHECK(t.check_keys(push_msg<std::uint32_t, double>({99}, {1})) == errc::key_out_of_range);
    CHECK(t.check_keys(push_msg<std::uint32_t, double>({1000}, {1})) == errc::key_out_of_range);
    CHECK_FALSE(t.check_keys(push_msg<std::uint32_t, double>({100, 999}, {1, 1})));
    t.add(push_msg<std::uint32_t, double>({100, 500}, {1, 4}));
    CHECK(t.size() == 128); // two pages of 64 keys
    std::vector<double> out(3);
    t.read(push_msg<std::uint32_t, double>({100, 101, 500}, {0, 0, 0}),
           reinterpret_cast<std::byte*>(out.data()));
    CHECK(out == std::vector<double>{1.5, 2.0, 0.0});
    std::vector<std::uint32_t> seen;
    t.for_each_in({0, 200}, [&](std::uint32_t k, std::span<const double>) { seen.push_back(k); });
    CHECK(seen.size() == 64);
    CHECK(seen.front() == 100);
    CHECK(seen.back() == 163);
}

TEST_CASE("table: the pushes of a clock are summed or averaged, then updated once", "[server]") {
    auto make = [](bool) {
        return petrel::detail::table<std::uint64_t, float>(
            1, petrel::detail::make_updater<float>(petrel::adagrad{.eta = 1.0}),
            petrel::initializer::zeros(), std::nullopt);
    };
    const auto a = push_msg<std::uint64_t, float>({1, 2}, {3, 1});
    const auto b = push_msg<std::uint64_t, float>({2, 5}, {1, 4});
    const wire::message* both[] = {&a, &b};
    for (const bool mean : {false, true}) {
        auto t = make(mean);
        t.reserve(a);
        t.reserve(b);
        t.apply_clock(both, mean);
        std::vector<float> out(3);
        t.read(push_msg<std::uint64_t, float>({1, 2, 5}, {0, 0, 0}),
               reinterpret_cast<std::byte*>(out.data()));
        // One adagrad step per key from zero state: w = -g / |g| = -sign(g) for every key,
        // which a second step per push would have changed (key 2 got two pushes).
        CHECK(out[0] == Approx(-1.0f));
        CHECK(out[1] == Approx(-1.0f));
        CHECK(out[2] == Approx(-1.0f));
    }
    auto t = petrel::detail::table<std::uint64_t, float>(
        1, petrel::detail::make_updater<float>(petrel::sum{}), petrel::initializer::zeros(),
        std::nullopt);
    t.reserve(a);
    t.reserve(b);
    t.apply_clock(both, true);
    std::vector<float> out(3);
    t.read(push_msg<std::uint64_t, float>({1, 2, 5}, {0, 0, 0}),
           reinterpret_cast<std::byte*>(out.data()));
    CHECK(out == std::vector<float>{3.0f, 1.0f, 4.0f}); // means of 1 and 2 pushes
}

TEST_CASE("table_registry: declared tables serve init values, ranges and update rules",
          "[server]") {
    petrel::table_registry tables;
    tables.add<std::uint32_t, float>(
        0,
        {.dense = key_range<std::uint64_t>{0, 10000}, .init = petrel::initializer::normal(0, 1, 9)},
        petrel::sgd{.eta = 0.5});
    tables.add<std::uint64_t, double>(1, {.width = 3, .init = petrel::initializer::constant(0.5)});
    two_servers c(std::move(tables));

    auto dense = c.store<std::uint32_t, float>(0);
    const key_range<std::uint32_t> all{0, 10000};
    auto before = dense->pull(all, asio::use_future).get();
    REQUIRE(before.size() == 10000);
    const petrel::initializer init = petrel::initializer::normal(0, 1, 9);
    for (std::uint32_t k = 0; k < 10000; k += 997) {
        CHECK(before.values()(k) == static_cast<float>(init.value(k, 0)));
    }
    CHECK(before.keys()(9999) == 9999u);
    xt::xtensor<float, 1> g = xt::ones<float>({std::size_t{10000}});
    dense->push(all, g, asio::use_future).get();
    auto after = dense->pull(key_range<std::uint32_t>{10, 20}, asio::use_future).get();
    for (std::uint32_t k = 10; k < 20; ++k) {
        CHECK(after.values()(k - 10) == Approx(static_cast<float>(init.value(k, 0)) - 0.5f));
    }
    // Both servers hold part of the range.
    CHECK(c.s0.key_count(0) > 0);
    CHECK(c.s1.key_count(0) > 0);
    // Outside the dense range: refused, nothing changed.
    const std::vector<std::uint32_t> outside{5, 20000};
    CHECK_THROWS(dense->push(outside, xt::xtensor<float, 1>{1.0f, 1.0f}, asio::use_future).get());

    auto sparse = c.store<std::uint64_t, double>(1, 3);
    const std::vector<std::uint64_t> keys{7, 1u << 30};
    auto fresh = sparse->pull(keys, asio::use_future).get();
    const xt::xtensor<double, 2> halves{{0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}};
    CHECK((fresh.values() == halves));
    CHECK(c.s0.key_count(1) + c.s1.key_count(1) == 0);
    sparse->push(keys, xt::xtensor<double, 2>{{1, 2, 3}, {4, 5, 6}}, asio::use_future).get();
    CHECK(c.s0.key_count(1) + c.s1.key_count(1) == 2);
    auto summed = sparse->pull(keys, asio::use_future).get();
    const xt::xtensor<double, 2> sums{{1.5, 2.5, 3.5}, {4.5, 5.5, 6.5}};
    CHECK((summed.values() == sums));
    // A declared table's types are enforced.
    auto wrong = c.store<std::uint64_t, float>(1, 3);
    CHECK_THROWS(wrong->pull(keys, asio::use_future).get());
}

TEST_CASE("table_registry: under sequential a clock's pushes are averaged before one step",
          "[server]") {
    petrel::table_registry tables;
    tables.add<std::uint64_t, float>(
        0, {.dense = key_range<std::uint64_t>{0, 256}, .aggregate = petrel::aggregation::mean},
        petrel::adam{.eta = 0.1});
    two_servers c(std::move(tables), 2);
    auto w0 = c.store<std::uint64_t, float, petrel::sequential>(0, 1, 0);
    auto w1 = c.store<std::uint64_t, float, petrel::sequential>(0, 1, 1);
    const key_range<std::uint64_t> all{0, 256};
    xt::xtensor<float, 1> g0 = xt::ones<float>({std::size_t{256}}) * 3.0f;
    xt::xtensor<float, 1> g1 = xt::ones<float>({std::size_t{256}}) * -1.0f;
    g1(5) = -5.0f; // mean 1 everywhere, -1 at key 5
    auto p0 = w0->push(all, g0, asio::use_future);
    auto p1 = w1->push(all, g1, asio::use_future);
    p0.get();
    p1.get();
    w0->clock();
    w1->clock();
    auto w = w0->pull(all, asio::use_future).get(); // at clock 1: waits for both ticks
    // One Adam step from zero with the mean gradient moves every weight by eta against
    // its sign; two separate steps would have moved it about twice as far.
    CHECK(w.values()(0) == Approx(-0.1f).epsilon(1e-3));
    CHECK(w.values()(5) == Approx(0.1f).epsilon(1e-3));
    CHECK(w.values()(255) == Approx(-0.1f).epsilon(1e-3));
    CHECK(w.min_clock() >= 1);
}

TEST_CASE("table: dense key runs across pages read and update whole blocks", "[server]") {
    // Runs [30, 200) and [300, 310): four pages of 64 keys, parts of them, with state.
    auto runs_msg = [](std::vector<std::uint32_t> runs, std::vector<float> values) {
        wire::message m;
        m.header.key_type = wire::scalar_type::u32;
        m.header.flags = wire::flag_key_runs;
        m.header.width = 2;
        m.header.key_count = values.size() / 2;
        m.set_segment(wire::keys_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(runs))));
        m.set_segment(wire::values_segment,
                      petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
        return m;
    };
    for (const bool with_state : {false, true}) {
        auto rule = with_state ? petrel::detail::make_updater<float>(petrel::adagrad{.eta = 1.0})
                               : petrel::detail::make_updater<float>(petrel::sum{});
        petrel::detail::table<std::uint32_t, float> t(2, rule, petrel::initializer::constant(7.0),
                                                      key_range<std::uint64_t>{10, 400});
        const std::size_t n = 170 + 10;
        std::vector<float> g(2 * n);
        for (std::size_t i = 0; i < g.size(); ++i) {
            g[i] = static_cast<float>(i % 5) + 1.0f;
        }
        const auto push = runs_msg({30, 200, 300, 310}, g);
        REQUIRE_FALSE(t.check_keys(push));
        t.add(push);
        // Read [0..) as runs over stored and unstored keys: [20, 40) and [290, 320).
        const auto pull = runs_msg({20, 40, 290, 320}, std::vector<float>(2 * 50, 0.0f));
        std::vector<float> out(2 * 50);
        t.read(pull, reinterpret_cast<std::byte*>(out.data()));
        auto expected = [&](std::uint32_t key, std::size_t j) -> float {
            std::size_t i = 0;
            if (key >= 30 && key < 200) {
                i = key - 30;
            } else if (key >= 300 && key < 310) {
                i = 170 + (key - 300);
            } else {
                return 7.0f; // never pushed: the initializer's value
            }
            const float gi = g[2 * i + j];
            return with_state ? 7.0f - gi / std::sqrt(gi * gi) : 7.0f + gi;
        };
        std::size_t at = 0;
        for (std::uint32_t k = 20; k < 40; ++k, ++at) {
            INFO("key " << k);
            CHECK(out[2 * at] == Approx(expected(k, 0)));
            CHECK(out[2 * at + 1] == Approx(expected(k, 1)));
        }
        for (std::uint32_t k = 290; k < 320; ++k, ++at) {
            INFO("key " << k);
            CHECK(out[2 * at] == Approx(expected(k, 0)));
            CHECK(out[2 * at + 1] == Approx(expected(k, 1)));
        }
        // Keyed reads agree with run reads.
        std::vector<float> one(2);
        t.read(push_msg<std::uint32_t, float>({199}, {0, 0}, 2),
               reinterpret_cast<std::byte*>(one.data()));
        CHECK(one[0] == Approx(expected(199, 0)));
    }
}

namespace {

/// The fields of table 0's declaration in `t`.
std::vector<std::pair<std::string, std::string>> fields_of(const petrel::table_registry& t) {
    const auto d = t.describe();
    REQUIRE(d.tables.size() == 1);
    CHECK(d.tables[0].id == 0);
    CHECK(d.functions.empty());
    return d.tables[0].fields;
}

/// The fields in which two one-table registries differ, by name.
std::vector<std::string> differing(const petrel::table_registry& a,
                                   const petrel::table_registry& b) {
    const auto fa = fields_of(a);
    const auto fb = fields_of(b);
    REQUIRE(fa.size() == fb.size());
    std::vector<std::string> names;
    for (std::size_t i = 0; i < fa.size(); ++i) {
        REQUIRE(fa[i].first == fb[i].first);
        if (fa[i].second != fb[i].second) {
            names.push_back(fa[i].first);
        }
    }
    return names;
}

} // namespace

TEST_CASE("table_registry: describe writes every field of a declared table", "[server]") {
    petrel::table_registry t;
    t.add<std::uint32_t, double>(0,
                                 {.width = 16,
                                  .dense = key_range<std::uint64_t>{0, 1 << 20},
                                  .init = petrel::initializer::normal(0, 0.01, 1),
                                  .aggregate = petrel::aggregation::mean,
                                  .replicas = 0},
                                 petrel::adagrad{.eta = 0.05});
    using field = std::pair<std::string, std::string>;
    CHECK(fields_of(t) ==
          std::vector<field>{
              {"key type", "std::uint32_t"},
              {"value type", "double"},
              {"width", "16"},
              {"dense range", "[0, 1048576)"},
              {"initializer", "normal{mean=0,stddev=0.01,seed=1}"},
              {"aggregation", "mean"},
              {"replicas", "0"},
              {"update rule", "adagrad{eta=0.05,epsilon=1e-08,initial_accumulator=0}"}});
    CHECK(t.find(0)->rule == "adagrad{eta=0.05,epsilon=1e-08,initial_accumulator=0}");

    petrel::table_registry sparse;
    sparse.add<std::uint64_t, float>(0, {});
    const auto f = fields_of(sparse);
    CHECK(f[3] == field{"dense range", "none (sparse)"});
    CHECK(f[4] == field{"initializer", "zeros"});
    CHECK(f[5] == field{"aggregation", "sum"});
    CHECK(f[6] == field{"replicas", "the job's"});
    CHECK(f[7] == field{"update rule", "sum"});
}

TEST_CASE("table_registry: declarations differ in exactly the field that differs", "[server]") {
    using k64 = std::uint64_t;
    const petrel::table_spec base{.width = 8, .init = petrel::initializer::constant(0.5)};
    auto one = [](auto declare) {
        petrel::table_registry t;
        declare(t);
        return t;
    };
    const auto reference =
        one([&](auto& t) { t.template add<k64, float>(0, base, petrel::sgd{.eta = 0.01}); });
    CHECK(differing(reference, reference).empty());
    CHECK(reference.describe() == one([&](auto& t) {
                                      t.template add<k64, float>(0, base, petrel::sgd{.eta = 0.01});
                                  }).describe());

    auto spec = [&](auto change) {
        auto s = base;
        change(s);
        return s;
    };
    using names = std::vector<std::string>;
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<std::uint32_t, float>(0, base, petrel::sgd{.eta = 0.01});
                    })) == names{"key type"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, double>(0, base, petrel::sgd{.eta = 0.01});
                    })) == names{"value type"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(0, spec([](auto& s) { s.width = 32; }),
                                                   petrel::sgd{.eta = 0.01});
                    })) == names{"width"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(0, spec([](auto& s) {
                                                       s.dense = key_range<k64>{0, 100};
                                                   }),
                                                   petrel::sgd{.eta = 0.01});
                    })) == names{"dense range"});
    CHECK(differing(one([&](auto& t) {
                        t.template add<k64, float>(0, spec([](auto& s) {
                                                       s.dense = key_range<k64>{0, 100};
                                                   }));
                    }),
                    one([&](auto& t) {
                        t.template add<k64, float>(0, spec([](auto& s) {
                                                       s.dense = key_range<k64>{0, 101};
                                                   }));
                    })) == names{"dense range"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(
                            0, spec([](auto& s) { s.init = petrel::initializer::constant(0.25); }),
                            petrel::sgd{.eta = 0.01});
                    })) == names{"initializer"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(
                            0, spec([](auto& s) { s.aggregate = petrel::aggregation::mean; }),
                            petrel::sgd{.eta = 0.01});
                    })) == names{"aggregation"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(0, spec([](auto& s) { s.replicas = 1; }),
                                                   petrel::sgd{.eta = 0.01});
                    })) == names{"replicas"});
    // The rule's kind and each of its parameters.
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(0, base, petrel::adagrad{.eta = 0.01});
                    })) == names{"update rule"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(0, base, petrel::sgd{.eta = 0.02});
                    })) == names{"update rule"});
    CHECK(differing(reference, one([&](auto& t) {
                        t.template add<k64, float>(0, base, petrel::sgd{.eta = 0.01, .l2 = 1e-4});
                    })) == names{"update rule"});

    // What the manager tells a node whose rule differs.
    const auto adagrad =
        one([&](auto& t) { t.template add<k64, float>(0, base, petrel::adagrad{}); });
    CHECK(petrel::first_difference(reference.describe(), adagrad.describe()) ==
          "table 0: update rule is sgd{eta=0.01,l1=0,l2=0} on this node but "
          "adagrad{eta=0.1,epsilon=1e-08,initial_accumulator=0} on the job's other nodes");
}
