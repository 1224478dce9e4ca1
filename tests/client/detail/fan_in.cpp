#include <petrel/client/detail/fan_in.hpp>

#include <petrel/core/error.hpp>
#include <petrel/transport/detail/completion.hpp>

#include <catch2/catch.hpp>

#include <asio/cancellation_signal.hpp>
#include <asio/error.hpp>
#include <asio/io_context.hpp>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

using petrel::errc;
using petrel::detail::fan_in;
using petrel::detail::fan_in_with;

namespace {

const std::error_code aborted = make_error_code(asio::error::operation_aborted);

/// What a test completion saw: how often it ran, and its last error.
struct record {
    std::atomic<int> calls{0};
    std::mutex mutex;
    std::error_code error;
    std::size_t extra = 0; // the size of the vector it got, for the two-argument form

    [[nodiscard]] std::error_code last() {
        std::lock_guard lock(mutex);
        return error;
    }
};

/// A completion with the shape of `detail::completion`: it runs inline and writes to
/// its record.
struct probe {
    std::shared_ptr<record> r;

    void dispatch(std::error_code ec) && {
        {
            std::lock_guard lock(r->mutex);
            r->error = ec;
        }
        r->calls.fetch_add(1);
    }

    void dispatch(std::error_code ec, std::vector<int> v) && {
        {
            std::lock_guard lock(r->mutex);
            r->error = ec;
            r->extra = v.size();
        }
        r->calls.fetch_add(1);
    }
};

using probe_fan_in = fan_in_with<probe>;

/// What an operation does with an arrival: the last one completes with the first error.
void arrive_and_complete(probe_fan_in& f, std::error_code ec) {
    if (f.arrive(ec)) {
        if (auto d = f.take()) {
            std::move(*d).dispatch(f.error());
        }
    }
}

/// Starts `n` threads that wait for one signal, then run `body(i)`; joins them.
template <typename Body>
void race(std::size_t n, Body body) {
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        threads.emplace_back([&go, &body, i] {
            while (!go.load()) {
                std::this_thread::yield();
            }
            body(i);
        });
    }
    go = true;
    for (auto& t : threads) {
        t.join();
    }
}

} // namespace

TEST_CASE("fan_in: completes once, on the last of its arrivals from several threads",
          "[client][fan_in]") {
    constexpr std::size_t threads = 4;
    constexpr std::size_t per_thread = 8;
    constexpr int rounds = 300;
    for (int round = 0; round < rounds; ++round) {
        auto r = std::make_shared<record>();
        probe_fan_in f(probe{r}, threads * per_thread);
        std::atomic<int> last{0};
        std::atomic<int> arrived{0};
        std::atomic<int> early{0}; // a "last" arrival that saw others still missing
        race(threads, [&](std::size_t) {
            for (std::size_t k = 0; k < per_thread; ++k) {
                arrived.fetch_add(1);
                if (f.arrive({})) {
                    last.fetch_add(1);
                    if (arrived.load() != static_cast<int>(threads * per_thread)) {
                        early.fetch_add(1);
                    }
                    if (auto d = f.take()) {
                        std::move(*d).dispatch(f.error());
                    }
                }
            }
        });
        REQUIRE(last == 1);
        REQUIRE(early == 0);
        REQUIRE(r->calls == 1);
        REQUIRE(r->last() == std::error_code{});
        REQUIRE(f.remaining() == 0);
        REQUIRE_FALSE(f.live());
        REQUIRE_FALSE(f.cancelled());
    }
}

TEST_CASE("fan_in: keeps the first error in time, not the first part's", "[client][fan_in]") {
    auto r = std::make_shared<record>();
    probe_fan_in f(probe{r}, 4);
    arrive_and_complete(f, {});
    arrive_and_complete(f, make_error_code(errc::node_failed)); // arrives second
    CHECK(f.error() == errc::node_failed);
    arrive_and_complete(f, make_error_code(errc::timed_out));
    arrive_and_complete(f, {});
    CHECK(r->calls == 1);
    CHECK(r->last() == errc::node_failed);
}

TEST_CASE("fan_in: does not complete at an early error: it waits for the last arrival",
          "[client][fan_in]") {
    auto r = std::make_shared<record>();
    probe_fan_in f(probe{r}, 3);
    arrive_and_complete(f, make_error_code(errc::timed_out));
    CHECK(r->calls == 0);
    CHECK(f.live());
    CHECK(f.remaining() == 2);
    arrive_and_complete(f, {});
    CHECK(r->calls == 0);
    arrive_and_complete(f, make_error_code(errc::node_failed));
    CHECK(r->calls == 1);
    CHECK(r->last() == errc::timed_out);
}

TEST_CASE("fan_in: keeps the error that arrived first when parts race", "[client][fan_in]") {
    // Each thread fails with its own error; the one recorded is the first whose arrive
    // ran, which the test learns by serialising the arrivals in a random order.
    constexpr std::size_t parts = 6;
    for (int round = 0; round < 200; ++round) {
        auto r = std::make_shared<record>();
        probe_fan_in f(probe{r}, parts);
        std::mutex order;
        std::vector<std::size_t> seen;
        race(parts, [&](std::size_t i) {
            const auto ec = std::error_code(static_cast<int>(i) + 1, std::generic_category());
            std::lock_guard lock(order); // makes "first in time" observable
            seen.push_back(i);
            arrive_and_complete(f, ec);
        });
        REQUIRE(r->calls == 1);
        REQUIRE(r->last() ==
                std::error_code(static_cast<int>(seen.front()) + 1, std::generic_category()));
    }
}

TEST_CASE("fan_in: cancelled before any arrival completes once, aborted", "[client][fan_in]") {
    auto r = std::make_shared<record>();
    probe_fan_in f(probe{r}, 3);
    f.abort();
    CHECK(r->calls == 1);
    CHECK(r->last() == aborted);
    CHECK(f.cancelled());
    CHECK_FALSE(f.live());
    bool ran = false;
    CHECK_FALSE(f.if_live([&] { ran = true; }));
    CHECK_FALSE(ran);
    // The parts are still counted, so that the last one is known.
    CHECK_FALSE(f.arrive({}));
    CHECK_FALSE(f.arrive(make_error_code(errc::node_failed)));
    CHECK(f.arrive({}));
    CHECK_FALSE(f.take());
    f.abort(); // a second cancel does nothing
    CHECK(r->calls == 1);
    CHECK(r->last() == aborted);
}

TEST_CASE("fan_in: cancelled after it completed does nothing", "[client][fan_in]") {
    auto r = std::make_shared<record>();
    probe_fan_in f(probe{r}, 2);
    arrive_and_complete(f, make_error_code(errc::node_failed));
    arrive_and_complete(f, {});
    REQUIRE(r->calls == 1);
    f.abort();
    CHECK(r->calls == 1);
    CHECK(r->last() == errc::node_failed);
    CHECK_FALSE(f.cancelled());
}

TEST_CASE("fan_in: cancelled between the last arrival and its completion completes aborted",
          "[client][fan_in]") {
    auto r = std::make_shared<record>();
    probe_fan_in f(probe{r}, 2);
    CHECK_FALSE(f.arrive({}));
    CHECK(f.arrive({}));
    f.abort(); // before the last arrival took the completion
    CHECK_FALSE(f.take());
    CHECK(r->calls == 1);
    CHECK(r->last() == aborted);
}

TEST_CASE("fan_in: cancelled during the arrivals completes once, and nothing is written to "
          "the caller's memory after it",
          "[client][fan_in]") {
    constexpr std::size_t parts = 8;
    int aborted_rounds = 0;
    int completed_rounds = 0;
    for (int round = 0; round < 400; ++round) {
        auto r = std::make_shared<record>();
        probe_fan_in f(probe{r}, parts);
        std::vector<int> caller(parts, 0);         // the caller's memory
        std::atomic<bool> released{false};         // set once the completion ran
        std::atomic<int> written_after_release{0}; // writes that came too late
        race(parts + 1, [&](std::size_t i) {
            if (i == parts) {
                f.abort();
                if (f.cancelled()) {
                    released = true; // the abort ran the completion
                }
                return;
            }
            f.if_live([&] {
                if (released.load()) {
                    written_after_release.fetch_add(1);
                }
                caller[i] = 1;
            });
            if (f.arrive(i % 3 == 0 ? make_error_code(errc::timed_out) : std::error_code{})) {
                if (auto d = f.take()) {
                    std::move(*d).dispatch(f.error());
                    released = true;
                }
            }
        });
        REQUIRE(r->calls == 1);
        REQUIRE(written_after_release == 0);
        REQUIRE(f.remaining() == 0);
        REQUIRE_FALSE(f.live());
        if (f.cancelled()) {
            ++aborted_rounds;
            REQUIRE(r->last() == aborted);
        } else {
            ++completed_rounds;
            REQUIRE(r->last() == errc::timed_out);
            for (const int c : caller) {
                REQUIRE(c == 1); // every part wrote before the completion
            }
        }
    }
    CHECK(aborted_rounds + completed_rounds == 400);
}

TEST_CASE("fan_in: if_live runs under the lock only while the completion is not handed out",
          "[client][fan_in]") {
    fan_in f(2);
    int n = 0;
    CHECK(f.if_live([&] { ++n; }));
    CHECK(f.live());
    CHECK(f.claim());
    CHECK_FALSE(f.claim());
    CHECK_FALSE(f.cancel()); // already handed out
    CHECK_FALSE(f.if_live([&] { ++n; }));
    CHECK(n == 1);
    CHECK_FALSE(f.live());
    CHECK_FALSE(f.cancelled());
}

TEST_CASE("fan_in: refuses zero expected arrivals, and ignores arrivals beyond those expected",
          "[client][fan_in]") {
    CHECK_THROWS_AS(fan_in(0), std::invalid_argument);
    fan_in f(1);
    CHECK(f.arrive({}));
    CHECK_FALSE(f.arrive(make_error_code(errc::node_failed)));
    CHECK(f.remaining() == 0);
    CHECK(f.error() == std::error_code{});
}

TEST_CASE("fan_in: abort_on_cancel completes with operation_aborted and the empty results",
          "[client][fan_in]") {
    auto r = std::make_shared<record>();
    auto f = std::make_shared<probe_fan_in>(probe{r}, 2);
    asio::cancellation_signal signal;
    petrel::detail::abort_on_cancel(signal.slot(), f, std::vector<int>{7, 8, 9});
    CHECK(signal.slot().has_handler());
    CHECK(f->arrive({}) == false);
    signal.emit(asio::cancellation_type::terminal);
    CHECK(r->calls == 1);
    CHECK(r->last() == aborted);
    CHECK(r->extra == 3);
    CHECK(f->arrive({})); // the last arrival is still known
    CHECK_FALSE(f->take());
    signal.emit(asio::cancellation_type::terminal);
    CHECK(r->calls == 1);
}

TEST_CASE("fan_in: abort_on_cancel holds the state weakly and ignores a slot not connected",
          "[client][fan_in]") {
    auto r = std::make_shared<record>();
    asio::cancellation_signal signal;
    std::weak_ptr<probe_fan_in> weak;
    {
        auto f = std::make_shared<probe_fan_in>(probe{r}, 1);
        weak = f;
        petrel::detail::abort_on_cancel(signal.slot(), f);
        petrel::detail::abort_on_cancel(asio::cancellation_slot{}, f); // not connected
    }
    CHECK(weak.expired());
    signal.emit(asio::cancellation_type::terminal);
    CHECK(r->calls == 0);
}

TEST_CASE("fan_in: fan_in_with hands a detail::completion out to run on its executor",
          "[client][fan_in]") {
    using handler = std::function<void(std::error_code)>;
    using completion = petrel::detail::completion<handler, asio::io_context::executor_type>;
    asio::io_context io;
    std::error_code got;
    int calls = 0;
    handler h = [&](std::error_code ec) {
        got = ec;
        ++calls;
    };
    auto f = std::make_shared<fan_in_with<completion>>(completion(h, io.get_executor()), 1);
    std::thread other([&] {
        if (f->arrive(make_error_code(errc::node_failed))) {
            if (auto d = f->take()) {
                std::move(*d).dispatch(f->error()); // not on io's thread: queued there
            }
        }
    });
    other.join();
    CHECK(calls == 0);
    io.run();
    CHECK(calls == 1);
    CHECK(got == errc::node_failed);
}
