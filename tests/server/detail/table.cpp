#include <petrel/server/detail/table.hpp>

#include "support/rows.hpp"

#include <catch2/catch.hpp>

#include <petrel/core/buffer_pool.hpp>
#include <petrel/server/detail/make_table.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <thread>
#include <vector>

namespace {

namespace wire = petrel::wire;

/// A push of `keys` with one float each (width 1) to table 0.
wire::message table_push(const std::vector<std::uint64_t>& keys, const std::vector<float>& values) {
    return petrel::test::rows_request(wire::message_kind::push, keys, values);
}

/// Rows of `keys` (width 1, no state) as a checkpoint or a replica's copy holds them.
petrel::shard_table rows_of(const std::vector<std::uint64_t>& keys,
                            const std::vector<float>& values) {
    petrel::shard_table t;
    t.key_type = wire::scalar_type::u64;
    t.value_type = wire::scalar_type::f32;
    t.width = 1;
    t.updater = "sum";
    t.rows = keys.size();
    const auto kb = std::as_bytes(std::span(keys));
    const auto vb = std::as_bytes(std::span(values));
    t.keys.assign(kb.begin(), kb.end());
    t.values.assign(vb.begin(), vb.end());
    return t;
}

std::map<std::uint64_t, float> rows_in(const petrel::detail::table_base& t) {
    const auto d = t.dump(0);
    std::map<std::uint64_t, float> out;
    const auto* k = reinterpret_cast<const std::uint64_t*>(d.keys.data());
    const auto* v = reinterpret_cast<const float*>(d.values.data());
    for (std::uint64_t r = 0; r < d.rows; ++r) {
        out[k[r]] = v[r];
    }
    return out;
}

} // namespace

TEST_CASE("table: a push reserved, then held while rows are loaded, updates its own keys",
          "[server]") {
    // A server accepts an ordered push (reserving its rows) and holds it for its clock;
    // meanwhile a replica copy of other keys is loaded; then the clock applies the push.
    const auto held = table_push({77, 78}, {1.0F, 2.0F});
    auto table = petrel::detail::make_table(held.header);
    REQUIRE_FALSE(table->check(held.header));
    table->reserve(held);
    table->load(rows_of({40, 41}, {5.0F, 6.0F}), [](std::uint64_t) { return true; });
    const std::array<const wire::message*, 1> clock{&held};
    SECTION("applied alone") {
        table->apply(held);
    }
    SECTION("applied as its clock") {
        table->apply_clock(clock, false);
    }
    const auto rows = rows_in(*table);
    CHECK(rows.at(77) == 1.0F);
    CHECK(rows.at(78) == 2.0F);
    CHECK(rows.at(40) == 5.0F);
    CHECK(rows.at(41) == 6.0F);
}

TEST_CASE("table: a push reserved right before it is applied finds its rows once", "[server]") {
    auto table = petrel::detail::make_table(table_push({1}, {0.0F}).header);
    const auto first = table_push({5, 9, 12}, {1.0F, 2.0F, 3.0F});
    table->reserve(first);
    table->apply(first);
    const auto second = table_push({9, 12, 30}, {10.0F, 20.0F, 30.0F});
    table->reserve(second);
    table->apply(second);
    const auto rows = rows_in(*table);
    CHECK(rows == std::map<std::uint64_t, float>{{5, 1.0F}, {9, 12.0F}, {12, 23.0F}, {30, 30.0F}});
}

namespace {

/// A push of `keys` (sorted; or runs `[begin, end)` pairs when `runs`) with `width` values
/// per key, every value `v`.
wire::message push_rows(const std::vector<std::uint64_t>& keys, std::uint32_t width, float v,
                        bool runs = false) {
    std::size_t count = keys.size();
    if (runs) {
        count = 0;
        for (std::size_t r = 0; r + 1 < keys.size(); r += 2) {
            count += keys[r + 1] - keys[r];
        }
    }
    const std::vector<float> values(count * width, v);
    auto m = table_push(keys, {0.0F});
    m.header.width = width;
    m.header.key_count = count;
    if (runs) {
        m.header.flags |= wire::flag_key_runs;
        m.header.range_end = keys.back();
    }
    m.set_segment(wire::values_segment,
                  petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
    return m;
}

} // namespace

TEST_CASE("table: pushes applied from several threads at once add up, and reads see whole rows",
          "[server]") {
    constexpr std::uint32_t width = 4;
    constexpr int threads = 4;
    constexpr int rounds = 150;
    const bool dense = GENERATE(false, true);
    CAPTURE(dense);
    std::unique_ptr<petrel::detail::table_base> table;
    if (dense) {
        table = std::make_unique<petrel::detail::table<std::uint64_t, float>>(
            width, petrel::detail::make_updater<float>(petrel::sum{}), petrel::initializer::zeros(),
            petrel::key_range<std::uint64_t>{0, 100000});
    } else {
        table = std::make_unique<petrel::detail::table<std::uint64_t, float>>(width);
    }
    // Thread t pushes, each round: the shared keys 0..1999 (in runs for a dense table),
    // and 50 keys of its own that no row holds yet (every round creates rows while the
    // other threads apply).
    std::vector<std::vector<wire::message>> pushes(threads);
    for (int t = 0; t < threads; ++t) {
        for (int r = 0; r < rounds; ++r) {
            if (dense) {
                pushes[t].push_back(push_rows({0, 2000}, width, 1.0F, true));
            } else {
                std::vector<std::uint64_t> shared(2000);
                std::iota(shared.begin(), shared.end(), std::uint64_t{0});
                pushes[t].push_back(push_rows(shared, width, 1.0F));
            }
            std::vector<std::uint64_t> own;
            for (int i = 0; i < 50; ++i) {
                own.push_back(10000 + static_cast<std::uint64_t>((t * rounds + r) * 50 + i));
            }
            pushes[t].push_back(push_rows(own, width, static_cast<float>(t + 1)));
        }
    }
    std::atomic<bool> done{false};
    std::atomic<int> torn{0};
    std::atomic<int> failed{0};
    std::thread reader([&] {
        const auto pull = dense ? push_rows({0, 2000}, width, 0.0F, true) : pushes[0][0];
        std::vector<float> out(2000 * width);
        while (!done) {
            table->read_shared(pull, reinterpret_cast<std::byte*>(out.data()));
            for (std::size_t k = 0; k < 2000; ++k) {
                for (std::size_t j = 1; j < width; ++j) {
                    if (out[k * width + j] != out[k * width]) {
                        ++torn;
                    }
                }
            }
        }
    });
    std::vector<std::thread> appliers;
    for (int t = 0; t < threads; ++t) {
        appliers.emplace_back([&, t] {
            for (const auto& m : pushes[t]) {
                if (table->apply_shared(m)) {
                    ++failed;
                }
            }
        });
    }
    for (auto& a : appliers) {
        a.join();
    }
    done = true;
    reader.join();
    CHECK(failed == 0);
    CHECK(torn == 0);
    const auto d = table->dump(0);
    const auto* k = reinterpret_cast<const std::uint64_t*>(d.keys.data());
    const auto* v = reinterpret_cast<const float*>(d.values.data());
    std::size_t seen = 0;
    for (std::uint64_t i = 0; i < d.rows; ++i) {
        float want = 0;
        if (k[i] < 2000) {
            want = threads * rounds;
        } else if (k[i] >= 10000) {
            want = static_cast<float>((k[i] - 10000) / (rounds * 50) + 1);
        } else {
            continue; // a dense page's other keys
        }
        ++seen;
        for (std::uint32_t j = 0; j < width; ++j) {
            REQUIRE(v[i * width + j] == want);
        }
    }
    CHECK(seen == 2000 + threads * rounds * 50);
}

TEST_CASE("table: an update rule with state, applied from several threads to keys of their own, "
          "gives the rows of one thread's order",
          "[server]") {
    using table_type = petrel::detail::table<std::uint64_t, double>;
    auto make = [] {
        return std::make_unique<table_type>(
            2, petrel::detail::make_updater<double>(petrel::adagrad{.eta = 0.5}),
            petrel::initializer::zeros(), std::nullopt);
    };
    auto parallel = make();
    auto serial = make();
    constexpr int threads = 3;
    std::vector<std::vector<wire::message>> pushes(threads);
    for (int t = 0; t < threads; ++t) {
        for (int r = 0; r < 40; ++r) {
            std::vector<std::uint64_t> keys;
            for (std::uint64_t i = 0; i < 300; ++i) {
                keys.push_back(static_cast<std::uint64_t>(t) * 1000 + i);
            }
            std::vector<double> g(keys.size() * 2, 0.25 * (r + 1) + t);
            auto m = table_push(keys, {0.0F});
            m.header.value_type = wire::scalar_type::f64;
            m.header.width = 2;
            m.set_segment(wire::values_segment,
                          petrel::shared_bytes::copy_of(std::as_bytes(std::span(g))));
            pushes[t].push_back(std::move(m));
        }
    }
    for (const auto& list : pushes) {
        for (const auto& m : list) {
            serial->add(m);
        }
    }
    std::atomic<int> failed{0};
    std::vector<std::thread> appliers;
    for (int t = 0; t < threads; ++t) {
        appliers.emplace_back([&, t] {
            for (const auto& m : pushes[t]) {
                if (parallel->apply_shared(m)) {
                    ++failed; // (Catch's assertions are for the test's thread)
                }
            }
        });
    }
    for (auto& a : appliers) {
        a.join();
    }
    CHECK(failed == 0);
    const auto a = parallel->dump(0);
    const auto b = serial->dump(0);
    CHECK(a.keys == b.keys);
    CHECK(a.values == b.values);
    CHECK(a.state == b.state);
}

TEST_CASE("table: a push cut into parts, applied on several threads, is the push applied whole; "
          "so is a pull",
          "[server]") {
    constexpr std::uint32_t width = 3;
    const bool dense = GENERATE(false, true);
    const bool runs = GENERATE(false, true);
    CAPTURE(dense, runs);
    auto make = [&]() -> std::unique_ptr<petrel::detail::table_base> {
        if (dense) {
            return std::make_unique<petrel::detail::table<std::uint64_t, float>>(
                width, petrel::detail::make_updater<float>(petrel::sum{}),
                petrel::initializer::zeros(), petrel::key_range<std::uint64_t>{0, 100000});
        }
        return std::make_unique<petrel::detail::table<std::uint64_t, float>>(width);
    };
    // Keys 0..4999 then 20000..22999 (two runs, or listed), each row's values its key and
    // position, so that a part applied at the wrong offset shows.
    std::vector<std::uint64_t> keys;
    if (runs) {
        keys = {0, 5000, 20000, 23000};
    } else {
        for (std::uint64_t k = 0; k < 5000; ++k) {
            keys.push_back(k);
        }
        for (std::uint64_t k = 20000; k < 23000; ++k) {
            keys.push_back(k);
        }
    }
    auto push = push_rows(keys, width, 0.0F, runs);
    std::vector<float> values(push.header.key_count * width);
    for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<float>(i);
    }
    push.set_segment(wire::values_segment,
                     petrel::shared_bytes::copy_of(std::as_bytes(std::span(values))));
    auto whole = make();
    auto split = make();
    CHECK_FALSE(whole->holds_all(push));
    std::size_t created = 99;
    REQUIRE_FALSE(whole->apply_shared(push, created));
    CHECK(created == whole->size()); // every row, counted once
    CHECK(created >= 8000);
    CHECK(whole->holds_all(push));
    REQUIRE_FALSE(whole->apply_shared(push, created)); // rows found, not created
    CHECK(created == 0);
    const auto parts = petrel::detail::split_request(push, 7);
    REQUIRE(parts.size() == 7);
    std::vector<std::thread::id> ran_on;
    std::mutex ran_mutex;
    const petrel::detail::part_runner on_threads = [&](std::size_t n,
                                                       const std::function<void(std::size_t)>& f) {
        std::vector<std::thread> ts;
        for (std::size_t i = 0; i < n; ++i) {
            ts.emplace_back([&, i] {
                f(i);
                std::lock_guard lock(ran_mutex);
                ran_on.push_back(std::this_thread::get_id());
            });
        }
        for (auto& t : ts) {
            t.join();
        }
    };
    REQUIRE_FALSE(split->apply_split(parts, on_threads, created)); // creates the rows
    CHECK(created == split->size());
    REQUIRE_FALSE(split->apply_split(parts, on_threads, created));
    CHECK(created == 0);
    CHECK(ran_on.size() >= 2 * 7);
    const auto a = split->dump(0);
    const auto b = whole->dump(0);
    CHECK(a.rows == b.rows);
    CHECK(a.keys == b.keys);
    CHECK(a.values == b.values);

    std::vector<float> read_whole(values.size(), -1.0F);
    std::vector<float> read_split(values.size(), -1.0F);
    whole->read_shared(push, reinterpret_cast<std::byte*>(read_whole.data()));
    split->read_split(parts, reinterpret_cast<std::byte*>(read_split.data()), on_threads);
    CHECK(read_split == read_whole);
    CHECK(read_whole[values.size() - 1] == 2 * values.back());
}
