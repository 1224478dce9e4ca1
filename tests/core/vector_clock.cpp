#include <petrel/core/vector_clock.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using clock64 = petrel::vector_clock<std::uint64_t>;
using range64 = petrel::key_range<std::uint64_t>;
using clock_type = clock64::clock_type;

constexpr clock_type no_clock = std::numeric_limits<clock_type>::max();

// Checks the invariants every clock keeps: entries sorted, non-empty, contiguous, covering the
// domain exactly, with one clock per worker.
template <typename Clock>
void check_structure(const Clock& vc) {
    const auto entries = vc.entries();
    REQUIRE(entries.size() == vc.range_count());
    if (vc.domain().empty()) {
        REQUIRE(entries.empty());
        return;
    }
    REQUIRE_FALSE(entries.empty());
    REQUIRE(entries.front().range.begin == vc.domain().begin);
    REQUIRE(entries.back().range.end == vc.domain().end);
    for (std::size_t i = 0; i < entries.size(); ++i) {
        REQUIRE_FALSE(entries[i].range.empty());
        REQUIRE(entries[i].clocks.size() == vc.workers());
        if (i > 0) {
            REQUIRE(entries[i - 1].range.end == entries[i].range.begin);
        }
    }
}

// True when no two adjacent entries have equal clock vectors.
template <typename Clock>
bool is_minimal(const Clock& vc) {
    const auto entries = vc.entries();
    for (std::size_t i = 1; i < entries.size(); ++i) {
        if (entries[i - 1].clocks == entries[i].clocks) {
            return false;
        }
    }
    return true;
}

} // namespace

TEST_CASE("vector_clock: a fresh clock has one range at zero", "[core]") {
    const clock64 vc{3, range64{0, 100}};

    CHECK(vc.workers() == 3);
    CHECK(vc.domain() == range64{0, 100});
    CHECK(vc.range_count() == 1);
    REQUIRE(vc.entries().size() == 1);
    CHECK(vc.entries()[0].range == range64{0, 100});
    CHECK(vc.entries()[0].clocks == std::vector<clock_type>{0, 0, 0});
    CHECK(vc.get(0, 0) == 0);
    CHECK(vc.get(99, 2) == 0);
    CHECK(vc.min_clock(range64{0, 100}) == 0);
    check_structure(vc);

    SECTION("the default domain is the whole key space") {
        const clock64 whole{2};
        CHECK(whole.domain() == range64::all());
        CHECK(whole.range_count() == 1);
        CHECK(whole.get(range64::all().end - 1, 1) == 0);
    }
    SECTION("an empty domain has no entries") {
        const clock64 none{2, range64{5, 5}};
        CHECK(none.range_count() == 0);
        CHECK(none.domain().empty());
        CHECK(none.begin() == none.end());
        CHECK(none.min_clock(range64::all()) == no_clock);
        CHECK_THROWS_AS(none.get(5, 0), std::out_of_range);
    }
}

TEST_CASE("vector_clock: advancing a sub-range splits into three ranges", "[core]") {
    clock64 vc{2, range64{0, 100}};
    vc.advance(range64{20, 60}, 1);

    REQUIRE(vc.range_count() == 3);
    const auto e = vc.entries();
    CHECK(e[0].range == range64{0, 20});
    CHECK(e[1].range == range64{20, 60});
    CHECK(e[2].range == range64{60, 100});
    CHECK(e[0].clocks == std::vector<clock_type>{0, 0});
    CHECK(e[1].clocks == std::vector<clock_type>{0, 1});
    CHECK(e[2].clocks == std::vector<clock_type>{0, 0});

    CHECK(vc.get(19, 1) == 0);
    CHECK(vc.get(20, 1) == 1);
    CHECK(vc.get(59, 1) == 1);
    CHECK(vc.get(60, 1) == 0);
    CHECK(vc.get(30, 0) == 0);

    const auto c = vc.clocks(42);
    REQUIRE(c.size() == 2);
    CHECK(c[0] == 0);
    CHECK(c[1] == 1);
    check_structure(vc);
    CHECK(is_minimal(vc));
}

TEST_CASE("vector_clock: advancing the rest merges back into one range", "[core]") {
    clock64 vc{2, range64{0, 100}};
    vc.advance(range64{20, 60}, 1);
    REQUIRE(vc.range_count() == 3);

    vc.advance(range64{0, 20}, 1);
    CHECK(vc.range_count() == 2);
    vc.advance(range64{60, 100}, 1);
    CHECK(vc.range_count() == 1);
    CHECK(vc.entries()[0].range == range64{0, 100});
    CHECK(vc.entries()[0].clocks == std::vector<clock_type>{0, 1});

    SECTION("so does setting the range back") {
        vc.set(range64{30, 40}, 0, 7);
        CHECK(vc.range_count() == 3);
        vc.set(range64{30, 40}, 0, 0);
        CHECK(vc.range_count() == 1);
    }
    SECTION("a range advanced in several pieces merges too") {
        for (std::uint64_t b = 0; b < 100; b += 10) {
            vc.advance(range64{b, b + 10}, 0);
        }
        CHECK(vc.range_count() == 1);
        CHECK(vc.entries()[0].clocks == std::vector<clock_type>{1, 1});
    }
    check_structure(vc);
}

TEST_CASE("vector_clock: workers' clocks are independent", "[core]") {
    clock64 vc{3, range64{0, 100}};
    vc.advance(range64{0, 50}, 0);
    vc.advance(range64{0, 50}, 0);
    vc.set(range64{25, 75}, 1, 5);
    vc.advance(range64{90, 100}, 2);

    CHECK(vc.get(10, 0) == 2);
    CHECK(vc.get(10, 1) == 0);
    CHECK(vc.get(10, 2) == 0);
    CHECK(vc.get(30, 0) == 2);
    CHECK(vc.get(30, 1) == 5);
    CHECK(vc.get(60, 0) == 0);
    CHECK(vc.get(60, 1) == 5);
    CHECK(vc.get(95, 1) == 0);
    CHECK(vc.get(95, 2) == 1);
    // [0,25) [25,50) [50,75) [75,90) [90,100)
    CHECK(vc.range_count() == 5);

    // Setting one worker to the value another has leaves both unchanged elsewhere.
    vc.set(range64{0, 100}, 2, 0);
    CHECK(vc.get(95, 2) == 0);
    CHECK(vc.get(95, 0) == 0);
    CHECK(vc.range_count() == 4);
    check_structure(vc);
    CHECK(is_minimal(vc));
}

TEST_CASE("vector_clock: min_clock over ranges spanning several entries", "[core]") {
    clock64 vc{2, range64{0, 100}};
    vc.set(range64{0, 100}, 0, 10);
    vc.set(range64{0, 100}, 1, 10);
    vc.set(range64{20, 40}, 0, 3);
    vc.set(range64{50, 70}, 1, 6);
    vc.set(range64{80, 100}, 0, 12);
    // [0,20){10,10} [20,40){3,10} [40,50){10,10} [50,70){10,6} [70,80){10,10} [80,100){12,10}
    REQUIRE(vc.range_count() == 6);

    CHECK(vc.min_clock(range64{0, 100}) == 3);
    CHECK(vc.min_clock(range64{0, 20}) == 10);
    CHECK(vc.min_clock(range64{10, 21}) == 3);
    CHECK(vc.min_clock(range64{39, 60}) == 3);
    CHECK(vc.min_clock(range64{40, 60}) == 6);
    CHECK(vc.min_clock(range64{40, 50}) == 10);
    CHECK(vc.min_clock(range64{69, 71}) == 6);
    CHECK(vc.min_clock(range64{70, 100}) == 10);

    CHECK(vc.min_clock(range64{0, 100}, 0) == 3);
    CHECK(vc.min_clock(range64{0, 100}, 1) == 6);
    CHECK(vc.min_clock(range64{40, 100}, 0) == 10);
    CHECK(vc.min_clock(range64{80, 100}, 0) == 12);
    CHECK(vc.min_clock(range64{0, 50}, 1) == 10);

    SECTION("ranges are clamped to the domain") {
        CHECK(vc.min_clock(range64::all()) == 3);
        CHECK(vc.min_clock(range64{90, 1000}, 0) == 12);
    }
    SECTION("a range missing the domain has no minimum") {
        CHECK(vc.min_clock(range64{100, 200}) == no_clock);
        CHECK(vc.min_clock(range64{30, 30}) == no_clock);
        CHECK(vc.min_clock(range64{100, 200}, 1) == no_clock);
    }
}

TEST_CASE("vector_clock: explicit split then merge", "[core]") {
    clock64 vc{2, range64{0, 100}};

    vc.split(40);
    CHECK(vc.range_count() == 2);
    vc.split(40); // already a boundary
    CHECK(vc.range_count() == 2);
    vc.split(0);   // the domain's begin
    vc.split(100); // outside the domain
    vc.split(500);
    CHECK(vc.range_count() == 2);
    vc.split(70);
    REQUIRE(vc.range_count() == 3);
    CHECK(vc.entries()[0].range == range64{0, 40});
    CHECK(vc.entries()[1].range == range64{40, 70});
    CHECK(vc.entries()[2].range == range64{70, 100});
    for (const auto& e : vc) {
        CHECK(e.clocks == std::vector<clock_type>{0, 0});
    }
    check_structure(vc);
    CHECK_FALSE(is_minimal(vc));

    SECTION("merge joins equal neighbours") {
        vc.merge();
        CHECK(vc.range_count() == 1);
        CHECK(vc.entries()[0].range == range64{0, 100});
    }
    SECTION("merge keeps different neighbours apart") {
        vc.set(range64{40, 70}, 1, 4);
        CHECK(vc.range_count() == 3);
        vc.split(10);
        vc.split(90);
        CHECK(vc.range_count() == 5);
        vc.merge();
        CHECK(vc.range_count() == 3);
        CHECK(is_minimal(vc));
    }
    SECTION("splits do not change any clock") {
        const clock64 fresh{2, range64{0, 100}};
        CHECK(vc == fresh);
    }
}

TEST_CASE("vector_clock: set outside the domain is clamped", "[core]") {
    clock64 vc{2, range64{10, 20}};

    vc.set(range64{0, 15}, 0, 3);
    CHECK(vc.range_count() == 2);
    CHECK(vc.entries()[0].range == range64{10, 15});
    CHECK(vc.get(10, 0) == 3);
    CHECK(vc.get(14, 0) == 3);
    CHECK(vc.get(15, 0) == 0);

    vc.advance(range64{18, 1000}, 1);
    CHECK(vc.range_count() == 3);
    CHECK(vc.entries()[2].range == range64{18, 20});
    CHECK(vc.get(19, 1) == 1);

    const clock64 before = vc;
    vc.set(range64{0, 10}, 0, 9);
    vc.set(range64{20, 30}, 0, 9);
    vc.advance(range64{25, 5}, 1);
    CHECK(vc == before);

    vc.set(range64::all(), 0, 1);
    vc.set(range64::all(), 1, 1);
    CHECK(vc.range_count() == 1);
    CHECK(vc.entries()[0].range == range64{10, 20});

    SECTION("single-key lookups outside the domain throw") {
        CHECK_THROWS_AS(vc.get(9, 0), std::out_of_range);
        CHECK_THROWS_AS(vc.get(20, 0), std::out_of_range);
        CHECK_THROWS_AS(vc.clocks(25), std::out_of_range);
    }
    check_structure(vc);
}

TEST_CASE("vector_clock: add and remove workers", "[core]") {
    clock64 vc{2, range64{0, 100}};
    vc.set(range64{0, 50}, 0, 4);
    vc.set(range64{50, 100}, 1, 2);
    REQUIRE(vc.range_count() == 2);

    SECTION("a new worker starts at 0") {
        CHECK(vc.add_worker() == 2);
        CHECK(vc.workers() == 3);
        CHECK(vc.get(10, 2) == 0);
        CHECK(vc.get(60, 2) == 0);
        CHECK(vc.get(10, 0) == 4);
        CHECK(vc.range_count() == 2);
        CHECK(vc.min_clock(range64{0, 100}) == 0);
        vc.advance(range64{0, 100}, 2);
        CHECK(vc.get(99, 2) == 1);
        check_structure(vc);
    }
    SECTION("a new worker can start at a given clock") {
        CHECK(vc.add_worker(7) == 2);
        CHECK(vc.clocks(10)[2] == 7);
        CHECK(vc.clocks(60)[2] == 7);
        CHECK(vc.min_clock(range64{0, 100}, 2) == 7);
    }
    SECTION("removing a worker shifts the later ones down") {
        vc.add_worker(9);
        vc.remove_worker(0);
        CHECK(vc.workers() == 2);
        CHECK(vc.get(10, 0) == 0);
        CHECK(vc.get(60, 0) == 2);
        CHECK(vc.get(10, 1) == 9);
        CHECK(vc.range_count() == 2);
        check_structure(vc);
    }
    SECTION("removing the worker that made entries differ merges them") {
        vc.remove_worker(1);
        // Worker 0's clocks still differ between the halves.
        CHECK(vc.range_count() == 2);
        vc.remove_worker(0);
        CHECK(vc.workers() == 0);
        CHECK(vc.range_count() == 1);
        CHECK(vc.min_clock(range64{0, 100}) == no_clock);
        CHECK(vc.clocks(50).empty());
        vc.add_worker(3);
        CHECK(vc.range_count() == 1);
        CHECK(vc.get(0, 0) == 3);
        check_structure(vc);
    }
}

TEST_CASE("vector_clock: out-of-range workers throw", "[core]") {
    clock64 vc{2, range64{0, 100}};

    CHECK_THROWS_AS(vc.get(0, 2), std::out_of_range);
    CHECK_THROWS_AS(vc.set(range64{0, 10}, 2, 1), std::out_of_range);
    CHECK_THROWS_AS(vc.advance(range64{0, 10}, 5), std::out_of_range);
    CHECK_THROWS_AS(vc.min_clock(range64{0, 10}, 2), std::out_of_range);
    CHECK_THROWS_AS(vc.remove_worker(2), std::out_of_range);
    // Checked even when the range misses the domain.
    CHECK_THROWS_AS(vc.set(range64{200, 300}, 2, 1), std::out_of_range);
    CHECK_THROWS_WITH(vc.get(0, 7),
                      Catch::Contains("worker index 7") && Catch::Contains("2 workers"));

    // A failed call changes nothing.
    CHECK(vc == clock64{2, range64{0, 100}});
    CHECK(vc.range_count() == 1);
}

TEST_CASE("vector_clock: equality compares clocks, not entry boundaries", "[core]") {
    clock64 a{2, range64{0, 100}};
    clock64 b{2, range64{0, 100}};
    CHECK(a == b);

    a.advance(range64{10, 20}, 0);
    CHECK(a != b);
    b.advance(range64{10, 15}, 0);
    CHECK(a != b);
    b.advance(range64{15, 20}, 0);
    CHECK(a == b);

    b.split(50);
    b.split(12);
    CHECK(a == b);
    CHECK(b == a);

    CHECK(a != clock64{3, range64{0, 100}});
    CHECK(a != clock64{2, range64{0, 99}});
    CHECK(clock64{2, range64{3, 3}} == clock64{2, range64{7, 7}});
}

TEST_CASE("vector_clock: works with narrow key types", "[core]") {
    petrel::vector_clock<std::uint8_t> vc{2};
    using range8 = petrel::key_range<std::uint8_t>;

    vc.advance(range8{0, 255}, 0);
    CHECK(vc.range_count() == 1);
    vc.advance(range8{200, 255}, 1);
    CHECK(vc.range_count() == 2);
    CHECK(vc.get(254, 1) == 1);
    CHECK(vc.get(199, 1) == 0);
    CHECK_THROWS_WITH(vc.get(255, 0), Catch::Contains("key 255"));
}

namespace {

// The same random operations applied to a vector_clock and to one clock vector per key.
template <typename Key>
void run_against_reference(petrel::key_range<Key> domain, std::size_t workers, Key max_random_key,
                           int ops, std::uint32_t seed, bool reshape) {
    using range = petrel::key_range<Key>;
    using clock = petrel::vector_clock<Key>;
    using ct = typename clock::clock_type;

    clock vc{workers, domain};
    std::vector<std::vector<ct>> ref(static_cast<std::size_t>(domain.end),
                                     std::vector<ct>(workers, 0));

    std::mt19937 rng{seed};
    auto uniform = [&rng](std::uint64_t lo, std::uint64_t hi) {
        return std::uniform_int_distribution<std::uint64_t>{lo, hi}(rng);
    };
    auto random_key = [&] { return static_cast<Key>(uniform(0, max_random_key)); };

    for (int op = 0; op < ops; ++op) {
        INFO("operation " << op);
        const range r{random_key(), random_key()};
        const std::size_t roll = uniform(0, 99);
        // Without explicit splits set and advance keep the clock minimal; with them, only
        // merge (also run by remove_worker) restores it.
        bool expect_minimal = !reshape;

        if (!reshape || roll < 80) {
            if (vc.workers() == 0) {
                continue;
            }
            const auto w = static_cast<std::size_t>(uniform(0, vc.workers() - 1));
            if (roll % 2 == 0) {
                const ct t = uniform(0, 4);
                vc.set(r, w, t);
                for (Key k = domain.begin; k < domain.end; ++k) {
                    if (r.contains(k)) {
                        ref[k][w] = t;
                    }
                }
            } else {
                vc.advance(r, w);
                for (Key k = domain.begin; k < domain.end; ++k) {
                    if (r.contains(k)) {
                        ++ref[k][w];
                    }
                }
            }
        } else if (roll < 88) {
            vc.split(r.begin);
        } else if (roll < 92) {
            vc.merge();
            expect_minimal = true;
        } else if (roll < 96) {
            if (vc.workers() < 6) {
                const ct start = uniform(0, 3);
                CHECK(vc.add_worker(start) == ref[domain.begin].size());
                for (auto& row : ref) {
                    row.push_back(start);
                }
            }
        } else if (vc.workers() > 1) {
            const auto w = static_cast<std::size_t>(uniform(0, vc.workers() - 1));
            vc.remove_worker(w);
            expect_minimal = true;
            for (auto& row : ref) {
                row.erase(row.begin() + static_cast<std::ptrdiff_t>(w));
            }
        }

        check_structure(vc);
        if (expect_minimal) {
            REQUIRE(is_minimal(vc));
        }
        REQUIRE(vc.workers() == ref[domain.begin].size());
        for (Key k = domain.begin; k < domain.end; ++k) {
            const auto c = vc.clocks(k);
            REQUIRE(std::vector<ct>(c.begin(), c.end()) == ref[k]);
            for (std::size_t w = 0; w < vc.workers(); ++w) {
                REQUIRE(vc.get(k, w) == ref[k][w]);
            }
        }

        // min_clock against the reference over a random range.
        const range q{random_key(), random_key()};
        ct expected = std::numeric_limits<ct>::max();
        std::vector<ct> expected_per(vc.workers(), std::numeric_limits<ct>::max());
        for (Key k = domain.begin; k < domain.end; ++k) {
            if (q.contains(k)) {
                for (std::size_t w = 0; w < vc.workers(); ++w) {
                    expected = std::min(expected, ref[k][w]);
                    expected_per[w] = std::min(expected_per[w], ref[k][w]);
                }
            }
        }
        REQUIRE(vc.min_clock(q) == expected);
        for (std::size_t w = 0; w < vc.workers(); ++w) {
            REQUIRE(vc.min_clock(q, w) == expected_per[w]);
        }
    }
}

} // namespace

TEST_CASE("vector_clock: random set and advance match a per-key model", "[core]") {
    SECTION("domain [0, 64), 3 workers") {
        run_against_reference<std::uint32_t>({0, 64}, 3, 72, 2000, 20140806u, false);
    }
    SECTION("domain [16, 48), 64-bit keys") {
        run_against_reference<std::uint64_t>({16, 48}, 3, 64, 2000, 42u, false);
    }
}

TEST_CASE("vector_clock: random splits, merges and membership changes match a per-key model",
          "[core]") {
    run_against_reference<std::uint32_t>({0, 64}, 3, 72, 2000, 7u, true);
}
